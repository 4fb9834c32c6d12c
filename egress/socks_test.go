package egress_test

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"testing"
)

// socksConnect runs a no-auth SOCKS5 handshake with the given command,
// address type and address bytes, and returns the connection and the
// reply code.
func socksConnect(t testing.TB, proxyAddr string, cmd, atyp byte, addr []byte, port uint16) (net.Conn, byte) {
	t.Helper()
	c, err := net.Dial("tcp", proxyAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Write([]byte{5, 1, 0}); err != nil {
		t.Fatal(err)
	}
	var m [2]byte
	if _, err := io.ReadFull(c, m[:]); err != nil || m != [2]byte{5, 0} {
		t.Fatalf("method reply = %v, %v; want [5 0]", m, err)
	}
	req := []byte{5, cmd, 0, atyp}
	if atyp == 3 {
		req = append(req, byte(len(addr)))
	}
	req = append(req, addr...)
	req = binary.BigEndian.AppendUint16(req, port)
	if _, err := c.Write(req); err != nil {
		t.Fatal(err)
	}
	var rep [10]byte
	if _, err := io.ReadFull(c, rep[:]); err != nil {
		t.Fatalf("read SOCKS reply: %v", err)
	}
	return c, rep[1]
}

func TestSOCKS5(t *testing.T) {
	h, ok, evil := twoServers(t)
	tests := []struct {
		name    string
		cmd     byte
		atyp    byte
		addr    []byte
		port    uint16
		wantRep byte
	}{
		{"domain-allowed", 1, 3, []byte("allowed.test"), ok.port, 0},
		{"domain-upper-case", 1, 3, []byte("Allowed.Test."), ok.port, 0},
		{"ipv4-listed", 1, 1, []byte{127, 0, 0, 1}, ok.port, 0},
		{"domain-not-granted", 1, 3, []byte("evil.test"), evil.port, 2},
		{"ipv4-not-listed", 1, 1, []byte{127, 0, 0, 1}, evil.port, 2},
		{"ipv6-not-listed", 1, 4, net.IPv6loopback, ok.port, 2},
		{"domain-is-decimal-ip", 1, 3, []byte("2130706433"), ok.port, 2},
		{"bind", 2, 3, []byte("allowed.test"), ok.port, 7},
		{"udp-associate", 3, 1, []byte{127, 0, 0, 1}, ok.port, 7},
		{"bad-address-type", 1, 9, nil, ok.port, 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := ok.accepted()
			c, rep := socksConnect(t, h.socksAddr, tt.cmd, tt.atyp, tt.addr, tt.port)
			if rep != tt.wantRep {
				t.Fatalf("SOCKS reply = %#x, want %#x", rep, tt.wantRep)
			}
			if evil.accepted() != 0 {
				t.Fatalf("denied server accepted %d connections", evil.accepted())
			}
			if rep != 0 {
				if ok.accepted() != before {
					t.Errorf("server accepted a connection for a refused request")
				}
				return
			}
			if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body) // compared below
			resp.Body.Close()
			if want := "hello from allowed host=allowed.test "; string(b) != want {
				t.Errorf("through SOCKS got %q, want %q", b, want)
			}
		})
	}
}

func TestSOCKS5NoAcceptableMethod(t *testing.T) {
	h, _, _ := twoServers(t)
	c, err := net.Dial("tcp", h.socksAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte{5, 1, 2}); err != nil { // username/password only
		t.Fatal(err)
	}
	var m [2]byte
	if _, err := io.ReadFull(c, m[:]); err != nil || m != [2]byte{5, 0xff} {
		t.Errorf("method reply = %v, %v; want [5 255]", m, err)
	}
}
