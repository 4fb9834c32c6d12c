package airtest

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
	"testing"
	"time"
)

// This file is the kit of the attacks on a server's buffers: requests
// whose bodies stall (a slow upload), a listener that tells how much of
// them the server has taken in, and the live heap to compare before and
// after.

// ReadCounter is a listener that counts the bytes the server has read from
// each connection, by the client's address, so that a test knows when the
// server has taken in what a client sent.
type ReadCounter struct {
	net.Listener

	mu sync.Mutex
	by map[string]*atomic.Int64 // guarded by mu
}

// CountReads wraps l.
func CountReads(l net.Listener) *ReadCounter {
	return &ReadCounter{Listener: l, by: map[string]*atomic.Int64{}}
}

// Accept accepts a connection and counts what is read from it.
func (l *ReadCounter) Accept() (net.Conn, error) {
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

// Read returns how many bytes the server read from the client at addr.
func (l *ReadCounter) Read(addr string) int64 {
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

var (
	zeros   = make([]byte, 64<<10)
	letters = bytes.Repeat([]byte("a"), 64<<10)
)

// Zeros reads zero bytes forever, without allocating.
type Zeros struct{}

func (Zeros) Read(p []byte) (int, error) { return copy(p, zeros), nil }

// Letters reads "aaa..." forever, without allocating: the inside of a JSON
// string that is still arriving.
type Letters struct{}

func (Letters) Read(p []byte) (int, error) { return copy(p, letters), nil }

// ErrAborted is what a stalled body fails with when it is released with
// nothing to follow: the client gives up on the request.
var ErrAborted = errors.New("airtest: the test aborted the body")

// stallReader delivers first, then waits for release; after it, it reads
// from then, or fails with ErrAborted when then is nil.
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
		return 0, ErrAborted
	}
	return r.then.Read(p)
}

// Stalled is one request whose body stalls: the attacker's slow upload.
type Stalled struct {
	Sent    int64         // bytes of body sent before the stall
	Release chan struct{} // closed to end the stall; Cleanup closes it too
	Done    chan struct{} // closed once the response (or error) is in

	mu   sync.Mutex
	addr string // guarded by mu; the client's address, the server's RemoteAddr

	Status int    // set before Done is closed; 0 with Err
	Body   []byte // set before Done is closed; at most 1 MiB
	Err    error  // set before Done is closed
}

// Answered reports whether the response (or an error) is in.
func (s *Stalled) Answered() bool {
	select {
	case <-s.Done:
		return true
	default:
		return false
	}
}

// ClientAddr returns the client's address once connected, else "".
func (s *Stalled) ClientAddr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// StartStalled sends req (its ContentLength set by the caller, -1 for a
// chunked body) with a body that delivers sent bytes of first, stalls
// until Release is closed, then goes on with then (nil aborts it). Like
// curl with a large body, it sends "Expect: 100-continue", so that a
// refusal before the body is read reaches the client whole. Each request
// has a connection of its own.
func StartStalled(t testing.TB, req *http.Request, first io.Reader, sent int64, then io.Reader) *Stalled {
	t.Helper()
	s := &Stalled{Sent: sent, Release: make(chan struct{}), Done: make(chan struct{})}
	body := &stallReader{first: io.LimitReader(first, sent), release: s.Release, then: then}
	req.Body = io.NopCloser(body)
	req.GetBody = nil
	req.Header.Set("Expect", "100-continue")
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
	t.Cleanup(func() {
		select {
		case <-s.Release:
		default:
			close(s.Release)
		}
		<-s.Done
		tr.CloseIdleConnections()
	})
	go func() {
		defer close(s.Done)
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			s.Err = err
			return
		}
		defer resp.Body.Close()
		s.Status = resp.StatusCode
		s.Body, s.Err = io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	}()
	return s
}

// WaitTaken waits until the server behind l has either answered each
// request or read what its body sent before the stall.
func WaitTaken(t testing.TB, l *ReadCounter, reqs []*Stalled) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		left := 0
		for _, s := range reqs {
			if !s.Answered() && l.Read(s.ClientAddr()) < s.Sent {
				left++
			}
		}
		if left == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 2 minutes the server has neither answered nor read %d of %d stalled requests", left, len(reqs))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// LiveHeap returns the bytes of live heap objects after a collection.
func LiveHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
