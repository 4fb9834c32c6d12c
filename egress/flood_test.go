package egress_test

import (
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
)

// watchedListener wraps accepted connections so a test can see every
// deadline the proxy sets on them and whether the proxy is reading.
type watchedListener struct {
	net.Listener
	mu    sync.Mutex
	conns []*watchedConn // guarded by mu
}

func (l *watchedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	w := &watchedConn{Conn: c, accepted: time.Now()}
	l.mu.Lock()
	l.conns = append(l.conns, w)
	l.mu.Unlock()
	return w, nil
}

func (l *watchedListener) all() []*watchedConn {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*watchedConn(nil), l.conns...)
}

type watchedConn struct {
	net.Conn
	accepted time.Time

	mu        sync.Mutex
	deadlines []time.Time // guarded by mu; read deadlines set, zero ones left out
	reads     int         // guarded by mu
}

func (c *watchedConn) Read(b []byte) (int, error) {
	c.mu.Lock()
	c.reads++
	c.mu.Unlock()
	return c.Conn.Read(b)
}

func (c *watchedConn) record(t time.Time) {
	if !t.IsZero() {
		c.mu.Lock()
		c.deadlines = append(c.deadlines, t)
		c.mu.Unlock()
	}
}

func (c *watchedConn) SetReadDeadline(t time.Time) error {
	c.record(t)
	return c.Conn.SetReadDeadline(t)
}

func (c *watchedConn) SetDeadline(t time.Time) error {
	c.record(t)
	return c.Conn.SetDeadline(t)
}

func (c *watchedConn) seen() (deadlines []time.Time, reads int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Time(nil), c.deadlines...), c.reads
}

// serveWatched starts a proxy for hosts serving HTTP (socks false) or
// SOCKS5 on a watched listener.
func serveWatched(t *testing.T, hosts []string, socks bool, mod func(*egress.Config)) (*egress.Proxy, *watchedListener, *audit.Recorder, *budget.Meter) {
	t.Helper()
	pol, err := policy.New(policy.Spec{NetHosts: hosts})
	if err != nil {
		t.Fatal(err)
	}
	rec := &audit.Recorder{}
	meter := budget.NewMeter(budget.Limits{Ops: 1 << 40}, nil)
	cfg := egress.Config{Policy: pol, Meter: meter, Audit: rec, Resolver: newResolver(map[string]string{"allowed.test": "93.184.216.34"}), Dialer: &recordingDialer{}}
	if mod != nil {
		mod(&cfg)
	}
	p, err := egress.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	wl := &watchedListener{Listener: ln}
	serve := p.ServeHTTPProxy
	if socks {
		serve = p.ServeSOCKS5
	}
	done := make(chan struct{})
	go func() { defer close(done); serveErr(t, serve(wl)) }()
	t.Cleanup(func() { p.Close(); <-done })
	return p, wl, rec, cfg.Meter
}

// waitFor polls cond until it holds or 10 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
		}
	}
}

// trickle writes b one byte at a time, one every gap, until the proxy
// closes the connection.
//
// The first byte waits 15 gaps: a deadline re-armed by the first byte
// would then move by that much.
func trickle(c net.Conn, b []byte, gap time.Duration) {
	tick := time.NewTicker(gap)
	defer tick.Stop()
	for range 15 {
		<-tick.C
	}
	for i := range b {
		if _, err := c.Write(b[i : i+1]); err != nil {
			return
		}
		<-tick.C
	}
}

// TestHeadDeadlineIsNotExtended: a client that trickles a request head,
// a SOCKS handshake or a ClientHello byte by byte never moves the deadline
// set when its connection was accepted, so it cannot hold a connection
// (and the supervisor's fd) longer than HandshakeTimeout.
func TestHeadDeadlineIsNotExtended(t *testing.T) {
	const handshake = 2 * time.Second
	const gap = 20 * time.Millisecond
	tests := []struct {
		name  string
		socks bool
		send  []byte
		slack time.Duration // the proxy's own decision time may move a ClientHello's deadline
	}{
		{"http-head", false, []byte("GET http://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\nX-Slow: 1"), 0},
		{"socks-handshake", true, []byte{5, 1, 0, 5, 1, 0, 3, 12, 'a', 'l', 'l', 'o', 'w', 'e', 'd', '.', 't'}, 0},
		// The head is trickled, then the tunnel opens and a ClientHello
		// header is trickled: its deadline is still the head's.
		{"connect-hello", false, []byte("CONNECT allowed.test:443 HTTP/1.1\r\nHost: allowed.test:443\r\n\r\n\x16\x03\x01\x00\x80\x01\x00"), 50 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, wl, _, _ := serveWatched(t, []string{"allowed.test:443"}, tt.socks, func(c *egress.Config) { c.HandshakeTimeout = handshake })
			c, err := net.Dial("tcp", wl.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			trickle(c, tt.send, gap)
			waitFor(t, "the proxy to accept", func() bool { return len(wl.all()) == 1 })
			w := wl.all()[0]
			ds, _ := w.seen()
			if len(ds) == 0 {
				t.Fatal("the proxy set no read deadline")
			}
			first, last := ds[0], ds[len(ds)-1]
			for _, d := range ds {
				if d.After(last) {
					last = d
				}
			}
			if !first.After(w.accepted) || first.Sub(w.accepted) > handshake+50*time.Millisecond {
				t.Errorf("first deadline %v after accept, want about HandshakeTimeout %v", first.Sub(w.accepted), handshake)
			}
			if moved := last.Sub(first); moved > tt.slack {
				t.Errorf("trickling %d bytes %v apart moved the deadline by %v (deadlines %v after accept): a slow client can hold the connection past HandshakeTimeout",
					len(tt.send), gap, moved, sinceAll(ds, w.accepted))
			}
		})
	}
}

func sinceAll(ds []time.Time, from time.Time) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Sub(from).Round(time.Millisecond)
	}
	return out
}

// TestIdleConnectionsAreSmall: connections that have sent nothing, or an
// incomplete head, cost a few hundred bytes of heap each, not a 64 KiB
// buffer.
func TestIdleConnectionsAreSmall(t *testing.T) {
	const n = 200
	_, wl, _, _ := serveWatched(t, []string{"allowed.test:80"}, false, func(c *egress.Config) { c.MaxConns = 10 * n })
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range n {
		c, err := net.Dial("tcp", wl.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		if i%2 == 1 {
			io.WriteString(c, "GET http://allowed.test/ HTTP/1.1\r\n") // an incomplete head
		}
	}
	// Wait until the proxy reads every connection: its buffers exist then.
	waitFor(t, "the proxy to read every connection", func() bool {
		all := wl.all()
		if len(all) < n {
			return false
		}
		for _, w := range all {
			if _, reads := w.seen(); reads == 0 {
				return false
			}
		}
		return true
	})
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := (int64(after.HeapInuse) - int64(before.HeapInuse)) / n
	t.Logf("heap in use grew by %d bytes per idle connection (%d connections)", per, n)
	if per > 16<<10 {
		t.Errorf("each idle connection costs %d bytes of heap, want < 16 KiB", per)
	}
}

// TestDenialsCostOps: every decision costs an op before it is made, so
// a flood of denied requests through every front end ends at max_ops, and
// the meter's Done tells the supervisor to end the run.
func TestDenialsCostOps(t *testing.T) {
	h := startProxy(t, harnessConfig{hosts: []string{"allowed.test:443"}, limits: budget.Limits{Ops: 45}})
	for range 5 {
		if _, err := h.p.Decide(t.Context(), "evil.test", 443); !errors.Is(err, policy.ErrDenied) {
			t.Fatalf("Decide(evil.test) = %v, want a denial", err)
		}
	}
	if ops, _ := h.meter.Usage(); ops != 5 {
		t.Errorf("5 denied decisions cost %d ops, want 5", ops)
	}
	// Every front end, each on its own connection: 2 ops each.
	for range 5 {
		h.rawRequest(t, "GET http://evil.test/ HTTP/1.1\r\nHost: evil.test\r\n\r\n")
		h.rawRequest(t, "GET http://allowed.test:443/ HTTP/1.1\r\nHost: other.test\r\n\r\n") // Host mismatch
		h.rawRequest(t, "CONNECT evil.test:443 HTTP/1.1\r\nHost: evil.test:443\r\n\r\n")
		if _, rep := socksConnect(t, h.socksAddr, 1, 3, []byte("evil.test"), 443); rep != 2 {
			t.Errorf("SOCKS connect to evil.test = reply %d, want 2 (not allowed)", rep)
		}
	}
	if ops, _ := h.meter.Usage(); ops != 45 {
		t.Errorf("ops = %d after 5 decisions and 20 denied connections, want 45 (max_ops)", ops)
	}
	select {
	case <-h.meter.Done():
		t.Error("Done is closed while the budget holds exactly max_ops")
	default:
	}
	// The next connection is past max_ops: closed at once, before any byte.
	c, err := net.Dial("tcp", h.socksAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Errorf("a connection past max_ops: read = %v, want it closed by the proxy", err)
	}
	select {
	case <-h.meter.Done():
	default:
		t.Fatal("the op past max_ops did not halt the meter")
	}
	if got := h.meter.HaltedBy(); got != budget.MaxOps {
		t.Errorf("HaltedBy() = %q, want max_ops", got)
	}
}

// TestConnectionCap: connections beyond MaxConns are closed at once,
// counted and audited, each costs an op, and a slot that frees up is
// served again.
func TestConnectionCap(t *testing.T) {
	const limit = 4
	p, wl, rec, meter := serveWatched(t, []string{"allowed.test:80"}, false, func(c *egress.Config) { c.MaxConns = limit })
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range limit {
		c, err := net.Dial("tcp", wl.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	waitFor(t, "the proxy to serve 4 connections", func() bool { return p.Stats().Open == limit })
	for i := range 10 {
		c, err := net.Dial("tcp", wl.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, net.ErrClosed) || isTimeout(err) {
			t.Errorf("connection %d over the cap: read = %d, %v; want it closed by the proxy at once", i+1, n, err)
		}
		c.Close()
	}
	// The client can see the close before the proxy has counted and
	// audited it.
	capDenials := func() int {
		n := 0
		for _, e := range rec.Denials() {
			if e.Rule == egress.RuleMaxConns && e.Op == "accept" && e.Layer == audit.LayerNet && e.Target == wl.Addr().String() && strings.Contains(e.Message, "4 connections") {
				n++
			}
		}
		return n
	}
	waitFor(t, "the proxy to count and audit 10 connections over the cap", func() bool { return p.Stats().OverCap >= 10 && capDenials() >= 10 })
	st := p.Stats()
	if st.OverCap != 10 || st.Open != limit || st.Served != limit {
		t.Errorf("Stats() = %+v, want 10 over the cap, 4 served and open", st)
	}
	if ops, _ := meter.Usage(); ops != limit+10 {
		t.Errorf("ops = %d, want %d: every accepted connection costs one", ops, limit+10)
	}
	if denials := capDenials(); denials != 10 {
		t.Errorf("%d max_proxy_conns denials audited, want 10: %+v", denials, rec.Denials())
	}
	held[0].Close()
	held = held[1:]
	waitFor(t, "a slot to free up", func() bool { return p.Stats().Open == limit-1 })
	c, err := net.Dial("tcp", wl.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	held = append(held, c)
	waitFor(t, "the new connection to be served", func() bool { return p.Stats().Served == limit+1 })
}

// TestConnectionsCostOps: a connect loop against the proxy ends at max_ops
// even when no request is ever sent.
func TestConnectionsCostOps(t *testing.T) {
	p, wl, rec, meter := serveWatched(t, []string{"allowed.test:80"}, true, func(c *egress.Config) {
		c.Meter = budget.NewMeter(budget.Limits{Ops: 5}, nil)
	})
	for range 8 {
		c, err := net.Dial("tcp", wl.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	waitFor(t, "8 accepts", func() bool { st := p.Stats(); return st.Served+st.OverBudget == 8 })
	if st := p.Stats(); st.Served != 5 || st.OverBudget != 3 {
		t.Errorf("Stats() = %+v, want 5 served and 3 refused by the budget", st)
	}
	select {
	case <-meter.Done():
	default:
		t.Error("the meter did not halt")
	}
	var found bool
	for _, e := range rec.Denials() {
		found = found || (e.Rule == string(budget.MaxOps) && e.Op == "accept")
	}
	if !found {
		t.Errorf("no max_ops denial for an accepted connection: %+v", rec.Denials())
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
