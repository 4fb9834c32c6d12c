package egress

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
	"github.com/airlock-sandbox/airlock/policy/hostspec"
)

// maxHeadBytes bounds a request line plus headers.
const maxHeadBytes = 64 << 10

// ServeHTTPProxy serves an HTTP/1.1 forward proxy on l: absolute-URI
// http:// requests are decided and forwarded, CONNECT opens a checked
// tunnel. Every request on a keep-alive connection is decided anew. It
// returns nil once Close stops it, or the listener's error.
func (p *Proxy) ServeHTTPProxy(l net.Listener) error { return p.serve(l, p.handleHTTP) }

// handleHTTP reads requests from one client connection until it closes,
// a request is refused, or a CONNECT takes the connection over.
//
// The first request head must be complete by accepted+handshake, and each
// later one by handshake after its first byte: one deadline per head, which
// bytes trickling in never move. Until a head is complete the connection
// holds only headReader's small buffer.
func (p *Proxy) handleHTTP(c net.Conn, accepted time.Time) {
	p.serveRequests(c, &headReader{r: c}, nil, accepted.Add(p.handshake), "", nil, false)
}

// serveRequests is handleHTTP's loop. hr reads the connection; br, when
// not nil, is a reader over hr that may hold bytes past the last head. With
// tunnel set (a CONNECT authority whose tunnel carries plain HTTP), the
// requests are origin-form ("GET /path", as a client that was told it
// reached the server sends them) and are forwarded to that authority,
// each checked and charged as a proxy request to it, its Host header
// included; a CONNECT inside is refused. pre, when not nil, is a
// connection to the tunnel's destination already dialed (a Tunnel's),
// which the first request uses when its decision checked that address.
// secure says the tunnel's TLS was terminated by the proxy (terminate):
// its requests are https:// ones, sent over TLS.
func (p *Proxy) serveRequests(c net.Conn, hr *headReader, br *bufio.Reader, deadline time.Time, tunnel string, pre net.Conn, secure bool) {
	up := &upstream{pre: pre, secure: secure}
	defer up.release(p)
	for first := true; ; first = false {
		if br != nil {
			// What br read past the last request is the start of the next one.
			if n := br.Buffered(); n > 0 {
				b, _ := br.Peek(n) // cannot fail: n bytes are buffered
				hr.unread(b)
			}
			br.Reset(hr)
		}
		if !first || tunnel != "" {
			// Idle between requests, then the next head's own deadline.
			if hr.buffered() == 0 {
				c.SetReadDeadline(time.Now().Add(p.idle))
				if err := hr.fill(); err != nil {
					return
				}
			}
			deadline = time.Now().Add(p.handshake)
		}
		c.SetReadDeadline(deadline)
		head, err := hr.head()
		if err != nil && hr.buffered() == 0 {
			return // closed or timed out before sending a byte: nothing to answer
		}
		if err != nil {
			writeError(c, http.StatusRequestHeaderFieldsTooLarge, "airlock: request head is incomplete or larger than 64 KiB")
			return
		}
		raw, err := inspectHead(head)
		if err != nil {
			writeError(c, http.StatusBadRequest, "airlock: "+err.Error())
			return
		}
		if br == nil {
			br = bufio.NewReaderSize(hr, bodyBuf)
		}
		req, err := http.ReadRequest(br)
		if err != nil {
			writeError(c, http.StatusBadRequest, "airlock: malformed request: "+err.Error())
			return
		}
		c.SetReadDeadline(time.Time{})
		switch {
		case req.Method == http.MethodConnect && tunnel != "":
			writeError(c, http.StatusBadRequest, "airlock: CONNECT inside a CONNECT tunnel is refused")
			return
		case req.Method == http.MethodConnect:
			up.release(p) // the tunnel may last long; a kept upstream connection would wait with it
			p.handleConnect(c, hr, br, req, deadline)
			return
		case tunnel != "":
			if req.URL.Scheme != "" || req.URL.Host != "" {
				writeError(c, http.StatusBadRequest, "airlock: a request inside a CONNECT tunnel names its path only (GET /path), not a URL")
				return
			}
			if !raw.hasHost {
				writeError(c, http.StatusBadRequest, "airlock: a request inside a CONNECT tunnel needs a Host header naming "+tunnel)
				return
			}
			// What the client sent stays as it was: forward reads a copy
			// whose URL names the tunnel's authority, and builds the
			// outbound request from what it checks.
			abs := *req
			u := *req.URL
			u.Scheme, u.Host = "http", tunnel
			if secure {
				u.Scheme = "https"
			}
			abs.URL = &u
			req = &abs
		}
		if !p.forward(c, req, raw, up) {
			return
		}
	}
}

// rawHead is what http.ReadRequest hides: the Host header (deleted) and
// Content-Length next to Transfer-Encoding (dropped silently).
type rawHead struct {
	host    string // the Host header, "" when absent
	hasHost bool
}

// inspectHead parses the head with the same textproto reader net/http uses
// and refuses the framing that request smuggling relies on.
func inspectHead(head []byte) (rawHead, error) {
	// A buffer the size of the head, which is already in memory: the
	// default 4 KiB would be most of what a request costs to parse.
	tp := textproto.NewReader(bufio.NewReaderSize(bytes.NewReader(head), len(head)))
	if _, err := tp.ReadLine(); err != nil {
		return rawHead{}, fmt.Errorf("malformed request line: %v", err)
	}
	h, err := tp.ReadMIMEHeader()
	if err != nil {
		return rawHead{}, fmt.Errorf("malformed request headers: %v", err)
	}
	cl, te := h.Values("Content-Length"), h.Values("Transfer-Encoding")
	if len(cl) > 0 && len(te) > 0 {
		return rawHead{}, errors.New("request has both Content-Length and Transfer-Encoding; send only one")
	}
	for _, v := range cl {
		if strings.TrimSpace(v) != strings.TrimSpace(cl[0]) || strings.Contains(v, ",") {
			return rawHead{}, errors.New("request has conflicting Content-Length values")
		}
	}
	hosts := h.Values("Host")
	if len(hosts) > 1 {
		return rawHead{}, errors.New("request has more than one Host header")
	}
	var r rawHead
	if len(hosts) == 1 {
		r.host, r.hasHost = hosts[0], true
	}
	return r, nil
}

// forward decides one absolute-URI request, sends a fresh request built
// from what was checked, and copies the response back. It reports whether
// the client connection may carry another request.
func (p *Proxy) forward(c net.Conn, req *http.Request, raw rawHead, up *upstream) bool {
	u := req.URL
	switch {
	case u.Scheme == "" && u.Host == "":
		writeError(c, http.StatusBadRequest, "airlock: this is a proxy; send absolute-URI requests such as GET http://host/path (set HTTP_PROXY)")
		return false
	case up.secure && u.Scheme != "https":
		writeError(c, http.StatusBadRequest, "airlock: airlock bug: a request in a terminated TLS tunnel is not https")
		return false
	case !up.secure && !strings.EqualFold(u.Scheme, "http"):
		writeError(c, http.StatusBadRequest, "airlock: only http:// URLs are forwarded; use CONNECT (HTTPS_PROXY) for "+u.Scheme+"://")
		return false
	case u.User != nil:
		writeError(c, http.StatusBadRequest, "airlock: userinfo (user@ or user:password@) in the request URL is refused")
		return false
	case u.Host == "" || u.Opaque != "":
		writeError(c, http.StatusBadRequest, "airlock: request URL has no host")
		return false
	}
	defPort := uint16(80)
	if up.secure {
		defPort = 443
	}
	port, err := parsePort(u.Port(), defPort)
	if err != nil {
		writeError(c, http.StatusBadRequest, "airlock: request URL port: "+err.Error())
		return false
	}
	// One op per request, charged before any check refuses it.
	if err := p.charge(opHTTP, hostspec.Join(u.Hostname(), port)); err != nil {
		writeError(c, statusFor(err), refusal(err))
		return false
	}
	if raw.hasHost {
		if err := p.sameHost(u.Hostname(), port, defPort, raw.host); err != nil {
			writeError(c, http.StatusForbidden, refusal(err))
			return false
		}
	}
	d, err := p.decideCharged(p.ctx, opHTTP, u.Hostname(), port)
	if err != nil {
		writeError(c, statusFor(err), refusal(err))
		return false
	}

	out, bodyDone := outbound(req, d, up.secure)
	creds := p.addCredentials(out.Header, d, up.secure)
	if v := req.Header.Get("Expect"); strings.EqualFold(v, "100-continue") {
		// The client holds its body until told to send it; the upstream
		// request carries no Expect, so its body is sent at once.
		io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\n")
	}
	if up.client == nil {
		up.client = bufio.NewWriterSize(c, bodyBuf)
	}
	var scrub *scrubber
	if len(creds) > 0 {
		scrub = p.scrubs[d.host]
	}
	if len(creds) > 0 && scrub == nil {
		writeError(c, http.StatusInternalServerError, "airlock: airlock bug: credentials without values")
		return false
	}
	resp, err := up.roundTrip(p, d, scrub != nil, out)
	if err != nil {
		if de := (*dialError)(nil); !errors.As(err, &de) {
			// Connected, then failed: TLS, or no answer.
			p.emit(audit.Event{Kind: audit.Info, Op: audit.OpUpstreamFailed, Target: d.target, Message: scrub.string(err.Error())})
		}
		writeError(c, http.StatusBadGateway, "airlock: "+d.target+" did not answer: "+scrub.string(err.Error()))
		return false
	}
	defer resp.Body.Close() // closes the upstream connection unless the body was read to its end
	if scrub != nil {
		if err := scrubResponse(resp, scrub, func(decoded, wire int64) { p.denyBomb(d.target, decoded, wire) }); err != nil {
			p.emit(audit.Event{Kind: audit.Deny, Op: opHTTP, Target: d.target, Rule: "credentials",
				Message: "withheld the response of " + d.target + " to a request that carried a credential: it is " + err.Error(),
				Hint:    "have the server answer without a content coding or in gzip alone, and whole"})
			writeError(c, http.StatusBadGateway, "airlock: "+d.target+" answered with "+err.Error()+"; airlock added a credential to the request, so it withheld the response")
			return false
		}
	}
	written, keep := writeResponse(up.client, req, resp, !req.Close && req.ProtoAtLeast(1, 1))
	if !written {
		return false
	}
	// The upstream is done with the client's body: br is ours again.
	return up.finish(bodyDone) && keep
}

// sameHost refuses a Host header that names another host or port than the
// request URL: an upstream would route by the header, the check by the URL.
func (p *Proxy) sameHost(urlHost string, port, defPort uint16, header string) error {
	h := &url.URL{Host: header}
	hp, err := parsePort(h.Port(), defPort)
	a, aerr := hostspec.NormalizeHost(urlHost)
	b, berr := hostspec.NormalizeHost(h.Hostname())
	if err == nil && aerr == nil && berr == nil && a == b && hp == port {
		return nil
	}
	target := hostspec.Join(urlHost, port)
	if aerr == nil {
		target = hostspec.Join(a, port)
	}
	return p.denyHint(opHTTP, target, fmt.Sprintf("Host header %q does not match the request URL host %s", header, target),
		policy.Suggestion{}, "send a Host header that names the request URL's host, or none")
}

// outbound builds the request sent upstream from the checked decision and
// the client's request, which itself is never edited. bodyDone is closed
// once the upstream writer has closed the client's body.
func outbound(req *http.Request, d *decision, secure bool) (*http.Request, <-chan struct{}) {
	hostHeader := d.host
	if d.isIP && strings.Contains(hostHeader, ":") {
		hostHeader = "[" + hostHeader + "]"
	}
	scheme, defPort := "http", uint16(80)
	if secure {
		scheme, defPort = "https", 443
	}
	if d.port != defPort {
		hostHeader = hostspec.Join(d.host, d.port)
	}
	h := req.Header.Clone()
	removeHopByHop(h)
	h.Del("Expect")
	if _, ok := h["User-Agent"]; !ok {
		h["User-Agent"] = []string{""} // keeps net/http from adding its own
	}
	done := make(chan struct{})
	body := req.Body
	if body == nil || body == http.NoBody {
		close(done)
		body = http.NoBody
	} else {
		body = &notifyBody{ReadCloser: body, done: done}
	}
	out := &http.Request{
		Method:        req.Method,
		URL:           &url.URL{Scheme: scheme, Host: hostHeader, Path: req.URL.Path, RawPath: req.URL.RawPath, RawQuery: req.URL.RawQuery},
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		Body:          body,
		ContentLength: req.ContentLength,
		Host:          hostHeader,
	}
	if body == http.NoBody {
		out.ContentLength = 0
	}
	return out, done
}

// writeResponse copies resp to the client through bw and reports whether
// it was written whole, and whether the client connection may carry
// another request (keep, unless the response must end it). The upstream
// reader flushes bw whenever the upstream makes the proxy wait, so
// streamed responses stay streamed, and a response that has arrived whole
// goes out in one write.
func writeResponse(bw *bufio.Writer, req *http.Request, resp *http.Response, keep bool) (written, stays bool) {
	removeHopByHop(resp.Header)
	resp.Proto, resp.ProtoMajor, resp.ProtoMinor = "HTTP/1.1", 1, 1
	resp.Close = !keep
	resp.TransferEncoding = nil
	if resp.ContentLength < 0 && req.Method != http.MethodHead {
		if req.ProtoAtLeast(1, 1) {
			resp.TransferEncoding = []string{"chunked"}
		} else {
			resp.Close = true
		}
	}
	resp.Trailer = nil
	if err := resp.Write(bodyWriter{bw}); err != nil || bw.Flush() != nil {
		return false, false
	}
	return true, !resp.Close
}

// denyBomb audits a gzip response cut by the scrub's bound.
func (p *Proxy) denyBomb(target string, decoded, wire int64) {
	p.emit(audit.Event{Kind: audit.Deny, Op: opHTTP, Target: target, Rule: "credentials",
		Message: fmt.Sprintf("cut the gzip response of %s to a request that carried a credential after %d MiB decoded from %d KiB (more than %d times what it weighs past %d MiB): a zip bomb, or a body too compressible for airlock to search", target, decoded>>20, wire>>10, maxExpansion, expansionFloor>>20),
		Hint:    "fetch it from a host without a credential, or have the server send it without Content-Encoding"})
}

// hopByHop lists headers that describe one connection, not the message
// (RFC 9110 §7.6.1), plus the proxy credentials, which never leave.
var hopByHop = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

func removeHopByHop(h http.Header) {
	for _, v := range h.Values("Connection") {
		for _, name := range strings.Split(v, ",") {
			if name = textproto.TrimString(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopByHop {
		h.Del(name)
	}
}

// parsePort parses a decimal port in 1..65535; "" means def.
func parsePort(s string, def uint16) (uint16, error) {
	if s == "" {
		return def, nil
	}
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 || s[0] == '+' {
		return 0, fmt.Errorf("%q is not a port in 1..65535", s)
	}
	return uint16(n), nil
}

func statusFor(err error) int {
	var de *policy.DenyError
	switch {
	case errors.As(err, &de), errors.Is(err, budget.ErrExhausted):
		return http.StatusForbidden
	default:
		return http.StatusBadGateway
	}
}

// writeError answers with a plain-text explanation and ends the connection.
func writeError(c net.Conn, status int, msg string) {
	msg += "\n"
	fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		status, http.StatusText(status), len(msg), msg)
}

// notifyBody closes done when the upstream writer closes the client's body.
type notifyBody struct {
	io.ReadCloser
	done chan struct{}
	once sync.Once
}

func (b *notifyBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(func() { close(b.done) })
	return err
}

// bodyWriter writes a response to the client through bw. A body of known
// length is copied by ReadFrom, in copyBuf pieces that go to the client as
// they arrive: io.Copy's 32 KiB pieces cost a quarter more time per byte
// (BenchmarkBulkViaProxy). bufio.Writer's own ReadFrom is not used: it
// reads into bw's buffer, which the upstream reader flushes before it waits.
type bodyWriter struct{ bw *bufio.Writer }

// copyBuf is the size of bodyWriter's pieces; copyBufs holds them between
// responses, at most one per response being copied (Config.MaxConns bounds
// those: 32 MiB at DefaultMaxConns, against 32 KiB of io.Copy's each).
const copyBuf = 128 << 10

var copyBufs = sync.Pool{New: func() any { return new([copyBuf]byte) }}

func (w bodyWriter) Write(b []byte) (int, error) { return w.bw.Write(b) }

func (w bodyWriter) ReadFrom(r io.Reader) (n int64, err error) {
	buf := copyBufs.Get().(*[copyBuf]byte)
	defer copyBufs.Put(buf)
	for {
		m, rerr := r.Read(buf[:])
		if m > 0 {
			// Through bw, which is empty by now (the upstream reader
			// flushed it before the read): a piece this large goes
			// straight to the connection.
			k, werr := w.bw.Write(buf[:m])
			n += int64(k)
			if werr != nil {
				return n, werr
			}
		}
		if rerr == io.EOF {
			return n, nil
		}
		if rerr != nil {
			return n, rerr
		}
	}
}
