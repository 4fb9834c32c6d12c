package egress

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"testing/iotest"
)

// realClientHello returns the first flight crypto/tls sends for sni ("" for
// none): one handshake record holding the ClientHello.
func realClientHello(t testing.TB, sni string) []byte {
	t.Helper()
	client, server := net.Pipe()
	defer server.Close()
	go func() {
		defer client.Close()
		// The handshake fails when server closes; only its first bytes matter.
		tls.Client(client, &tls.Config{ServerName: sni, InsecureSkipVerify: true}).Handshake()
	}()
	var hdr [5]byte
	if _, err := io.ReadFull(server, hdr[:]); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, binary.BigEndian.Uint16(hdr[3:]))
	if _, err := io.ReadFull(server, body); err != nil {
		t.Fatal(err)
	}
	return append(hdr[:], body...)
}

// rerecord splits the handshake payload of one record into records of at
// most n bytes each.
func rerecord(rec []byte, n int) []byte {
	payload := rec[5:]
	var out []byte
	for len(payload) > 0 {
		k := min(n, len(payload))
		out = append(out, rec[0], rec[1], rec[2], byte(k>>8), byte(k))
		out = append(out, payload[:k]...)
		payload = payload[k:]
	}
	return out
}

func TestReadClientHello(t *testing.T) {
	hello := realClientHello(t, "allowed.test")
	noSNI := realClientHello(t, "")
	split := rerecord(hello, 50)
	tiny := rerecord(hello, 3) // the 4-byte handshake header spans two records
	tests := []struct {
		name    string
		in      []byte
		oneByte bool
		wantSNI string
		wantErr bool
	}{
		{"whole", hello, false, "allowed.test", false},
		{"one-byte-reads", hello, true, "allowed.test", false},
		{"split-records", split, false, "allowed.test", false},
		{"split-records-one-byte-reads", split, true, "allowed.test", false},
		{"header-split-across-records", tiny, false, "allowed.test", false},
		{"no-sni", noSNI, false, "", false},
		{"not-handshake", append([]byte{23}, hello[1:]...), false, "", true},
		{"ssh-banner", []byte("SSH-2.0-OpenSSH_9.2\r\n"), false, "", true},
		{"truncated", hello[:len(hello)-10], false, "", true},
		{"empty-record", []byte{22, 3, 1, 0, 0}, false, "", true},
		{"oversized-record", []byte{22, 3, 1, 0x40, 0x01}, false, "", true},
		{"server-hello", append([]byte{22, 3, 1, 0, 4}, 2, 0, 0, 0), false, "", true},
		{"huge-length", append([]byte{22, 3, 1, 0, 4}, 1, 0xff, 0xff, 0xff), false, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r io.Reader = bytes.NewReader(tt.in)
			if tt.oneByte {
				r = iotest.OneByteReader(r)
			}
			raw, sni, err := readClientHello(r)
			if (err != nil) != tt.wantErr {
				t.Fatalf("readClientHello() error = %v, want error %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if sni != tt.wantSNI || !bytes.Equal(raw, tt.in) {
				t.Errorf("readClientHello() = (%d bytes, %q), want (%d bytes, %q)", len(raw), sni, len(tt.in), tt.wantSNI)
			}
		})
	}
}

func TestReadClientHelloTrailingInRecord(t *testing.T) {
	hello := realClientHello(t, "allowed.test")
	// Extra handshake bytes inside the same record as the hello.
	rec := append([]byte(nil), hello...)
	rec = append(rec, 1, 0, 0, 0)
	binary.BigEndian.PutUint16(rec[3:], uint16(len(rec)-5))
	if _, _, err := readClientHello(bytes.NewReader(rec)); err == nil {
		t.Errorf("readClientHello(hello+trailing) = nil error, want an error")
	}
}

func FuzzReadClientHello(f *testing.F) {
	f.Add(realClientHello(f, "allowed.test"))
	f.Add(realClientHello(f, ""))
	f.Add(rerecord(realClientHello(f, "a.test"), 7))
	f.Add([]byte{22, 3, 1, 0, 4, 1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		raw, sni, err := readClientHello(bytes.NewReader(in))
		if err != nil {
			return
		}
		if !bytes.HasPrefix(in, raw) {
			t.Errorf("raw records are not a prefix of the input")
		}
		for _, c := range []byte(sni) {
			if c <= ' ' || c >= 0x7f {
				t.Errorf("SNI %q has byte %#x", sni, c)
			}
		}
	})
}
