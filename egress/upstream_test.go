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
	t     *testing.T
	c     net.Conn
	br    *bufio.Reader
	close bool // requests say Connection: close
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
	if pc.close {
		req += "Connection: close\r\n"
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

// TestUpstreamReuse: requests share an upstream connection, on one
// client connection or across client connections (the proxy's idle pool),
// only while they decide to the same host and port, the same checked
// addresses and the same credentials; a request for another host, another
// resolution or another credential context never travels on a connection
// dialed for something else, and a credential never reaches a host it is
// not for.
func TestUpstreamReuse(t *testing.T) {
	for _, newConn := range []bool{false, true} {
		t.Run(map[bool]string{false: "one-client-connection", true: "connection-per-request"}[newConn], func(t *testing.T) {
			testUpstreamReuse(t, newConn)
		})
	}
}

func testUpstreamReuse(t *testing.T, newConn bool) {
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
	var pc *proxyConn
	for i, s := range steps {
		if pc == nil || newConn {
			pc = dialProxy(t, h)
			pc.close = newConn
		}
		if status, body := pc.do("GET", hp(s.host), "/", ""); status != 200 || body != "ok" {
			t.Fatalf("request %d to %s = %d %q, want 200 ok", i+1, s.host, status, body)
		}
		if newConn {
			// The upstream connection is kept once the client's is done.
			waitFor(t, "the proxy to end the client connection", func() bool { return h.p.Stats().Open == 0 })
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
	if len(owner) != 6 {
		t.Errorf("the requests used %d upstream connections, want 6, one per key", len(owner))
	}
}

// poolServer is an upstream that counts the connections it accepted and
// those open, and a proxy granting it as many names as n (h0.pool.test,
// h1.pool.test, ...) with hc's other settings.
type poolServer struct {
	open, accepted atomic.Int64
	port           int
	h              *harness
}

func newPoolServer(t *testing.T, n int, hc harnessConfig) *poolServer {
	t.Helper()
	ps := &poolServer{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			ps.open.Add(1)
			ps.accepted.Add(1)
		case http.StateClosed, http.StateHijacked:
			ps.open.Add(-1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	ps.port = srv.Listener.Addr().(*net.TCPAddr).Port
	hc.resolve = map[string]string{}
	for i := range n {
		hc.resolve[fmt.Sprintf("h%d.pool.test", i)] = "127.0.0.1"
	}
	hc.hosts = []string{fmt.Sprintf("*.pool.test:%d", ps.port), fmt.Sprintf("127.0.0.1:%d", ps.port)}
	ps.h = startProxy(t, hc)
	return ps
}

// get sends one request to host i on a client connection of its own, and
// waits until the proxy has ended that connection.
func (ps *poolServer) get(t *testing.T, i int) {
	t.Helper()
	pc := dialProxy(t, ps.h)
	pc.close = true
	hp := net.JoinHostPort(fmt.Sprintf("h%d.pool.test", i), strconv.Itoa(ps.port))
	if status, body := pc.do("GET", hp, "/", ""); status != 200 || body != "ok" {
		t.Fatalf("GET %s = %d %q", hp, status, body)
	}
	waitFor(t, "the proxy to end the client connection", func() bool { return ps.h.p.Stats().Open == 0 })
}

// TestUpstreamPoolBound: the upstream connections a proxy keeps between
// requests are at most MaxIdleUpstreams however many hosts the sandbox
// asks for, the least recently used closed first, and each is closed once
// it has waited IdleTimeout.
func TestUpstreamPoolBound(t *testing.T) {
	const n = egress.MaxIdleUpstreams + 8
	ps := newPoolServer(t, n, harnessConfig{idle: 2 * time.Second})
	for i := range n {
		ps.get(t, i)
	}
	waitFor(t, "the upstream connections beyond the bound to close", func() bool { return ps.open.Load() <= egress.MaxIdleUpstreams })
	if got := ps.open.Load(); got != egress.MaxIdleUpstreams {
		t.Errorf("%d upstream connections open after %d hosts, want %d kept", got, n, egress.MaxIdleUpstreams)
	}
	before := ps.accepted.Load()
	ps.get(t, n-1) // kept
	if got := ps.accepted.Load() - before; got != 0 {
		t.Errorf("the most recent host's request opened %d connections, want its kept one reused", got)
	}
	ps.get(t, 0) // closed first
	if got := ps.accepted.Load() - before; got != 1 {
		t.Errorf("the least recent host's request opened %d connections, want 1: its connection was the first closed", got)
	}
	waitFor(t, "kept connections to close after IdleTimeout", func() bool { return ps.open.Load() == 0 })
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
// for more, whether the body is chunked or of a known length (copied by
// bodyWriter.ReadFrom in large pieces).
func TestUpstreamStreams(t *testing.T) {
	for _, length := range []bool{false, true} {
		name := "chunked"
		if length {
			name = "content-length"
		}
		t.Run(name, func(t *testing.T) { testUpstreamStreams(t, length) })
	}
}

func testUpstreamStreams(t *testing.T, length bool) {
	next := make(chan struct{})
	var once sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if length {
			w.Header().Set("Content-Length", strconv.Itoa(len("first\nsecond\n")))
		}
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
	if length && resp.ContentLength != int64(len("first\nsecond\n")) {
		t.Fatalf("Content-Length = %d, want the upstream's", resp.ContentLength)
	}
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

// TestUpstreamPoolGivesWay: kept upstream connections and client
// connections together stay within MaxConns, so a sandbox holds at most
// two of the supervisor's fds per connection it may open: the pool keeps
// fewer when MaxConns is small, and closes what it keeps as clients
// connect.
func TestUpstreamPoolGivesWay(t *testing.T) {
	const maxConns = 4
	ps := newPoolServer(t, 10, harnessConfig{conns: maxConns})
	for i := range 10 {
		ps.get(t, i)
	}
	waitFor(t, "the kept connections to fit in MaxConns", func() bool { return ps.open.Load() < maxConns })
	// Clients that hold every connection MaxConns allows leave the pool no room.
	for range maxConns {
		c, err := net.Dial("tcp", ps.h.httpAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	waitFor(t, "the proxy to serve the clients", func() bool { return ps.h.p.Stats().Open == maxConns })
	waitFor(t, "the kept connections to close", func() bool { return ps.open.Load() == 0 })
}

// TestUpstreamAbandoned: a response the client stops reading (it closes
// its connection mid-body) leaves its upstream connection closed, never
// kept: the next request, from another client connection, gets its own
// response, not the rest of the abandoned one.
func TestUpstreamAbandoned(t *testing.T) {
	chunk := strings.Repeat("x", 32<<10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/endless" {
			io.WriteString(w, "small")
			return
		}
		for { // until the proxy closes the connection
			if _, err := io.WriteString(w, chunk); err != nil {
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	hp := net.JoinHostPort("up.test", strconv.Itoa(port))
	h := startProxy(t, harnessConfig{
		hosts:   []string{hp, net.JoinHostPort("127.0.0.1", strconv.Itoa(port))},
		resolve: map[string]string{"up.test": "127.0.0.1"},
	})
	pc := dialProxy(t, h)
	fmt.Fprintf(pc.c, "GET http://%s/endless HTTP/1.1\r\nHost: %s\r\n\r\n", hp, hp)
	if _, err := http.ReadResponse(pc.br, nil); err != nil {
		t.Fatal(err)
	}
	pc.c.Close() // mid-body
	waitFor(t, "the proxy to end the client connection", func() bool { return h.p.Stats().Open == 0 })
	for i := range 3 {
		if status, body := dialProxy(t, h).do("GET", hp, "/small", ""); status != 200 || body != "small" {
			t.Fatalf("request %d after the abandoned one = %d %.40q, want 200 small", i+1, status, body)
		}
	}
}
