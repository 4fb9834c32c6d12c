package egress

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
)

// SOCKS5 protocol values (RFC 1928).
const (
	socksVersion        = 5
	socksMethodNoAuth   = 0x00
	socksMethodNone     = 0xff
	socksCmdConnect     = 0x01
	socksAtypIPv4       = 0x01
	socksAtypDomain     = 0x03
	socksAtypIPv6       = 0x04
	socksRepSucceeded   = 0x00
	socksRepFailure     = 0x01
	socksRepNotAllowed  = 0x02
	socksRepHostUnreach = 0x04
	socksRepRefused     = 0x05
	socksRepCmdUnsupp   = 0x07
	socksRepAtypUnsupp  = 0x08
)

// ServeSOCKS5 serves SOCKS5 (RFC 1928) on l: no authentication, CONNECT
// only. A domain name is decided by name and resolved here; an IPv4 or
// IPv6 address is allowed only when net_hosts lists it exactly. The tunnel
// carries any TCP protocol, so no TLS check applies. It returns nil once
// Close stops it, or the listener's error.
func (p *Proxy) ServeSOCKS5(l net.Listener) error { return p.serve(l, p.handleSOCKS) }

// handleSOCKS serves one SOCKS5 client: the whole handshake must be done by
// accepted+handshake, however slowly its bytes arrive.
func (p *Proxy) handleSOCKS(c net.Conn, accepted time.Time) {
	c.SetDeadline(accepted.Add(p.handshake))
	// The largest handshake is 2+255 bytes of greeting and 4+1+255+2 of
	// request; the reader never buffers more than this.
	br := bufio.NewReaderSize(c, 512)
	host, port, rep := readSOCKSRequest(c, br)
	if rep != socksRepSucceeded {
		if rep != socksMethodNone {
			writeSOCKSReply(c, rep)
		}
		return
	}
	c.SetDeadline(time.Time{})
	d, err := p.decide(p.ctx, opConnect, host, port)
	if err != nil {
		writeSOCKSReply(c, socksReplyFor(err))
		return
	}
	up, err := p.dial(p.ctx, d)
	if err != nil {
		writeSOCKSReply(c, socksRepRefused)
		return
	}
	defer up.Close()
	if writeSOCKSReply(c, socksRepSucceeded) != nil {
		return
	}
	p.splice(c, br, up, up)
}

// readSOCKSRequest runs the method negotiation and reads the request. It
// returns the destination, or the reply code to refuse with;
// socksMethodNone means the connection is to be closed without a reply.
func readSOCKSRequest(c net.Conn, r io.Reader) (host string, port uint16, rep byte) {
	var hdr [2]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil || hdr[0] != socksVersion {
		return "", 0, socksMethodNone
	}
	methods := make([]byte, hdr[1])
	if _, err := io.ReadFull(r, methods); err != nil {
		return "", 0, socksMethodNone
	}
	if !slices.Contains(methods, socksMethodNoAuth) {
		c.Write([]byte{socksVersion, socksMethodNone})
		return "", 0, socksMethodNone
	}
	if _, err := c.Write([]byte{socksVersion, socksMethodNoAuth}); err != nil {
		return "", 0, socksMethodNone
	}

	var req [4]byte // VER CMD RSV ATYP
	if _, err := io.ReadFull(r, req[:]); err != nil {
		return "", 0, socksMethodNone
	}
	if req[0] != socksVersion || req[2] != 0 {
		return "", 0, socksRepFailure
	}
	switch req[3] {
	case socksAtypIPv4:
		var a [4]byte
		if _, err := io.ReadFull(r, a[:]); err != nil {
			return "", 0, socksMethodNone
		}
		host = netip.AddrFrom4(a).String()
	case socksAtypIPv6:
		var a [16]byte
		if _, err := io.ReadFull(r, a[:]); err != nil {
			return "", 0, socksMethodNone
		}
		host = netip.AddrFrom16(a).String()
	case socksAtypDomain:
		var n [1]byte
		if _, err := io.ReadFull(r, n[:]); err != nil {
			return "", 0, socksMethodNone
		}
		name := make([]byte, n[0])
		if _, err := io.ReadFull(r, name); err != nil {
			return "", 0, socksMethodNone
		}
		host = string(name)
	default:
		return "", 0, socksRepAtypUnsupp
	}
	var pb [2]byte
	if _, err := io.ReadFull(r, pb[:]); err != nil {
		return "", 0, socksMethodNone
	}
	if req[1] != socksCmdConnect {
		// BIND would accept inbound connections, UDP ASSOCIATE would send
		// datagrams past every check here.
		return "", 0, socksRepCmdUnsupp
	}
	return host, binary.BigEndian.Uint16(pb[:]), socksRepSucceeded
}

// writeSOCKSReply sends a reply whose bound address is always 0.0.0.0:0:
// the proxy's outside addresses are none of the sandbox's business.
func writeSOCKSReply(c net.Conn, rep byte) error {
	_, err := c.Write([]byte{socksVersion, rep, 0, socksAtypIPv4, 0, 0, 0, 0, 0, 0})
	return err
}

func socksReplyFor(err error) byte {
	var de *policy.DenyError
	var re *resolveError
	switch {
	case errors.As(err, &de), errors.Is(err, budget.ErrExhausted):
		return socksRepNotAllowed
	case errors.As(err, &re):
		return socksRepHostUnreach
	default:
		return socksRepFailure
	}
}
