package server_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// readCounter is the test server's listener: it counts the bytes the
// server has read from each connection, by the client's address, so that a
// test knows when the server has taken in what a client sent.
type readCounter struct {
	net.Listener

	mu sync.Mutex
	by map[string]*atomic.Int64 // guarded by mu
}

func (l *readCounter) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	n := new(atomic.Int64)
	l.mu.Lock()
	l.by[c.RemoteAddr().String()] = n
	l.mu.Unlock()
	return &countedConn{Conn: c, n: n}, nil
}

// read returns how many bytes the server read from the client at addr.
func (l *readCounter) read(addr string) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := l.by[addr]; n != nil {
		return n.Load()
	}
	return 0
}

type countedConn struct {
	net.Conn
	n *atomic.Int64
}

func (c *countedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// zeros is what stalled bodies send.
var zeros = make([]byte, 64<<10)

// zeroReader reads zeros forever, without allocating.
type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) { return copy(p, zeros), nil }

// letters is what stalled JSON strings hold.
var letters = bytes.Repeat([]byte("a"), 64<<10)

// letterReader reads "aaa..." forever, without allocating.
type letterReader struct{}

func (letterReader) Read(p []byte) (int, error) { return copy(p, letters), nil }

var errAborted = errors.New("the test aborted the body")

// stallReader delivers first, then waits for release; after it, it reads
// from then, or fails (the client aborts) when then is nil.
type stallReader struct {
	first   io.Reader
	release <-chan struct{}
	then    io.Reader
}

func (r *stallReader) Read(p []byte) (int, error) {
	if n, err := r.first.Read(p); n > 0 || err != io.EOF {
		return n, err
	}
	<-r.release
	if r.then == nil {
		return 0, errAborted
	}
	return r.then.Read(p)
}

// stuck is one request whose body stalls: the attacker's slow upload.
type stuck struct {
	sent    int64         // bytes of body sent before the stall
	release chan struct{} // closed to end the stall
	done    chan struct{} // closed once the response (or error) is in

	mu   sync.Mutex
	addr string // guarded by mu; the client's address, the server's RemoteAddr

	status int    // set before done is closed; 0 when err
	body   []byte // set before done is closed
	err    error  // set before done is closed
}

func (s *stuck) answered() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

func (s *stuck) clientAddr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// startStuck sends a request whose body delivers sent bytes of first and
// stalls until s.release is closed, then goes on with then (nil aborts
// it). length is the declared Content-Length, or -1 for a chunked body.
// Each request has a connection of its own.
func (e *env) startStuck(method, path, token string, length int64, first io.Reader, sent int64, then io.Reader) *stuck {
	e.t.Helper()
	s := &stuck{sent: sent, release: make(chan struct{}), done: make(chan struct{})}
	body := &stallReader{first: io.LimitReader(first, sent), release: s.release, then: then}
	req, err := http.NewRequest(method, e.ts.URL+path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	req.ContentLength = length
	// As curl does for large bodies: a refusal before the body is read then
	// reaches the client whole, instead of racing with its writes.
	req.Header.Set("Expect", "100-continue")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	var d net.Dialer
	tr := &http.Transport{DisableKeepAlives: true, ExpectContinueTimeout: time.Minute, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err == nil {
			s.mu.Lock()
			s.addr = c.LocalAddr().String()
			s.mu.Unlock()
		}
		return c, err
	}}
	e.t.Cleanup(func() {
		select {
		case <-s.release:
		default:
			close(s.release)
		}
		<-s.done
		tr.CloseIdleConnections()
	})
	go func() {
		defer close(s.done)
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			s.err = err
			return
		}
		defer resp.Body.Close()
		s.status = resp.StatusCode
		s.body, s.err = io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	}()
	return s
}

// waitTaken waits until the server has either answered each request or
// read what its body sent before the stall.
func (e *env) waitTaken(reqs []*stuck) {
	e.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		left := 0
		for _, s := range reqs {
			if !s.answered() && e.reads.read(s.clientAddr()) < s.sent {
				left++
			}
		}
		if left == 0 {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("after 2 minutes the server has neither answered nor read %d of %d stalled requests", left, len(reqs))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// liveHeap returns the bytes of live heap objects after a collection.
func liveHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

const mib = 1 << 20
