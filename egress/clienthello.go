package egress

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// TLS constants (RFC 8446 §5.1, §4; RFC 6066 §3).
const (
	recordTypeHandshake  = 22
	handshakeClientHello = 1
	extServerName        = 0
	nameTypeHostName     = 0
	maxRecordPayload     = 1 << 14
	// maxClientHello bounds the ClientHello message. Post-quantum key
	// shares make today's hellos about 2 KiB; 32 KiB leaves ample room
	// while keeping a hostile client from making us buffer much.
	maxClientHello = 32 << 10
)

// readClientHello reads TLS records from r until they hold one complete
// ClientHello, which may span several records and several reads. It
// returns the records exactly as read, to be forwarded unchanged, and the
// SNI host name, "" when the hello has none.
func readClientHello(r io.Reader) (raw []byte, sni string, err error) {
	var msg []byte // handshake bytes reassembled from record payloads
	for {
		var hdr [5]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return nil, "", fmt.Errorf("read TLS record header: %w", err)
		}
		if hdr[0] != recordTypeHandshake {
			return nil, "", fmt.Errorf("first bytes are not a TLS handshake record (type %d)", hdr[0])
		}
		if hdr[1] != 3 {
			return nil, "", fmt.Errorf("unsupported TLS record version %d.%d", hdr[1], hdr[2])
		}
		n := int(binary.BigEndian.Uint16(hdr[3:]))
		if n == 0 || n > maxRecordPayload {
			return nil, "", fmt.Errorf("TLS record length %d is out of range", n)
		}
		if len(msg)+n > 4+maxClientHello {
			return nil, "", errors.New("TLS ClientHello is larger than 32 KiB")
		}
		start := len(raw)
		raw = append(raw, hdr[:]...)
		raw = append(raw, make([]byte, n)...)
		if _, err := io.ReadFull(r, raw[start+5:]); err != nil {
			return nil, "", fmt.Errorf("read TLS record: %w", err)
		}
		msg = append(msg, raw[start+5:]...)
		if len(msg) < 4 {
			continue
		}
		if msg[0] != handshakeClientHello {
			return nil, "", fmt.Errorf("first TLS handshake message is type %d, not a ClientHello", msg[0])
		}
		size := int(msg[1])<<16 | int(msg[2])<<8 | int(msg[3])
		if size > maxClientHello {
			return nil, "", errors.New("TLS ClientHello is larger than 32 KiB")
		}
		if len(msg) < 4+size {
			continue
		}
		if len(msg) > 4+size {
			// Nothing may follow the ClientHello in the client's first flight.
			return nil, "", errors.New("unexpected TLS handshake data after the ClientHello")
		}
		sni, err := parseClientHello(msg[4:])
		if err != nil {
			return nil, "", err
		}
		return raw, sni, nil
	}
}

// parseClientHello returns the host_name of the server_name extension in
// a ClientHello body (RFC 8446 §4.1.2), "" when there is none. Any
// malformation is an error: a hello we cannot read is not let through.
func parseClientHello(b []byte) (string, error) {
	s := hsReader(b)
	var sessionID, suites, compression, exts hsReader
	if !s.skip(2+32) || !s.vec8(&sessionID) || len(sessionID) > 32 ||
		!s.vec16(&suites) || len(suites) < 2 || len(suites)%2 != 0 ||
		!s.vec8(&compression) || len(compression) < 1 {
		return "", errors.New("malformed TLS ClientHello")
	}
	if len(s) == 0 {
		return "", nil // no extensions, so no SNI
	}
	if !s.vec16(&exts) || len(s) != 0 {
		return "", errors.New("malformed TLS ClientHello extensions")
	}
	seen := make(map[uint16]bool)
	sni := ""
	for len(exts) > 0 {
		var typ uint16
		var data hsReader
		if !exts.u16(&typ) || !exts.vec16(&data) {
			return "", errors.New("malformed TLS ClientHello extension")
		}
		if seen[typ] {
			return "", fmt.Errorf("TLS ClientHello repeats extension %d", typ)
		}
		seen[typ] = true
		if typ != extServerName {
			continue
		}
		name, err := parseServerName(data)
		if err != nil {
			return "", err
		}
		sni = name
	}
	return sni, nil
}

// parseServerName reads a ServerNameList (RFC 6066 §3) holding exactly one
// host_name.
func parseServerName(data hsReader) (string, error) {
	var list hsReader
	if !data.vec16(&list) || len(data) != 0 || len(list) == 0 {
		return "", errors.New("malformed TLS server_name extension")
	}
	host := ""
	for len(list) > 0 {
		var typ uint8
		var name hsReader
		if !list.u8(&typ) || !list.vec16(&name) {
			return "", errors.New("malformed TLS server_name entry")
		}
		if typ != nameTypeHostName {
			continue
		}
		if host != "" {
			return "", errors.New("TLS server_name lists more than one host name")
		}
		if len(name) == 0 {
			return "", errors.New("TLS server_name is empty")
		}
		for _, c := range name {
			if c <= ' ' || c >= 0x7f {
				return "", errors.New("TLS server_name contains a byte that cannot be in a host name")
			}
		}
		host = string(name)
	}
	if host == "" {
		return "", errors.New("TLS server_name has no host name")
	}
	return host, nil
}

// hsReader reads big-endian TLS vectors. Each method reports false,
// consuming nothing useful, when the input is too short.
type hsReader []byte

func (r *hsReader) skip(n int) bool {
	if len(*r) < n {
		return false
	}
	*r = (*r)[n:]
	return true
}

func (r *hsReader) u8(v *uint8) bool {
	if len(*r) < 1 {
		return false
	}
	*v = (*r)[0]
	*r = (*r)[1:]
	return true
}

func (r *hsReader) u16(v *uint16) bool {
	if len(*r) < 2 {
		return false
	}
	*v = binary.BigEndian.Uint16(*r)
	*r = (*r)[2:]
	return true
}

func (r *hsReader) vec(n int, out *hsReader) bool {
	if len(*r) < n {
		return false
	}
	*out = (*r)[:n]
	*r = (*r)[n:]
	return true
}

func (r *hsReader) vec8(out *hsReader) bool {
	var n uint8
	return r.u8(&n) && r.vec(int(n), out)
}

func (r *hsReader) vec16(out *hsReader) bool {
	var n uint16
	return r.u16(&n) && r.vec(int(n), out)
}
