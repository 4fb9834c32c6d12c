package egress

import (
	"bufio"
	"compress/gzip"
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

// upstream sends the requests of one client connection on one upstream
// connection, which the client connection's goroutine owns: a request and
// its response pass no goroutine but the client's, except a request body,
// which a goroutine of its own writes while the response is read (an
// upstream may answer before it has read the whole body).
//
// The connection is kept between requests only while they decide to the
// destination it was dialed for: the same host and port, the same checked
// addresses (so it goes to an address the new decision checked) and the
// same credential context (the host fixes the credentials; secure and the
// addresses fix whether they are added and the response decoded). It is
// never reused for anything else, nor after a request or response that
// was not carried whole, nor when the upstream sent bytes no request asked
// for: it is closed and a new one dialed.
type upstream struct {
	pre    net.Conn      // a connection dialed before the first request (a Tunnel's), used once
	secure bool          // requests go over TLS (a tunnel the proxy terminated)
	client *bufio.Writer // the client connection's writer; nil until the first response

	// What conn was dialed for.
	target string
	addrs  []netip.AddrPort
	decode bool

	conn  net.Conn       // the open connection, nil when none; TLS over raw when secure
	raw   net.Conn       // the connection that was dialed (the proxy tracks it)
	r     upstreamReader // reads conn for br
	br    *bufio.Reader
	bw    *bufio.Writer
	wrote chan error // the body writer's result for the request in flight; nil without one
	eof   bool       // the response in flight was read to its end
	last  bool       // the response in flight closes the connection
}

// upstreamReader reads an upstream connection. Before each read, which
// may wait for the upstream, it flushes what was written to the client,
// so a streamed response stays streamed; while a response head is read,
// it counts against limit.
type upstreamReader struct {
	conn   net.Conn
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
	r.n += int64(n)
	if r.limit > 0 {
		r.limit -= int64(n)
	}
	return n, err
}

// dial returns pre when it goes to one of d's checked addresses (once),
// else a new connection to them.
func (u *upstream) dial(ctx context.Context, p *Proxy, d *decision) (net.Conn, error) {
	if c := u.pre; c != nil {
		u.pre = nil
		if a, ok := c.RemoteAddr().(*net.TCPAddr); ok && slices.Contains(d.addrs, netip.AddrPortFrom(a.AddrPort().Addr().Unmap(), a.AddrPort().Port())) {
			return c, nil
		}
	}
	return p.dial(ctx, d)
}

// open dials d's checked addresses (with TLS verified for d's host when
// secure) and makes the connection the one for d and decode.
func (u *upstream) open(p *Proxy, d *decision, decode bool) error {
	raw, err := u.dial(p.ctx, p, d)
	if err != nil {
		return err
	}
	conn := raw
	if u.secure {
		// Verified for the checked host against the configured roots.
		tc := tls.Client(raw, &tls.Config{ServerName: d.host, RootCAs: p.roots, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12})
		if err := tc.HandshakeContext(p.ctx); err != nil {
			raw.Close()
			return err
		}
		conn = tc
	}
	u.target, u.addrs, u.decode = d.target, d.addrs, decode
	u.conn, u.raw = conn, raw
	u.r = upstreamReader{conn: conn, client: u.client, limit: -1}
	u.br = bufio.NewReaderSize(&u.r, upstreamBuf)
	u.bw = bufio.NewWriterSize(conn, upstreamBuf)
	return nil
}

// close closes the open connection, if any. A body writer still running
// ends when its write or its read of the client fails.
func (u *upstream) close() {
	if u.conn != nil {
		u.conn.Close()
		u.raw.Close() // the TLS close may not reach it; tracking ends here
		u.conn, u.raw, u.br, u.bw = nil, nil, nil, nil
	}
}

// reusable reports whether the open connection may carry a request for d
// and decode: it was dialed for the same destination and credential
// context, and it is idle (the upstream has neither closed it nor sent
// anything since the last response).
func (u *upstream) reusable(d *decision, decode bool) bool {
	return u.target == d.target && slices.Equal(u.addrs, d.addrs) && u.decode == decode &&
		u.br.Buffered() == 0 && idle(u.raw)
}

// roundTrip sends out, built for decision d, upstream and returns the
// response; its body is read (or closed, which closes the connection)
// and then finish is called before the next roundTrip. decode says the
// proxy, not the client, negotiates the response's encoding (credentials
// were added): it asks for gzip and decodes it, as http.Transport does.
//
// A request without a body that was sent on a kept connection the
// upstream closed before answering is sent once more on a new one, as
// http.Transport does for idempotent requests.
func (u *upstream) roundTrip(p *Proxy, d *decision, decode bool, out *http.Request) (*http.Response, error) {
	if what := invalidHeader(out.Header); what != "" {
		return nil, errors.New("invalid header " + what)
	}
	gz := false
	if decode && out.Method != http.MethodHead && out.Header.Get("Accept-Encoding") == "" && out.Header.Get("Range") == "" {
		gz = true
		out.Header.Set("Accept-Encoding", "gzip")
	}
	if u.conn != nil && !u.reusable(d, decode) {
		u.close()
	}
	for retry := true; ; retry = false {
		kept := u.conn != nil
		if !kept {
			if err := u.open(p, d, decode); err != nil {
				return nil, err
			}
		}
		resp, err := u.exchange(p, out)
		if err == nil {
			if gz && strings.EqualFold(resp.Header.Get("Content-Encoding"), "gzip") {
				resp.Header.Del("Content-Encoding")
				resp.Header.Del("Content-Length")
				resp.ContentLength = -1
				resp.Uncompressed = true
				resp.Body = &gzipBody{rc: resp.Body}
			}
			return resp, nil
		}
		got := u.r.n
		u.close()
		if !retry || !kept || got > 0 || u.wrote != nil || !replayable(out) {
			return nil, err
		}
	}
}

// exchange writes out on the open connection and reads the response
// head: the first that is not informational (1xx), which are dropped as
// http.Transport drops them. A body is written by a goroutine of its own.
func (u *upstream) exchange(p *Proxy, out *http.Request) (*http.Response, error) {
	u.eof, u.last, u.wrote = false, false, nil
	u.r.n, u.r.limit = 0, maxResponseHead
	if out.Body == http.NoBody {
		err := out.Write(u.bw)
		if err == nil {
			err = u.bw.Flush()
		}
		if err != nil {
			return nil, err
		}
	} else {
		wrote, conn, bw := make(chan error, 1), u.conn, u.bw
		u.wrote = wrote
		p.wg.Add(1) // the handler holds the proxy's count: Close waits for this too
		go func() {
			defer p.wg.Done()
			err := out.Write(bw)
			if err == nil {
				err = bw.Flush()
			}
			if err != nil {
				conn.Close() // an upstream waiting for the rest of the body answers nothing
			}
			wrote <- err
		}()
	}
	for {
		resp, err := http.ReadResponse(u.br, out)
		if err != nil {
			if u.r.limit == 0 {
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
		u.r.limit = -1
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
	clean := u.conn != nil && u.eof && !u.last && u.br.Buffered() == 0
	if u.wrote != nil {
		select {
		case err := <-u.wrote:
			clean = clean && err == nil
		default:
			// Still writing: the upstream answered before it read the
			// whole body, or the client has not sent it.
			u.close()
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
		u.close()
	}
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
		b.u.close()
	}
	return nil
}

// gzipBody decodes a gzip body the proxy asked for.
type gzipBody struct {
	rc  io.ReadCloser
	zr  *gzip.Reader
	err error // sticky
}

func (g *gzipBody) Read(p []byte) (int, error) {
	if g.err != nil {
		return 0, g.err
	}
	if g.zr == nil {
		if g.zr, g.err = gzip.NewReader(g.rc); g.err != nil {
			return 0, g.err
		}
	}
	n, err := g.zr.Read(p)
	if err != nil {
		g.err = err
	}
	return n, err
}

func (g *gzipBody) Close() error { return g.rc.Close() }

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
