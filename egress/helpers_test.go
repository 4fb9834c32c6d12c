package egress_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
)

var loopback4 = netip.MustParseAddr("127.0.0.1")

// countingListener counts the connections a test server accepted, so a
// denial test can assert that the server it protects saw nothing.
type countingListener struct {
	net.Listener
	n atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// target is an HTTP test server on 127.0.0.1 that counts accepted
// connections and requests.
type target struct {
	srv      *httptest.Server
	ln       *countingListener
	port     uint16
	requests atomic.Int64
}

func (t *target) accepted() int64 { return t.ln.n.Load() }

// hostPort returns name:port for this server.
func (t *target) hostPort(name string) string {
	return net.JoinHostPort(name, strconv.Itoa(int(t.port)))
}

// newTarget starts a server that answers "hello from NAME" and echoes a
// request body after it.
func newTarget(t testing.TB, name string) *target {
	t.Helper()
	tg := &target{}
	tg.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tg.requests.Add(1)
		body, _ := io.ReadAll(r.Body) // a short body is part of what the test checks
		fmt.Fprintf(w, "hello from %s host=%s %s", name, r.Host, body)
	}))
	tg.ln = &countingListener{Listener: tg.srv.Listener}
	tg.srv.Listener = tg.ln
	tg.srv.Start()
	tg.port = uint16(tg.ln.Addr().(*net.TCPAddr).Port)
	t.Cleanup(tg.srv.Close)
	return tg
}

// fakeResolver maps names to addresses and records every lookup. A name
// with several entries in seq answers them in turn (DNS rebinding).
type fakeResolver struct {
	mu    sync.Mutex
	names map[string][]netip.Addr   // guarded by mu
	seq   map[string][][]netip.Addr // guarded by mu
	asked []string                  // guarded by mu
}

func newResolver(m map[string]string) *fakeResolver {
	r := &fakeResolver{names: map[string][]netip.Addr{}, seq: map[string][][]netip.Addr{}}
	for name, addrs := range m {
		for _, a := range strings.Split(addrs, ",") {
			r.names[name] = append(r.names[name], netip.MustParseAddr(a))
		}
	}
	return r
}

func (r *fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked = append(r.asked, host)
	if s := r.seq[host]; len(s) > 0 {
		r.seq[host] = s[1:]
		return s[0], nil
	}
	if a, ok := r.names[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func (r *fakeResolver) lookups() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.asked...)
}

// recordingDialer records every address it is asked to dial. It connects
// only to loopback addresses: tests never send traffic anywhere else. A
// non-loopback address gets fail, or an error when fail is nil.
type recordingDialer struct {
	mu    sync.Mutex
	addrs []string            // guarded by mu
	conns map[string]net.Conn // guarded by mu: each connection dialed to loopback, by its local address
	fail  func(addr string) (net.Conn, error)
}

func (d *recordingDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	d.addrs = append(d.addrs, addr)
	d.mu.Unlock()
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, fmt.Errorf("test dialer: %q is not an IP address and port; the proxy must dial checked addresses only", addr)
	}
	if !ap.Addr().Unmap().IsLoopback() {
		if d.fail != nil {
			return d.fail(addr)
		}
		return nil, errors.New("test dialer: refusing to connect outside loopback")
	}
	var nd net.Dialer
	c, err := nd.DialContext(ctx, network, addr)
	if err == nil {
		d.mu.Lock()
		if d.conns == nil {
			d.conns = map[string]net.Conn{}
		}
		d.conns[c.LocalAddr().String()] = c
		d.mu.Unlock()
	}
	return c, err
}

// connFrom returns the connection the proxy dialed from local, the remote
// address its server sees, or nil.
func (d *recordingDialer) connFrom(local net.Addr) net.Conn {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.conns[local.String()]
}

func (d *recordingDialer) dialed() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.addrs...)
}

// harness is a running proxy with its fakes.
type harness struct {
	p         *egress.Proxy
	httpAddr  string
	socksAddr string
	rec       *audit.Recorder
	res       *fakeResolver
	dialer    *recordingDialer
	meter     *budget.Meter

	via        string // viaConnect or viaTransparent: how open reaches a destination
	tunnelAddr string // the transparent listener (ServeTunnels)
	mu         sync.Mutex
	pending    map[uint16]*egress.Tunnel // guarded by mu: by the source port of the connection that claims it
}

// How a test's tunnel reaches its destination: a CONNECT request to the
// HTTP proxy, or the transparent path, where the supervisor opens a
// Tunnel while the sandbox's connect waits and the connection arrives at
// ServeTunnels' listener. Tests of what a tunnel carries run both.
const (
	viaConnect     = "connect"
	viaTransparent = "transparent"
)

var vias = []string{viaConnect, viaTransparent}

// touched reports whether the proxy carried anything to tg: a connection
// for CONNECT, which dials only after the first bytes are checked; a
// request for the transparent path, which dials while the client's connect
// waits (the server sees a connection that carries nothing).
func (h *harness) touched(tg *target) int64 {
	if h.via == viaTransparent {
		return tg.requests.Load()
	}
	return tg.accepted()
}

type harnessConfig struct {
	hosts   []string
	resolve map[string]string
	limits  budget.Limits
	skipSNI bool
	advice  bool          // egress.Config.AgentAdvice
	timeout time.Duration // egress.Config.HandshakeTimeout; 0 for the default
	idle    time.Duration // egress.Config.IdleTimeout; 0 for the default
	conns   int           // egress.Config.MaxConns; 0 for the default
	via     string        // viaConnect (the default) or viaTransparent
	creds   []egress.Credential
	ca      *egress.CA
	roots   *x509.CertPool // egress.Config.UpstreamRoots
}

func startProxy(t testing.TB, hc harnessConfig) *harness {
	t.Helper()
	var pcs []policy.Credential
	for _, c := range hc.creds {
		pcs = append(pcs, policy.Credential{Host: c.Host, Header: c.Header, Env: "SECRET_" + strconv.Itoa(len(pcs))})
	}
	pol, err := policy.New(policy.Spec{NetHosts: hc.hosts, Credentials: pcs})
	if err != nil {
		t.Fatalf("policy.New(%q): %v", hc.hosts, err)
	}
	h := &harness{
		rec:    &audit.Recorder{},
		res:    newResolver(hc.resolve),
		dialer: &recordingDialer{},
		meter:  budget.NewMeter(hc.limits, nil),
	}
	h.p, err = egress.New(egress.Config{
		Policy: pol, Meter: h.meter, Audit: h.rec, Resolver: h.res, Dialer: h.dialer,
		SkipSNICheck: hc.skipSNI, AgentAdvice: hc.advice, HandshakeTimeout: hc.timeout, IdleTimeout: hc.idle, MaxConns: hc.conns,
		Credentials: hc.creds, CA: hc.ca, UpstreamRoots: hc.roots,
	})
	if err != nil {
		t.Fatal(err)
	}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.httpAddr, h.socksAddr, h.tunnelAddr = hl.Addr().String(), sl.Addr().String(), tl.Addr().String()
	h.via, h.pending = hc.via, map[uint16]*egress.Tunnel{}
	if h.via == "" {
		h.via = viaConnect
	}
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); serveErr(t, h.p.ServeHTTPProxy(hl)) }()
	go func() { defer wg.Done(); serveErr(t, h.p.ServeSOCKS5(sl)) }()
	go func() { defer wg.Done(); serveErr(t, h.p.ServeTunnels(tl, h.claim)) }()
	t.Cleanup(func() {
		h.p.Close()
		wg.Wait()
	})
	return h
}

// claim hands ServeTunnels the Tunnel registered for the source port.
func (h *harness) claim(remote netip.AddrPort) *egress.Tunnel {
	h.mu.Lock()
	defer h.mu.Unlock()
	tn := h.pending[remote.Port()]
	delete(h.pending, remote.Port())
	return tn
}

// open reaches authority through the proxy as h.via says and returns the
// connection and a status: CONNECT's, or for the transparent path 200
// when the Tunnel opened, 403 for a denial and 502 for anything else (the
// errno the sandbox's connect would have got).
func (h *harness) open(t testing.TB, authority string) (net.Conn, int) {
	t.Helper()
	if h.via == viaConnect {
		return openTunnel(t, h.httpAddr, authority)
	}
	host, ps, err := net.SplitHostPort(authority)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.ParseUint(ps, 10, 16)
	if err != nil {
		t.Fatal(err)
	}
	tn, err := h.p.OpenTunnel(context.Background(), host, uint16(port))
	var de *policy.DenyError
	switch {
	case errors.As(err, &de):
		return nil, http.StatusForbidden
	case err != nil:
		return nil, http.StatusBadGateway
	}
	// The source port is bound and registered before the connect, so the
	// listener can never accept the connection before its Tunnel is known:
	// what the connect broker does.
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var berr error
		cerr := rc.Control(func(fd uintptr) {
			if berr = syscall.Bind(int(fd), &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); berr != nil {
				return
			}
			sa, err := syscall.Getsockname(int(fd))
			if berr = err; err != nil {
				return
			}
			h.mu.Lock()
			h.pending[uint16(sa.(*syscall.SockaddrInet4).Port)] = tn
			h.mu.Unlock()
		})
		return errors.Join(cerr, berr)
	}}
	c, err := d.Dial("tcp", h.tunnelAddr)
	if err != nil {
		tn.Close()
		t.Fatalf("connect to the transparent listener: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c, http.StatusOK
}

func serveErr(t testing.TB, err error) {
	if err != nil {
		t.Errorf("serve returned %v after Close, want nil", err)
	}
}

// client returns an HTTP client that uses the proxy for every URL and
// trusts roots (nil: the system roots) for https.
func (h *harness) client(roots *x509.CertPool) *http.Client {
	pu := &url.URL{Scheme: "http", Host: h.httpAddr}
	return &http.Client{Transport: &http.Transport{
		Proxy:           http.ProxyURL(pu),
		TLSClientConfig: &tls.Config{RootCAs: roots},
	}}
}

// rawRequest sends req bytes on a fresh connection to the proxy and reads
// one response.
func (h *harness) rawRequest(t testing.TB, req string) (int, string) {
	t.Helper()
	c, err := net.Dial("tcp", h.httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("read response to %q: %v", req, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body) // the status is what matters when the body is cut
	return resp.StatusCode, string(b)
}

// denialFor returns the audit denials whose target is target.
func (h *harness) denialFor(target string) []audit.Event {
	var out []audit.Event
	for _, e := range h.rec.Denials() {
		if e.Target == target {
			out = append(out, e)
		}
	}
	return out
}
