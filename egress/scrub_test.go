package egress_test

import (
	"bufio"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/egress"
)

// scrubUpstream is an upstream for the scrub's attack tests: it answers
// each request with respond, given the request and the value of the
// credential's header it received (what an echoing endpoint reflects),
// and closes the connection.
func scrubUpstream(t *testing.T, header, value string, respond func(c net.Conn, req *http.Request, echo string)) (*harness, string) {
	t.Helper()
	srv := newRawServer(t, func(c net.Conn, br *bufio.Reader, _ int) {
		req := readRequest(br)
		if req == nil {
			return
		}
		respond(c, req, req.Header.Get(header))
	})
	h := startProxy(t, harnessConfig{
		hosts:   []string{srv.hostPort("api.test"), srv.hostPort("127.0.0.1")},
		resolve: map[string]string{"api.test": "127.0.0.1"},
		creds:   []egress.Credential{{Host: "api.test", Header: header, Value: value}},
	})
	return h, srv.hostPort("api.test")
}

// writes sends each piece in a write of its own, a little apart, so that
// they reach the proxy in separate reads.
func writes(c net.Conn, pieces ...string) {
	for _, p := range pieces {
		if _, err := io.WriteString(c, p); err != nil {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func gz(s string) string {
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	io.WriteString(w, s)
	w.Close()
	return b.String()
}

func deflated(s string) string {
	var b bytes.Buffer
	w := zlib.NewWriter(&b)
	io.WriteString(w, s)
	w.Close()
	return b.String()
}

// fetchRaw sends req (a request head, Connection: close) to the proxy and
// returns every byte the client receives, at most limit.
func fetchRaw(t *testing.T, h *harness, req string, limit int64) []byte {
	t.Helper()
	c, err := net.Dial("tcp", h.httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(io.LimitReader(c, limit)) // what arrived is what the client saw
	return b
}

// clientViews returns the status the client got and what it can read:
// the raw bytes, and the body decoded by every Content-Encoding named,
// then again while it still starts like a gzip or zlib stream (a label
// the proxy dropped without decoding is no protection).
func clientViews(raw []byte, method string) (int, []string) {
	views := []string{string(raw)}
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), &http.Request{Method: method})
	if err != nil {
		return 0, views
	}
	body, _ := io.ReadAll(resp.Body) // a cut body is still what the client has
	for _, v := range resp.Header.Values("Content-Encoding") {
		for _, c := range strings.Split(v, ",") {
			if d, ok := decode(strings.ToLower(strings.TrimSpace(c)), body); ok {
				body = d
			}
		}
	}
	views = append(views, string(body))
	for range 4 {
		var ok bool
		switch {
		case len(body) > 2 && body[0] == 0x1f && body[1] == 0x8b:
			body, ok = decode("gzip", body)
		case len(body) > 2 && body[0] == 0x78:
			body, ok = decode("deflate", body)
		}
		if !ok {
			break
		}
		views = append(views, string(body))
	}
	return resp.StatusCode, views
}

// decode undoes one content coding as a lenient client would, keeping
// whatever it could read before an error.
func decode(coding string, b []byte) ([]byte, bool) {
	var r io.Reader
	var err error
	switch coding {
	case "gzip", "x-gzip":
		r, err = gzip.NewReader(bytes.NewReader(b))
	case "deflate":
		if r, err = zlib.NewReader(bytes.NewReader(b)); err != nil {
			r, err = flate.NewReader(bytes.NewReader(b)), nil
		}
	default:
		return nil, false
	}
	if err != nil {
		return nil, false
	}
	out, _ := io.ReadAll(io.LimitReader(r, 64<<20))
	return out, len(out) > 0
}

// leak returns a part of token (8 bytes or more, any case) found in
// views, or "".
func leak(views []string, token string) string {
	lt := strings.ToLower(token)
	for _, v := range views {
		lv := strings.ToLower(v)
		for i := 0; i+8 <= len(lt); i++ {
			if strings.Contains(lv, lt[i:i+8]) {
				return lt[i : i+8]
			}
		}
	}
	return ""
}

// scrubWithheld reports whether the proxy withheld a response for its
// encodings, with an audit denial saying so.
func scrubWithheld(h *harness) bool {
	for _, e := range h.rec.Denials() {
		if e.Rule == "credentials" && e.Kind == audit.Deny {
			return true
		}
	}
	return false
}

// TestScrubAttacks: an upstream that echoes the credential the proxy
// added never gets it to the sandbox, however it encodes, frames, splits
// or places the echo. A response the scrub cannot fully decode is
// withheld (502, and an audit denial); anything else reaches the client
// with the value removed. The sandbox chooses the request; the upstream
// is a granted host that echoes (a debug endpoint, httpbin, a redirect).
func TestScrubAttacks(t *testing.T) {
	const value = "Bearer " + secret
	ok := func(head string) string { return "HTTP/1.1 200 OK\r\n" + head + "\r\n" }
	tests := []struct {
		name     string
		header   string // the credential's header; Authorization when ""
		value    string // the credential's value; value when ""
		method   string // GET when ""
		reqHead  string // more request header lines
		respond  func(c net.Conn, req *http.Request, echo string)
		withheld bool // the proxy must withhold it (else pass it scrubbed)
		bad      bool // withheld as a response net/http cannot read: no scrub decision, no denial
	}{
		// The reported bypass: the first Content-Encoding line says
		// identity, the second gzip.
		{name: "two-content-encoding-lines", withheld: true, respond: func(c net.Conn, _ *http.Request, echo string) {
			b := gz("authorization=" + echo)
			writes(c, ok("Content-Encoding: identity\r\nContent-Encoding: gzip\r\nContent-Length: "+strconv.Itoa(len(b))+"\r\n"), b)
		}},
		{name: "empty-then-gzip", respond: func(c net.Conn, _ *http.Request, echo string) {
			b := gz("authorization=" + echo)
			writes(c, ok("Content-Encoding: \r\nContent-Encoding: gzip\r\nContent-Length: "+strconv.Itoa(len(b))+"\r\n"), b)
		}},
		{name: "comma-gzip-identity", withheld: true, respond: func(c net.Conn, _ *http.Request, echo string) {
			b := gz("authorization=" + echo)
			writes(c, ok("Content-Encoding: gzip, identity\r\nContent-Length: "+strconv.Itoa(len(b))+"\r\n"), b)
		}},
		{name: "comma-identity-gzip", withheld: true, respond: func(c net.Conn, _ *http.Request, echo string) {
			b := gz("authorization=" + echo)
			writes(c, ok("Content-Encoding: identity,gzip\r\nContent-Length: "+strconv.Itoa(len(b))+"\r\n"), b)
		}},
		{name: "case-and-space", respond: func(c net.Conn, _ *http.Request, echo string) {
			b := gz("authorization=" + echo)
			writes(c, ok("Content-Encoding: \t GZip \t\r\nContent-Length: "+strconv.Itoa(len(b))+"\r\n"), b)
		}},
		{name: "x-gzip", respond: func(c net.Conn, _ *http.Request, echo string) {
			writes(c, ok("Content-Encoding: x-gzip\r\nConnection: close\r\n"), gz("authorization="+echo))
		}},
		{name: "transfer-encoding-gzip-chunked", withheld: true, bad: true, respond: func(c net.Conn, _ *http.Request, echo string) {
			b := gz("authorization=" + echo)
			writes(c, ok("Transfer-Encoding: gzip, chunked\r\n"), fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(b), b))
		}},
		{name: "transfer-encoding-two-lines", withheld: true, bad: true, respond: func(c net.Conn, _ *http.Request, echo string) {
			b := gz("authorization=" + echo)
			writes(c, ok("Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n"), fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(b), b))
		}},
		{name: "unknown-encoding", withheld: true, respond: func(c net.Conn, _ *http.Request, echo string) {
			writes(c, ok("Content-Encoding: x-airlock-test\r\nConnection: close\r\n"), gz("authorization="+echo))
		}},
		{name: "nested-gzip-comma", withheld: true, respond: func(c net.Conn, _ *http.Request, echo string) {
			writes(c, ok("Content-Encoding: gzip, gzip\r\nConnection: close\r\n"), gz(gz("authorization="+echo)))
		}},
		{name: "nested-gzip-two-lines", withheld: true, respond: func(c net.Conn, _ *http.Request, echo string) {
			writes(c, ok("Content-Encoding: gzip\r\nContent-Encoding: gzip\r\nConnection: close\r\n"), gz(gz("authorization="+echo)))
		}},
		{name: "deflate", withheld: true, respond: func(c net.Conn, _ *http.Request, echo string) {
			writes(c, ok("Content-Encoding: deflate\r\nConnection: close\r\n"), deflated("authorization="+echo))
		}},
		{name: "br", withheld: true, respond: func(c net.Conn, _ *http.Request, echo string) {
			writes(c, ok("Content-Encoding: br\r\nConnection: close\r\n"), deflated("authorization="+echo))
		}},
		{name: "zstd", withheld: true, respond: func(c net.Conn, _ *http.Request, echo string) {
			writes(c, ok("Content-Encoding: zstd\r\nConnection: close\r\n"), deflated("authorization="+echo))
		}},
		{name: "content-encoding-echo", withheld: true, respond: func(c net.Conn, _ *http.Request, echo string) {
			// The refusal must not quote it back.
			writes(c, ok("Content-Encoding: "+echo+"\r\nConnection: close\r\n"), "x")
		}},
		{name: "split-across-chunks", respond: func(c net.Conn, _ *http.Request, echo string) {
			var pieces []string
			for i := 0; i < len(echo); i += 3 {
				p := echo[i:min(i+3, len(echo))]
				pieces = append(pieces, fmt.Sprintf("%x;ext=1\r\n%s\r\n", len(p), p))
			}
			writes(c, append(append([]string{ok("Transfer-Encoding: chunked\r\n")}, pieces...), "0\r\n\r\n")...)
		}},
		{name: "split-across-gzip-members", respond: func(c net.Conn, _ *http.Request, echo string) {
			half := len(echo) / 2
			writes(c, ok("Content-Encoding: gzip\r\nConnection: close\r\n"), gz("a="+echo[:half]), gz(echo[half:]+";"))
		}},
		{name: "response-headers", respond: func(c net.Conn, _ *http.Request, echo string) {
			writes(c, ok("X-Echo: you sent "+echo+"\r\nSet-Cookie: session="+echo+"; Path=/\r\nWww-Authenticate: "+echo+"\r\nContent-Length: 2\r\n"), "ok")
		}},
		{name: "trailer", respond: func(c net.Conn, _ *http.Request, echo string) {
			writes(c, ok("Transfer-Encoding: chunked\r\nTrailer: X-Echo\r\n"), "2\r\nok\r\n0\r\nX-Echo: "+echo+"\r\n\r\n")
		}},
		{name: "header-name", header: "X-Api-Key", value: "k3yAbCdEf-" + secret, respond: func(c net.Conn, _ *http.Request, echo string) {
			writes(c, ok(echo+": 1\r\nContent-Length: 2\r\n"), "ok")
		}},
		{name: "status-reason", respond: func(c net.Conn, _ *http.Request, echo string) {
			writes(c, "HTTP/1.1 401 "+echo+"\r\nContent-Length: 2\r\n\r\n", "no")
		}},
		{name: "redirect-location", respond: func(c net.Conn, _ *http.Request, echo string) {
			// As a redirect carries it: in a query, escaped.
			writes(c, "HTTP/1.1 302 Found\r\nLocation: https://elsewhere.test/cb?auth="+strings.ReplaceAll(echo, " ", "%20")+"&x="+strings.ReplaceAll(echo, " ", "+")+"\r\nContent-Length: 0\r\n\r\n")
		}},
		{name: "token-without-scheme", respond: func(c net.Conn, _ *http.Request, echo string) {
			// httpbin's /bearer: {"authenticated": true, "token": "..."}
			_, tok, _ := strings.Cut(echo, " ")
			b := `{"authenticated": true, "token": "` + tok + `"}`
			writes(c, ok("Content-Type: application/json\r\nContent-Length: "+strconv.Itoa(len(b))+"\r\n"), b)
		}},
		{name: "json-escaped", value: "Bearer " + secret + "/+=<&>", respond: func(c net.Conn, _ *http.Request, echo string) {
			e := strings.NewReplacer("/", `\/`, "<", `\u003c`, ">", `\u003e`, "&", `\u0026`).Replace(echo)
			b := `{"authorization": "` + e + `"}`
			writes(c, ok("Content-Length: "+strconv.Itoa(len(b))+"\r\n"), b)
		}},
		{name: "http10-close-delimited", respond: func(c net.Conn, _ *http.Request, echo string) {
			writes(c, "HTTP/1.0 200 OK\r\n\r\n", "authorization="+echo[:10], echo[10:20], echo[20:], ";")
		}},
		{name: "informational-first", respond: func(c net.Conn, _ *http.Request, echo string) {
			writes(c, "HTTP/1.1 103 Early Hints\r\nLink: </"+echo+">\r\n\r\n", "HTTP/1.1 100 Continue\r\nX-Echo: "+echo+"\r\n\r\n", ok("Content-Length: 2\r\n"), "ok")
		}},
		{name: "head-with-body", method: "HEAD", respond: func(c net.Conn, _ *http.Request, echo string) {
			b := "authorization=" + echo
			writes(c, ok("Content-Length: "+strconv.Itoa(len(b))+"\r\n"), b)
		}},
		{name: "content-type-binary", respond: func(c net.Conn, _ *http.Request, echo string) {
			b := "\x89PNG\r\n\x1a\n\x00\x00" + echo + "\x00"
			writes(c, ok("Content-Type: image/png\r\nContent-Length: "+strconv.Itoa(len(b))+"\r\n"), b)
		}},
		{name: "content-type-multipart-byteranges", respond: func(c net.Conn, _ *http.Request, echo string) {
			b := "--b\r\nContent-Type: text/plain\r\nContent-Range: bytes 0-9/99\r\n\r\n" + echo + "\r\n--b--\r\n"
			writes(c, ok("Content-Type: multipart/byteranges; boundary=b\r\nContent-Length: "+strconv.Itoa(len(b))+"\r\n"), b)
		}},
		{name: "range-slices", reqHead: "Range: bytes=20-30\r\n", respond: func(c net.Conn, req *http.Request, echo string) {
			// An echo that honours Range, as a cache in front of it does:
			// one slice at a time, the sandbox would read the whole value.
			b := "authorization=" + echo
			var from, to int
			if _, err := fmt.Sscanf(req.Header.Get("Range"), "bytes=%d-%d", &from, &to); err == nil && to < len(b) {
				writes(c, fmt.Sprintf("HTTP/1.1 206 Partial Content\r\nContent-Range: bytes %d-%d/%d\r\nContent-Length: %d\r\n\r\n", from, to, len(b), to-from+1), b[from:to+1])
				return
			}
			writes(c, ok("Content-Length: "+strconv.Itoa(len(b))+"\r\n"), b)
		}},
		{name: "cut-short", value: "Bearer " + secret + strings.Repeat("-", 6000), respond: func(c net.Conn, _ *http.Request, echo string) {
			// The body ends inside the echo (a long one, as a JWT is),
			// before its Content-Length.
			writes(c, ok("Content-Length: 9000\r\n"), "authorization="+echo[:len(echo)-4])
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			header, val, method := tt.header, tt.value, tt.method
			if header == "" {
				header = "Authorization"
			}
			if val == "" {
				val = value
			}
			if method == "" {
				method = "GET"
			}
			h, hp := scrubUpstream(t, header, val, tt.respond)
			raw := fetchRaw(t, h, fmt.Sprintf("%s http://%s/echo HTTP/1.1\r\nHost: %s\r\n%sConnection: close\r\n\r\n", method, hp, hp, tt.reqHead), 1<<20)
			status, views := clientViews(raw, method)
			_, tok, _ := strings.Cut(val, " ")
			if tok == "" {
				tok = val
			}
			if got := leak(views, tok); got != "" {
				t.Errorf("the client read %q of the credential: %q", got, raw)
			}
			if withheld := status == http.StatusBadGateway; withheld != tt.withheld || withheld && !tt.bad && !scrubWithheld(h) {
				t.Errorf("status %d, audit denial %v: want withheld %v, with a denial %v (%q)", status, scrubWithheld(h), tt.withheld, tt.withheld && !tt.bad, raw)
			}
		})
	}
}

// TestScrubBomb: a gzip body that decodes to far more than it weighs (a
// zip bomb: 1 GiB of zeros in about 1 MiB) is cut once its decoded size
// passes the scrub's bound, with an audit denial, without the proxy's
// memory growing with it; the proxy serves the next request.
func TestScrubBomb(t *testing.T) {
	var member bytes.Buffer
	w, _ := gzip.NewWriterLevel(&member, gzip.BestCompression)
	w.Write(make([]byte, 1<<20))
	w.Close()
	const members = 1024 // 1 GiB decoded
	h, hp := scrubUpstream(t, "Authorization", "Bearer "+secret, func(c net.Conn, req *http.Request, _ string) {
		if req.URL.Path == "/small" {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			return
		}
		io.WriteString(c, fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n", members*member.Len()))
		for range members {
			if _, err := c.Write(member.Bytes()); err != nil {
				return
			}
		}
	})
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	peak := make(chan uint64)
	stop := make(chan struct{})
	go func() {
		var m runtime.MemStats
		var max uint64
		for {
			select {
			case <-stop:
				peak <- max
				return
			case <-time.After(20 * time.Millisecond):
				runtime.ReadMemStats(&m)
				max = maxOf(max, m.HeapInuse)
			}
		}
	}()
	c, err := net.Dial("tcp", h.httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(60 * time.Second))
	fmt.Fprintf(c, "GET http://%s/bomb HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", hp, hp)
	const limit = 300 << 20
	n, _ := io.Copy(io.Discard, io.LimitReader(c, limit))
	close(stop)
	grew := int64(<-peak) - int64(before.HeapInuse)
	if n >= limit {
		t.Errorf("the client received %d MiB of a zip bomb and more was coming; want it cut near the scrub's bound", n>>20)
	}
	if grew > 64<<20 {
		t.Errorf("the proxy's heap grew by %d MiB while it decoded a zip bomb, want it bounded", grew>>20)
	}
	if !scrubWithheld(h) {
		t.Errorf("no audit denial names the cut: %+v", h.rec.Events())
	}
	if status, body := h.rawRequest(t, fmt.Sprintf("GET http://%s/small HTTP/1.1\r\nHost: %s\r\n\r\n", hp, hp)); status != 200 || body != "ok" {
		t.Errorf("after the bomb, a request = %d %q, want 200 ok", status, body)
	}
}

func maxOf(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}
