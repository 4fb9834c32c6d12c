package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
)

// Bounds of an upstream connection: its buffers, and the bytes of
// response heads (every 1xx and the final one) it may send for one
// request, as http.Transport's MaxResponseHeaderBytes bounded them.
const (
	upstreamBuf     = 4 << 10
	maxResponseHead = 1 << 20
)

// upstream sends the requests of one client connection, each on an
// upstream connection that the client connection's goroutine owns while
// it carries the request: a request and its response pass no goroutine
// but the client's, except a request body, which a goroutine of its own
// writes while the response is read (an upstream may answer before it has
// read the whole body).
//
// A connection carries a request only for the key it was dialed for
// (upKey: the same host and port, the same checked addresses, the same
// credential context). Between requests it stays with the client
// connection, or, once that moves to another key or ends, waits in the
// proxy's idlePool for a request with its key from any client connection
// of the proxy. A connection that did not carry its request and response
// whole, or whose upstream sent bytes no request asked for or closed it,
// is closed instead, never reused.
type upstream struct {
	pre    net.Conn      // a connection dialed before the first request (a Tunnel's), used once, never pooled
	secure bool          // requests go over TLS (a tunnel the proxy terminated)
	client *bufio.Writer // the client connection's writer; nil until the first response

	uc    *upConn    // the connection of the request in flight or the last one, nil when none
	busy  bool       // uc has not carried its request and response whole (yet)
	wrote chan error // the body writer's result for the request in flight; nil without one
	eof   bool       // the response in flight was read to its end
	last  bool       // the response in flight closes the connection
}

// upKey is what an upstream connection was dialed for: a request whose
// decision differs in any of it never uses the connection. The host fixes
// the credentials; secure and the addresses fix whether they are added,
// and decode whether the proxy decodes the response.
type upKey struct {
	target string           // the decision's host:port
	addrs  []netip.AddrPort // the decision's checked addresses, in order
	decode bool             // credentials were added: the proxy negotiates the encoding
	secure bool             // TLS the proxy made, verified for target's host
}

func (k upKey) equal(o upKey) bool {
	return k.target == o.target && slices.Equal(k.addrs, o.addrs) && k.decode == o.decode && k.secure == o.secure
}

// upConn is an upstream connection and what it was dialed for.
type upConn struct {
	key   upKey
	conn  net.Conn       // TLS over raw when key.secure
	raw   net.Conn       // the connection that was dialed (the proxy tracks it)
	r     upstreamReader // reads conn for br
	br    *bufio.Reader
	bw    *bufio.Writer
	reuse bool // not a Tunnel's connection: may wait in the idle pool
}

func (uc *upConn) close() {
	uc.conn.Close()
	uc.raw.Close() // the TLS close may not reach it; tracking ends here
}

// idle reports whether uc may carry another request: the upstream has
// neither closed it nor sent anything since its last response.
func (uc *upConn) idle() bool { return uc.br.Buffered() == 0 && idle(uc.raw) }

// upstreamReader reads an upstream connection. Before each read, which
// may wait for the upstream, it flushes what was written to the client,
// so a streamed response stays streamed; after each, it acknowledges what
// it read at once (acker); while a response head is read, it counts
// against limit.
type upstreamReader struct {
	conn   net.Conn
	ack    acker
	client *bufio.Writer // nil: nothing to flush
	limit  int64         // bytes a response head may still take; < 0 means no limit
	n      int64         // bytes read for the request in flight
}

var errResponseHead = fmt.Errorf("response headers exceed %d bytes", maxResponseHead)

func (r *upstreamReader) Read(b []byte) (int, error) {
	if r.client != nil && r.client.Buffered() > 0 {
		if err := r.client.Flush(); err != nil {
			return 0, err
		}
	}
	if r.limit == 0 {
		return 0, errResponseHead
	}
	if r.limit > 0 && int64(len(b)) > r.limit {
		b = b[:r.limit]
	}
	n, err := r.conn.Read(b)
	if n > 0 {
		r.ack.ack()
	}
	r.n += int64(n)
	if r.limit > 0 {
		r.limit -= int64(n)
	}
	return n, err
}

// dial returns pre when it goes to one of d's checked addresses (once),
// else a new connection to them; reuse says it is not pre.
func (u *upstream) dial(ctx context.Context, p *Proxy, d *decision) (c net.Conn, reuse bool, err error) {
	if c := u.pre; c != nil {
		u.pre = nil
		if a, ok := c.RemoteAddr().(*net.TCPAddr); ok && slices.Contains(d.addrs, netip.AddrPortFrom(a.AddrPort().Addr().Unmap(), a.AddrPort().Port())) {
			return c, false, nil
		}
	}
	c, err = p.dial(ctx, d)
	return c, true, err
}

// open dials d's checked addresses (with TLS verified for d's host when
// secure) for key.
func (u *upstream) open(p *Proxy, d *decision, key upKey) (*upConn, error) {
	raw, reuse, err := u.dial(p.ctx, p, d)
	if err != nil {
		return nil, err
	}
	conn := raw
	if u.secure {
		// Verified for the checked host against the configured roots.
		tc := tls.Client(raw, &tls.Config{ServerName: d.host, RootCAs: p.roots, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12})
		if err := tc.HandshakeContext(p.ctx); err != nil {
			raw.Close()
			return nil, err
		}
		conn = tc
	}
	uc := &upConn{key: key, conn: conn, raw: raw, reuse: reuse}
	uc.r = upstreamReader{conn: conn, ack: newAcker(raw), limit: -1}
	uc.br = bufio.NewReaderSize(&uc.r, upstreamBuf)
	uc.bw = bufio.NewWriterSize(conn, upstreamBuf)
	return uc, nil
}

// take returns an idle connection for key, the client connection's own or
// one from the pool, or nil.
func (u *upstream) take(p *Proxy, key upKey) *upConn {
	if uc := u.uc; uc != nil {
		switch {
		case u.busy:
			u.drop()
		case !uc.key.equal(key):
			u.release(p) // it waits for a request of its own key
		case uc.idle():
			return uc
		default:
			u.drop()
		}
	}
	for {
		uc := p.idlePool.get(key)
		if uc == nil || uc.idle() {
			return uc
		}
		uc.close()
	}
}

// release gives the client connection's connection to the pool when it
// carried its last request whole, and closes it otherwise: the client
// connection ends, takes a tunnel or moves to another key.
func (u *upstream) release(p *Proxy) {
	if u.uc != nil && u.busy {
		u.drop()
	}
	if u.uc != nil {
		p.keep(u.uc)
		u.uc = nil
	}
}

// drop closes the connection.
func (u *upstream) drop() {
	if u.uc != nil {
		u.uc.close()
		u.uc, u.busy = nil, false
	}
}

// roundTrip sends out, built for decision d, upstream and returns the
// response; its body is read (or closed, which closes the connection)
// and then finish is called before the next roundTrip. decode says the
// proxy, not the client, negotiates the response's encoding (credentials
// were added): it asks for gzip, which scrubResponse decodes.
//
// A request without a body that was sent on a kept connection the
// upstream closed before answering is sent once more on a new one, as
// http.Transport does for idempotent requests.
func (u *upstream) roundTrip(p *Proxy, d *decision, decode bool, out *http.Request) (*http.Response, error) {
	if what := invalidHeader(out.Header); what != "" {
		return nil, errors.New("invalid header " + what)
	}
	if decode && out.Method != http.MethodHead && out.Header.Get("Accept-Encoding") == "" && out.Header.Get("Range") == "" {
		out.Header.Set("Accept-Encoding", "gzip")
	}
	key := upKey{target: d.target, addrs: d.addrs, decode: decode, secure: u.secure}
	for retry := true; ; retry = false {
		u.uc = u.take(p, key)
		kept := u.uc != nil
		if !kept {
			uc, err := u.open(p, d, key)
			if err != nil {
				return nil, err
			}
			u.uc = uc
		}
		resp, err := u.exchange(p, out)
		if err == nil {
			return resp, nil
		}
		got := u.uc.r.n
		u.drop()
		if !retry || !kept || got > 0 || u.wrote != nil || !replayable(out) {
			return nil, err
		}
	}
}

// exchange writes out on u.uc and reads the response head: the first
// that is not informational (1xx), which are dropped as http.Transport
// drops them. A body is written by a goroutine of its own.
func (u *upstream) exchange(p *Proxy, out *http.Request) (*http.Response, error) {
	uc := u.uc
	u.busy, u.eof, u.last, u.wrote = true, false, false, nil
	uc.r.client, uc.r.n, uc.r.limit = u.client, 0, maxResponseHead
	if out.Body == http.NoBody {
		err := out.Write(uc.bw)
		if err == nil {
			err = uc.bw.Flush()
		}
		if err != nil {
			return nil, err
		}
	} else {
		wrote := make(chan error, 1)
		u.wrote = wrote
		p.wg.Add(1) // the handler holds the proxy's count: Close waits for this too
		go func() {
			defer p.wg.Done()
			err := out.Write(uc.bw)
			if err == nil {
				err = uc.bw.Flush()
			}
			if err != nil {
				uc.conn.Close() // an upstream waiting for the rest of the body answers nothing
			}
			wrote <- err
		}()
	}
	for {
		resp, err := http.ReadResponse(uc.br, out)
		if err != nil {
			if uc.r.limit == 0 {
				err = errResponseHead
			}
			return nil, err
		}
		switch c := resp.StatusCode; {
		case c == http.StatusSwitchingProtocols:
			return nil, errors.New("the upstream switched protocols, which the request did not ask for")
		case c >= 100 && c <= 199:
			continue
		}
		uc.r.limit = -1
		u.last = resp.Close
		if resp.Body == http.NoBody {
			u.eof = true
		} else {
			resp.Body = &upstreamBody{rc: resp.Body, u: u}
		}
		return resp, nil
	}
}

// finish ends the request in flight once its response was copied to the
// client, or abandoned. The connection stays open for the next request
// only when the whole request was written, the whole response read, and
// nothing came after it. finish reports whether the client's body was
// consumed (bodyDone), so the client connection is at its next request.
func (u *upstream) finish(bodyDone <-chan struct{}) bool {
	clean := u.uc != nil && u.eof && !u.last && u.uc.br.Buffered() == 0
	if u.wrote != nil {
		select {
		case err := <-u.wrote:
			clean = clean && err == nil
		default:
			// Still writing: the upstream answered before it read the
			// whole body, or the client has not sent it.
			u.drop()
			select {
			case <-bodyDone:
				<-u.wrote // past the client's body, its write fails now
			default:
				u.wrote = nil
				return false // it reads the client, until the client connection closes
			}
			clean = false
		}
		u.wrote = nil
	}
	if !clean {
		u.drop()
	}
	u.busy = false
	select {
	case <-bodyDone:
		return true
	default:
		return false
	}
}

// upstreamBody is a response body read from the upstream connection. It
// notes when it was read to its end; closed before that, it closes the
// connection instead of reading the rest (as net/http's own Close would).
type upstreamBody struct {
	rc io.ReadCloser
	u  *upstream
}

func (b *upstreamBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err == io.EOF {
		b.u.eof = true
	}
	return n, err
}

func (b *upstreamBody) Close() error {
	if !b.u.eof {
		b.u.drop()
	}
	return nil
}

// invalidHeader names a header field that http.Transport would refuse to
// send (golang.org/x/net/http/httpguts' rules: a name is a token, a value
// has no control bytes but tab), or returns "". Client headers passed
// net/http's parser; this catches credentials.
func invalidHeader(h http.Header) string {
	for k, vs := range h {
		if k == "" || strings.IndexFunc(k, notTokenRune) >= 0 {
			return fmt.Sprintf("field name %q", k)
		}
		for _, v := range vs {
			for i := 0; i < len(v); i++ {
				if b := v[i]; b < ' ' && b != '\t' || b == 0x7f {
					return fmt.Sprintf("field value for %q", k) // the value may be a credential
				}
			}
		}
	}
	return ""
}

// notTokenRune reports whether r may not appear in a token (RFC 9110 §5.6.2).
func notTokenRune(r rune) bool {
	switch {
	case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		return false
	}
	return !strings.ContainsRune("!#$%&'*+-.^_`|~", r)
}

// replayable reports whether a request without a body may be sent again,
// as http.Transport decides it.
func replayable(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	_, a := r.Header["Idempotency-Key"]
	_, b := r.Header["X-Idempotency-Key"]
	return a || b
}
