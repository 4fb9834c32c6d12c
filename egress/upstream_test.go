package egress_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/egress"
)

// rawServer is an upstream on 127.0.0.1 written byte by byte: serve runs
// for each connection it accepts, with the connection's number (from 1).
type rawServer struct {
	ln    net.Listener
	port  int
	conns atomic.Int64
}

func newRawServer(t *testing.T, serve func(c net.Conn, br *bufio.Reader, n int)) *rawServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &rawServer{ln: ln, port: ln.Addr().(*net.TCPAddr).Port}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n := int(s.conns.Add(1))
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				serve(c, bufio.NewReader(c), n)
			}()
		}
	}()
	return s
}

func (s *rawServer) hostPort(name string) string { return net.JoinHostPort(name, strconv.Itoa(s.port)) }

// readRequest reads one request and its body; nil when the connection
// ends first.
func readRequest(br *bufio.Reader) *http.Request {
	r, err := http.ReadRequest(br)
	if err != nil {
		return nil
	}
	io.Copy(io.Discard, r.Body)
	return r
}

// proxyConn is one keep-alive client connection to the proxy.
type proxyConn struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func dialProxy(t *testing.T, h *harness) *proxyConn {
	t.Helper()
	c, err := net.Dial("tcp", h.httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(30 * time.Second)) // a proxy that hangs fails the test instead of the run
	return &proxyConn{t: t, c: c, br: bufio.NewReader(c)}
}

// do sends method on http://hostPort/path with body (none when "") and
// returns the status and body of the response.
func (pc *proxyConn) do(method, hostPort, path, body string) (int, string) {
	pc.t.Helper()
	req := fmt.Sprintf("%s http://%s%s HTTP/1.1\r\nHost: %s\r\n", method, hostPort, path, hostPort)
	if body != "" {
		req += fmt.Sprintf("Content-Length: %d\r\n", len(body))
	}
	if _, err := io.WriteString(pc.c, req+"\r\n"+body); err != nil {
		pc.t.Fatalf("%s %s: write: %v", method, hostPort, err)
	}
	resp, err := http.ReadResponse(pc.br, nil)
	if err != nil {
		pc.t.Fatalf("%s %s: read response: %v", method, hostPort, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		pc.t.Fatalf("%s %s: read body: %v", method, hostPort, err)
	}
	return resp.StatusCode, string(b)
}

// TestUpstreamReuse: a client connection's requests share an upstream
// connection only while they decide to the same host and port, the same
// checked addresses and the same credentials; a request for another
// host, another resolution or another credential context never travels
// on a connection dialed for something else, and a credential never
// reaches a host it is not for.
func TestUpstreamReuse(t *testing.T) {
	type seen struct{ host, conn, auth string }
	var mu sync.Mutex
	var got []seen
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, seen{r.Host, r.RemoteAddr, r.Header.Get("Authorization")})
		mu.Unlock()
		io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	hp := func(name string) string { return net.JoinHostPort(name, strconv.Itoa(port)) }
	h := startProxy(t, harnessConfig{
		hosts: []string{hp("a.test"), hp("b.test"), hp("cred.test"), hp("rebind.test"), hp("127.0.0.1"), hp("127.0.0.2")},
		resolve: map[string]string{
			"a.test": "127.0.0.1", "b.test": "127.0.0.1", "cred.test": "127.0.0.1", "rebind.test": "127.0.0.1",
		},
		creds: []egress.Credential{{Host: "cred.test", Header: "Authorization", Value: "Bearer " + secret}},
	})
	// rebind.test resolves to one address, then to two: a new decision
	// with other checked addresses, then the same again.
	lo2 := netip.MustParseAddr("127.0.0.2")
	h.res.mu.Lock()
	h.res.seq["rebind.test"] = [][]netip.Addr{{loopback4}, {loopback4, lo2}, {loopback4, lo2}}
	h.res.mu.Unlock()

	steps := []struct {
		host string
		key  string // what the request decides to: host, addresses, credentials
		same bool   // it goes on the upstream connection of the request before
	}{
		{"a.test", "a", false},
		{"a.test", "a", true},
		{"b.test", "b", false}, // another host, same server and address
		{"a.test", "a", false}, // and back
		{"cred.test", "cred", false},
		{"cred.test", "cred", true},
		{"a.test", "a", false},
		{"127.0.0.1", "127.0.0.1", false}, // the address itself, granted as an address
		{"rebind.test", "rebind 1", false},
		{"rebind.test", "rebind 2", false}, // resolved to other addresses
		{"rebind.test", "rebind 2", true},
	}
	pc := dialProxy(t, h)
	for i, s := range steps {
		if status, body := pc.do("GET", hp(s.host), "/", ""); status != 200 || body != "ok" {
			t.Fatalf("request %d to %s = %d %q, want 200 ok", i+1, s.host, status, body)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != len(steps) {
		t.Fatalf("the server got %d requests, want %d", len(got), len(steps))
	}
	owner := map[string]int{} // upstream connection -> the request it was dialed for
	for i, s := range steps {
		g := got[i]
		if g.host != hp(s.host) {
			t.Errorf("request %d reached the server for %s, want %s", i+1, g.host, hp(s.host))
		}
		if i > 0 && (g.conn == got[i-1].conn) != s.same {
			t.Errorf("request %d (%s) on the upstream connection of request %d (%s): %v, want %v",
				i+1, s.key, i, steps[i-1].key, g.conn == got[i-1].conn, s.same)
		}
		if first, ok := owner[g.conn]; !ok {
			owner[g.conn] = i
		} else if steps[first].key != s.key {
			t.Errorf("request %d (%s) travelled on the connection dialed for request %d (%s)", i+1, s.key, first+1, steps[first].key)
		}
		wantAuth := ""
		if s.host == "cred.test" {
			wantAuth = "Bearer " + secret
		}
		if g.auth != wantAuth {
			t.Errorf("request %d (%s) carried Authorization %q, want %q: the credential is for cred.test only", i+1, s.key, g.auth, wantAuth)
		}
	}
}

// TestUpstreamUnsolicited: bytes an upstream sends that no request asked
// for (a second response, sent with the first or while the connection is
// idle) never reach the client as the answer to its next request: the
// connection is dropped and the next request gets a new one.
func TestUpstreamUnsolicited(t *testing.T) {
	for _, late := range []bool{false, true} {
		t.Run(map[bool]string{false: "with-the-response", true: "while-idle"}[late], func(t *testing.T) {
			sent := make(chan struct{})    // the late extra response was sent
			reading := make(chan struct{}) // the client read the first response
			srv := newRawServer(t, func(c net.Conn, br *bufio.Reader, n int) {
				for first := true; readRequest(br) != nil; first = false {
					ok := "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
					evil := "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nevil"
					switch {
					case first && n == 1 && !late:
						io.WriteString(c, ok+evil)
					case first && n == 1:
						io.WriteString(c, ok)
						<-reading
						io.WriteString(c, evil)
						close(sent)
					default:
						io.WriteString(c, ok)
					}
				}
			})
			h := startProxy(t, harnessConfig{
				hosts:   []string{srv.hostPort("up.test"), srv.hostPort("127.0.0.1")},
				resolve: map[string]string{"up.test": "127.0.0.1"},
			})
			pc := dialProxy(t, h)
			for i := range 3 {
				status, body := pc.do("GET", srv.hostPort("up.test"), "/", "")
				if status != 200 || body != "ok" {
					t.Fatalf("request %d = %d %q, want 200 ok", i+1, status, body)
				}
				if i == 0 && late {
					close(reading)
					<-sent
				}
			}
			if n := srv.conns.Load(); n != 2 {
				t.Errorf("the upstream accepted %d connections, want 2: the first is dropped after its extra bytes, the second kept", n)
			}
		})
	}
}

// TestUpstreamClosedIdle: an upstream that closes a kept connection
// between requests (its idle timeout) costs the client nothing: the next
// request, with or without a body, goes on a new connection. One that
// closes a kept connection after reading a request, without answering,
// gets a request without a body sent again on a new connection, as
// http.Transport does; one with a body, which was consumed, is answered
// 502.
func TestUpstreamClosedIdle(t *testing.T) {
	closed := make(chan struct{}, 1)
	srv := newRawServer(t, func(c net.Conn, br *bufio.Reader, n int) {
		r := readRequest(br)
		if r == nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		if r.URL.Path == "/then-close" {
			c.Close()
			closed <- struct{}{}
			return
		}
		// Read the next request and close without an answer.
		readRequest(br)
	})
	h := startProxy(t, harnessConfig{
		hosts:   []string{srv.hostPort("up.test"), srv.hostPort("127.0.0.1")},
		resolve: map[string]string{"up.test": "127.0.0.1"},
	})
	hp := srv.hostPort("up.test")
	pc := dialProxy(t, h)
	steps := []struct {
		method, path, body string
		want               int
		conns              int64 // the upstream's connections so far
	}{
		{"GET", "/then-close", "", 200, 1},
		{"GET", "/then-close", "", 200, 2}, // the idle connection was closed
		{"POST", "/", "a body", 200, 3},    // likewise
		{"GET", "/", "", 200, 4},           // the kept connection read it and closed: sent again
		{"POST", "/", "a body", 502, 4},    // consumed, so not sent again
	}
	for i, s := range steps {
		status, body := pc.do(s.method, hp, s.path, s.body)
		if status != s.want {
			t.Fatalf("step %d: %s %s = %d %q, want %d", i+1, s.method, s.path, status, body, s.want)
		}
		if s.path == "/then-close" {
			<-closed
		}
		if n := srv.conns.Load(); n != s.conns {
			t.Errorf("step %d: the upstream accepted %d connections, want %d", i+1, n, s.conns)
		}
	}
}

// TestUpstreamLimits: an upstream cannot make the proxy hold more than
// 1 MiB of response head, whether in one head or in informational (1xx)
// heads before it; the client gets 502.
func TestUpstreamLimits(t *testing.T) {
	tests := []struct {
		name  string
		chunk string // repeated after the status line until the proxy hangs up
		head  string
	}{
		{"one-large-head", "X-Filler: " + strings.Repeat("a", 1000) + "\r\n", "HTTP/1.1 200 OK\r\n"},
		{"endless-1xx", "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var wrote atomic.Int64
			srv := newRawServer(t, func(c net.Conn, br *bufio.Reader, n int) {
				if readRequest(br) == nil {
					return
				}
				io.WriteString(c, tt.head)
				for wrote.Load() < 64<<20 {
					n, err := io.WriteString(c, tt.chunk)
					wrote.Add(int64(n))
					if err != nil {
						return
					}
				}
			})
			h := startProxy(t, harnessConfig{
				hosts:   []string{srv.hostPort("up.test"), srv.hostPort("127.0.0.1")},
				resolve: map[string]string{"up.test": "127.0.0.1"},
			})
			status, body := dialProxy(t, h).do("GET", srv.hostPort("up.test"), "/", "")
			if status != 502 || !strings.Contains(body, "exceed") {
				t.Errorf("response = %d %q, want 502 naming the limit", status, body)
			}
			if w := wrote.Load(); w >= 64<<20 {
				t.Errorf("the proxy read all %d bytes the upstream sent, want it to stop near 1 MiB", w)
			}
		})
	}
}

// TestUpstreamEarlyAnswer: an upstream that answers before it has read a
// large request body (413) is heard: the client gets its answer, not a
// 502, and its connection is closed, since its body was not consumed.
func TestUpstreamEarlyAnswer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "too large", http.StatusRequestEntityTooLarge)
	}))
	t.Cleanup(srv.Close)
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	hp := net.JoinHostPort("up.test", strconv.Itoa(port))
	h := startProxy(t, harnessConfig{
		hosts:   []string{hp, net.JoinHostPort("127.0.0.1", strconv.Itoa(port))},
		resolve: map[string]string{"up.test": "127.0.0.1"},
	})
	pc := dialProxy(t, h)
	// The client sends its head, then its body as long as the proxy reads.
	fmt.Fprintf(pc.c, "POST http://%s/ HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n", hp, hp, 64<<20)
	go func() {
		chunk := make([]byte, 64<<10)
		for range 1024 {
			if _, err := pc.c.Write(chunk); err != nil {
				return
			}
		}
	}()
	resp, err := http.ReadResponse(pc.br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("status = %d, want 413", resp.StatusCode)
	}
	if _, err := pc.br.ReadByte(); err == nil {
		t.Error("the client connection carried more after a response to a body the proxy did not consume")
	}
}

// TestUpstreamStreams: a response the upstream sends in parts reaches the
// client part by part: the proxy passes on what it has before it waits
// for more.
func TestUpstreamStreams(t *testing.T) {
	next := make(chan struct{})
	var once sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "first\n")
		w.(http.Flusher).Flush()
		<-next // closed once the client has read the first part
		io.WriteString(w, "second\n")
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { once.Do(func() { close(next) }) }) // before srv.Close, which waits for the handler
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	hp := net.JoinHostPort("up.test", strconv.Itoa(port))
	h := startProxy(t, harnessConfig{
		hosts:   []string{hp, net.JoinHostPort("127.0.0.1", strconv.Itoa(port))},
		resolve: map[string]string{"up.test": "127.0.0.1"},
	})
	pc := dialProxy(t, h)
	fmt.Fprintf(pc.c, "GET http://%s/ HTTP/1.1\r\nHost: %s\r\n\r\n", hp, hp)
	resp, err := http.ReadResponse(pc.br, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if l, err := br.ReadString('\n'); l != "first\n" {
		t.Fatalf("first part = %q, %v; want it before the upstream sends more", l, err)
	}
	once.Do(func() { close(next) })
	if l, err := br.ReadString('\n'); l != "second\n" {
		t.Fatalf("second part = %q, %v", l, err)
	}
}

// TestUpstreamClientBodyFails: a client body that breaks off (here a
// malformed chunk) while the upstream waits for the rest of it ends the
// upstream connection, so neither the proxy nor the upstream waits
// forever: the client is answered 502.
func TestUpstreamClientBodyFails(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body) // waits for the rest of the body
		io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	hp := net.JoinHostPort("up.test", strconv.Itoa(port))
	h := startProxy(t, harnessConfig{
		hosts:   []string{hp, net.JoinHostPort("127.0.0.1", strconv.Itoa(port))},
		resolve: map[string]string{"up.test": "127.0.0.1"},
	})
	pc := dialProxy(t, h)
	fmt.Fprintf(pc.c, "POST http://%s/ HTTP/1.1\r\nHost: %s\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n", hp, hp)
	resp, err := http.ReadResponse(pc.br, nil)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway {
		t.Errorf("status = %d, want 502", resp.StatusCode)
	}
}
