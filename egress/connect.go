package egress

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"
)

// handleConnect decides a CONNECT request and, when it is allowed, turns
// the client connection into a tunnel to the checked address. br holds
// whatever the client sent after the request head. A tunnel that opens with
// TLS must name the CONNECT host in its ClientHello; one that opens with
// anything else is read as plain HTTP requests to the CONNECT authority
// (serveRequests).
//
// The 200 goes out before the upstream is dialed, because the client sends
// its ClientHello only after it: the SNI is checked first, and no byte
// reaches the upstream unless it matches. A failed dial just closes.
//
// The ClientHello must be complete by the head's deadline, moved only by
// the time the proxy itself spent deciding (resolving the name).
func (p *Proxy) handleConnect(c net.Conn, hr *headReader, br *bufio.Reader, req *http.Request, deadline time.Time) {
	host, portText, err := net.SplitHostPort(req.URL.Host)
	if err != nil || req.URL.User != nil || req.URL.Path != "" || req.URL.Scheme != "" || req.URL.RawQuery != "" {
		writeError(c, http.StatusBadRequest, "airlock: CONNECT needs an authority such as example.com:443")
		return
	}
	port, err := parsePort(portText, 0)
	if err != nil || port == 0 {
		writeError(c, http.StatusBadRequest, fmt.Sprintf("airlock: CONNECT port %q is not a port in 1..65535", portText))
		return
	}
	started := time.Now()
	d, err := p.decide(p.ctx, opConnect, host, port)
	if err != nil {
		writeError(c, statusFor(err), refusal(err))
		return
	}
	deadline = deadline.Add(time.Since(started))
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	p.carry(c, hr, br, d, deadline, nil)
}

// splice copies both ways between the client (read through cr, which may
// hold buffered bytes) and the upstream (read through ur, likewise) until
// both directions end, or until neither direction carries data for the
// idle timeout. What the upstream sends is acknowledged as it is read
// (acker), as on the proxy's own HTTP requests.
func (p *Proxy) splice(c net.Conn, cr io.Reader, up net.Conn, ur io.Reader) {
	ur = &ackReader{r: ur, a: newAcker(up)}
	var last atomic.Int64 // UnixNano of the last byte moved either way
	last.Store(time.Now().UnixNano())
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.pipe(up, c, cr, &last)
	}()
	p.pipe(c, up, ur, &last)
	<-done
}

// pipe copies from src (reads through r) to dst. At EOF it half-closes
// dst so the other direction can finish; on any error it closes both.
func (p *Proxy) pipe(dst, src net.Conn, r io.Reader, last *atomic.Int64) {
	buf := make([]byte, 32<<10)
	for {
		src.SetReadDeadline(time.Now().Add(p.idle))
		n, err := r.Read(buf)
		if n > 0 {
			last.Store(time.Now().UnixNano())
			dst.SetWriteDeadline(time.Now().Add(p.idle))
			if _, werr := dst.Write(buf[:n]); werr != nil {
				src.Close()
				dst.Close()
				return
			}
		}
		if err == nil {
			continue
		}
		if errors.Is(err, os.ErrDeadlineExceeded) && time.Since(time.Unix(0, last.Load())) < p.idle {
			continue // the other direction is alive
		}
		if errors.Is(err, io.EOF) {
			if cw, ok := dst.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
				return
			}
		}
		src.Close()
		dst.Close()
		return
	}
}

// ackReader reads r, the upstream, and acknowledges what each read
// returned at once.
type ackReader struct {
	r io.Reader
	a acker
}

func (r *ackReader) Read(b []byte) (int, error) {
	n, err := r.r.Read(b)
	if n > 0 {
		r.a.ack()
	}
	return n, err
}

// What a CONNECT tunnel opens with.
const (
	protoTLS = iota
	protoHTTP
	protoOther
	protoUnknown // nothing, or not enough to tell, before the deadline
)

// tunnelProtocol looks at what the client sent first, until the read
// deadline already set on the connection: a TLS handshake record; HTTP;
// anything else that is seen; or unknown, when the deadline passes before
// the bytes decide.
//
// HTTP is whatever some HTTP server could take for a request, since one
// carried as bytes would reach the granted address with a Host header no
// check saw (a CDN routes by it): a line that starts with white space or
// a line break (servers skip blank lines), or with a token (a method is
// any token: M-SEARCH, VERSION-CONTROL, GET2) and a space or tab, whatever
// follows (nginx takes "GET http://host/" without a version as HTTP/0.9,
// and routes by its host). The proxy's own parser then refuses what it
// cannot read. One such line is not HTTP: an SSH client's banner
// ("SSH-2.0-OpenSSH_9.6p1 Debian-3", RFC 4253 §4.2), whose version, a
// digit after "SSH-", no server takes in a method, and which names no
// HTTP version.
func tunnelProtocol(br *bufio.Reader) int {
	first, err := br.Peek(1)
	switch {
	case err != nil:
		return protoUnknown
	case first[0] == recordTypeHandshake:
		return protoTLS
	case first[0] == ' ' || first[0] == '\t' || first[0] == '\r' || first[0] == '\n':
		return protoHTTP
	case notTokenRune(rune(first[0])):
		return protoOther
	}
	for n := 1; ; n++ {
		b, err := br.Peek(n + 1)
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			return protoHTTP // a token longer than the buffer: the parser refuses it
		case err != nil:
			return protoUnknown
		}
		if c := b[n]; c == ' ' || c == '\t' {
			break
		} else if notTokenRune(rune(c)) {
			return protoOther
		}
	}
	line, err := peekLine(br)
	switch {
	case errors.Is(err, bufio.ErrBufferFull):
		return protoHTTP
	case err != nil:
		return protoUnknown
	case sshBanner(line):
		return protoOther
	}
	return protoHTTP
}

// peekLine returns the buffered bytes through the first line feed,
// reading more as needed, without consuming them.
func peekLine(br *bufio.Reader) ([]byte, error) {
	for n := br.Buffered(); ; n++ {
		b, err := br.Peek(max(n, 1))
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			return b[:i+1], nil
		}
		if err != nil {
			return nil, err
		}
		n = len(b)
	}
}

// sshBanner reports whether line is an SSH identification string
// ("SSH-" and a digit) that names no HTTP version.
func sshBanner(line []byte) bool {
	return len(line) > 4 && bytes.HasPrefix(line, []byte("SSH-")) && line[4] >= '0' && line[4] <= '9' &&
		!bytes.Contains(bytes.ToUpper(line), []byte("HTTP/"))
}
