package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/hostspec"
)

// opTunnel is the op of audit events about a transparent connection that
// is not a decision (the listener's own refusals).
const opTunnel = "tunnel"

// ErrUnresolved is matched (errors.Is) by the error of a decision whose
// granted name did not resolve: a gateway failure, not a denial.
var ErrUnresolved = errors.New("egress: a granted name did not resolve")

// Is lets errors.Is(err, ErrUnresolved) find a resolveError.
func (e *resolveError) Is(target error) bool { return target == ErrUnresolved }

// Tunnel is a destination decided and dialed before its client has sent a
// byte: the transparent path, where the sandbox's own connect(2) to a
// granted name or address was redirected to ServeTunnels' listener rather
// than sent to the proxy as a request. The supervisor opens it while the
// sandbox's connect waits (OpenTunnel), so that connect fails as a real one
// would, and hands it to ServeTunnels' claim when the connection arrives.
// From then on it is carried exactly as a CONNECT tunnel to the same
// authority is: TLS must name the host in its SNI, plain HTTP is read
// request by request and each is decided again with its Host header, and
// anything else is carried as bytes to the checked address.
type Tunnel struct {
	d    *decision
	up   net.Conn
	once sync.Once
}

// Target returns the tunnel's host:port as in audit events.
func (t *Tunnel) Target() string { return t.d.target }

// take returns the upstream connection, once; nil afterwards.
func (t *Tunnel) take() net.Conn {
	var up net.Conn
	t.once.Do(func() { up = t.up })
	return up
}

// Close closes the upstream connection unless ServeTunnels took it. It is
// idempotent.
func (t *Tunnel) Close() error {
	if up := t.take(); up != nil {
		return up.Close()
	}
	return nil
}

// OpenTunnel decides host:port as a CONNECT to it is decided (one op,
// net_hosts, the special-address guard, one audit event) and dials the
// checked address. Errors: a denial is a *policy.DenyError, a blown
// budget a *budget.ExhaustedError, a granted name that does not resolve
// matches ErrUnresolved, and a failed dial wraps the dial's error (its
// syscall.Errno, such as ECONNREFUSED, where there is one). A denied
// destination is never touched.
func (p *Proxy) OpenTunnel(ctx context.Context, host string, port uint16) (*Tunnel, error) {
	// Close ends a decision or dial in flight, as it ends every tunnel:
	// the sandbox's teardown must not wait for an upstream.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(p.ctx, cancel)()
	d, err := p.decide(ctx, opConnect, host, port)
	if r, ok := err.(*refused); ok {
		return nil, r.deny
	}
	if err != nil {
		return nil, err
	}
	dctx, cancel := context.WithTimeout(ctx, p.handshake)
	defer cancel()
	up, err := p.dial(dctx, d)
	if err != nil {
		return nil, fmt.Errorf("egress: dial %s: %w", d.target, err)
	}
	return &Tunnel{d: d, up: up}, nil
}

// ServeTunnels serves the transparent listener l: each connection it
// accepts (charged an op and counted against MaxConns like any client) is
// carried on the Tunnel that claim returns for its remote address, which
// the supervisor registered before it made the connection. A connection
// claim does not know (nil) is closed at once and audited: only
// connections airlock redirected are carried. It returns nil once Close
// stops it, or the listener's error.
func (p *Proxy) ServeTunnels(l net.Listener, claim func(remote netip.AddrPort) *Tunnel) error {
	return p.serve(l, func(c net.Conn, accepted time.Time) {
		var remote netip.AddrPort
		if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
			remote = a.AddrPort()
			remote = netip.AddrPortFrom(remote.Addr().Unmap(), remote.Port())
		}
		t := claim(remote)
		if t == nil {
			p.emit(audit.Event{Kind: audit.Deny, Op: opTunnel, Target: remote.String(), Rule: policy.NetHosts.String(),
				Message: "a connection to airlock's transparent listener that airlock did not redirect was closed",
				Hint:    "connect to the host you want to reach by its name or granted address; airlock redirects what net_hosts grants"})
			return
		}
		up := t.take()
		if up == nil {
			return // claimed twice: the first claim carries it
		}
		defer up.Close()
		hr := &headReader{r: c}
		p.carry(c, hr, bufio.NewReaderSize(hr, bodyBuf), t.d, accepted.Add(p.handshake), up)
	})
}

// carry serves a tunnel to the checked destination d once its client may
// send (after CONNECT's 200, or at once for a transparent connection),
// until the deadline for its first bytes: a TLS ClientHello must name d's
// host, plain HTTP is read as requests to d's authority, and anything else
// is spliced to d's address. up, when not nil, is a connection to d
// already dialed (a Tunnel's); without it the upstream is dialed only
// once the first bytes were checked. carry closes neither c nor up.
func (p *Proxy) carry(c net.Conn, hr *headReader, br *bufio.Reader, d *decision, deadline time.Time, up net.Conn) {
	if p.skipSNI {
		p.carryRaw(c, br, d, up, nil)
		return
	}
	var upr *bufio.Reader
	proto := protoUnknown
	if up != nil {
		// The upstream is open: a server that speaks first (SMTP, MySQL)
		// is neither TLS nor HTTP, whose servers never do, so its bytes
		// can be carried as they are; a client that speaks first is
		// looked at as through CONNECT.
		upr = bufio.NewReaderSize(up, 4<<10)
		proto = firstSpeaker(c, br, up, upr, deadline)
	} else {
		c.SetReadDeadline(deadline)
		proto = tunnelProtocol(br)
	}
	c.SetReadDeadline(time.Time{})
	switch proto {
	case protoServerFirst, protoOther:
		// Bytes to the checked address, as SOCKS5 carries them. No name
		// is sent that could front for another host.
		p.carryRaw(c, br, d, up, upr)
		return
	case protoHTTP:
		if upr != nil && upr.Buffered() > 0 {
			p.denyHint(opConnect, d.target, "the server spoke before the client's HTTP request, which no HTTP server does",
				policy.Suggestion{}, "")
			return
		}
		// Plain HTTP (npm does this through CONNECT for http://
		// registries). Each request is checked like a proxy request to
		// the tunnel's authority, its Host header included, so the
		// tunnel cannot front for another name.
		p.serveRequests(c, hr, br, deadline, hostspec.Join(d.host, d.port), up, false)
		return
	case protoUnknown:
		// Nothing, or not enough to tell, before the deadline: a client
		// that sends "G", waits, then "ET / ... Host: other" must not
		// get a raw tunnel, so this fails closed.
		p.denyHint(opConnect, d.target, "the tunnel sent too little to tell its protocol before the deadline",
			policy.Suggestion{}, "send the first bytes (a TLS ClientHello, an HTTP request line) right after connecting; a protocol whose server speaks first goes through SOCKS5 (ALL_PROXY) or a direct connect")
		return
	}
	c.SetReadDeadline(deadline)
	raw, sni, err := readClientHello(br)
	c.SetReadDeadline(time.Time{})
	if err != nil {
		p.denyHint(opConnect, d.target, "tunnel did not open with a readable TLS ClientHello: "+err.Error(),
			policy.Suggestion{}, "a tunnel that opens with TLS carries only TLS to the granted host")
		return
	}
	if !d.isIP {
		// An IP literal was granted as an address, so any name may be
		// asked of it; a name grant holds only for that name.
		n, nerr := hostspec.NormalizeHost(sni)
		if sni == "" || nerr != nil || n != d.host {
			p.denyHint(opConnect, d.target, fmt.Sprintf("TLS server name %q does not match the tunnel's host %s", sni, d.host),
				policy.Suggestion{}, "connect to the host named in the TLS ClientHello")
			return
		}
	}
	if len(p.credentialsFor(d.host)) > 0 {
		// The host has credentials: the proxy is the TLS server, so it
		// can add them. The pre-dialed connection is not used: the
		// upstream's TLS is the proxy's own.
		if p.ca == nil {
			p.denyHint(opConnect, d.target, d.host+" has credentials, which HTTPS can carry only through airlock's per-run CA, and there is none", policy.Suggestion{}, "")
			return
		}
		if upr != nil && upr.Buffered() > 0 {
			return // the server spoke first: not a TLS server
		}
		if up != nil {
			up.Close()
		}
		p.terminate(c, br, raw, d)
		return
	}
	p.carryRaw(c, br, d, up, upr, raw...)
}

// carryRaw sends first (bytes already read from the client) to the
// upstream and splices both ways; upr, when set, reads up. It dials d when
// up is nil.
func (p *Proxy) carryRaw(c net.Conn, br *bufio.Reader, d *decision, up net.Conn, upr *bufio.Reader, first ...byte) {
	if up == nil {
		var err error
		if up, err = p.dial(p.ctx, d); err != nil {
			return
		}
		defer up.Close()
	}
	if len(first) > 0 {
		if _, err := up.Write(first); err != nil {
			return
		}
	}
	var ur io.Reader = up
	if upr != nil {
		ur = upr
	}
	p.splice(c, br, up, ur)
}

// protoServerFirst is what firstSpeaker reports when the upstream sent
// bytes before the client did.
const protoServerFirst = protoUnknown + 1

// firstSpeaker waits, until deadline, for whichever side sends first: the
// client (the protocol is then tunnelProtocol's verdict on its bytes) or
// the upstream (protoServerFirst). Both readers are idle when it returns.
func firstSpeaker(c net.Conn, br *bufio.Reader, up net.Conn, upr *bufio.Reader, deadline time.Time) int {
	c.SetReadDeadline(deadline)
	up.SetReadDeadline(deadline)
	defer up.SetReadDeadline(time.Time{})
	server := make(chan bool, 1)
	go func() {
		_, err := upr.Peek(1)
		server <- err == nil
	}()
	client := make(chan bool, 1)
	go func() {
		_, err := br.Peek(1)
		client <- err == nil
	}()
	// Whichever peek returns first stops the other, and both are waited
	// for: the readers are the caller's again only then. What the client
	// sent is in br either way.
	var fromServer bool
	select {
	case fromServer = <-server:
		if fromServer {
			c.SetReadDeadline(time.Now()) // stop the client's peek
		}
		<-client
	case fromClient := <-client:
		if fromClient {
			up.SetReadDeadline(time.Now())
		}
		fromServer = <-server
	}
	switch {
	case fromServer && br.Buffered() == 0:
		return protoServerFirst
	case br.Buffered() == 0:
		return protoUnknown
	}
	c.SetReadDeadline(deadline)
	return tunnelProtocol(br)
}
