package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/internal/enforce/connbroker"
	"github.com/airlock-sandbox/airlock/plan"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
)

// EgressTransparent is the report's enforcement.egress when the namespace
// backend brokers connects and answers DNS, EgressProxy when programs
// reach out only through the proxy variables.
const (
	EgressTransparent = "proxy+transparent"
	EgressProxy       = "proxy"
)

// Bounds of the transparent path's bookkeeping: tunnels opened for a
// connect whose connection has not reached the tunnel listener yet, and
// how long one may wait before it is given up (its connect failed after
// the tunnel opened, which the broker does not report back).
const (
	maxPendingTunnels = 256
	pendingTunnelTTL  = 30 * time.Second
	// openTunnelTimeout bounds deciding and dialing one connect; the
	// sandbox's thread waits in connect meanwhile.
	openTunnelTimeout = 20 * time.Second
)

// transparent is the supervisor's side of transparent egress in the
// namespace backend: the DNS that answers granted names with synthetic
// addresses, and the connect broker that turns a connect to one (or to a
// granted address) into the sandbox's own socket connected to the
// proxy's tunnel listener on the sandbox's loopback.
type transparent struct {
	b     *box
	p     *egress.Proxy
	names *egress.Names
	netns uint64 // SO_NETNS_COOKIE of the sandbox's network namespace

	mu      sync.Mutex
	pending map[netip.AddrPort]pendingTunnel // guarded by mu: by the source address of the connection that will claim it
}

type pendingTunnel struct {
	t     *egress.Tunnel
	since time.Time
}

// serveTransparent serves the tunnel listener and the DNS socket made
// inside the sandbox's network namespace.
func (b *box) serveTransparent(p *egress.Proxy, tunnelFD, dnsFD int) error {
	cookie, err := connbroker.NetNSCookie(tunnelFD)
	if err != nil || cookie == 0 {
		unix.Close(tunnelFD)
		unix.Close(dnsFD)
		return fmt.Errorf("transparent egress: read the sandbox's network namespace (SO_NETNS_COOKIE, Linux 5.14): %v", err)
	}
	tp := &transparent{b: b, p: p, names: egress.NewNames(0), netns: cookie, pending: map[netip.AddrPort]pendingTunnel{}}
	tf := os.NewFile(uintptr(tunnelFD), "tunnel listener")
	l, err := net.FileListener(tf)
	tf.Close()
	if err != nil {
		unix.Close(dnsFD)
		return fmt.Errorf("transparent egress: tunnel listener: %w", err)
	}
	df := os.NewFile(uintptr(dnsFD), "dns")
	pc, err := net.FilePacketConn(df)
	df.Close()
	if err != nil {
		l.Close()
		return fmt.Errorf("transparent egress: dns socket: %w", err)
	}
	go func() { _ = p.ServeTunnels(l, tp.claim) }() // return when the proxy closes
	go func() {
		if err := p.ServeDNS(pc, tp.names); err != nil {
			b.log.Error("egress: dns", "err", err)
		}
	}()
	b.transparent.Store(tp)
	return nil
}

// serveTransparentBroker answers the sandbox's connects on the seccomp
// listener fds[0] (the namespace backend with transparent egress).
func (b *box) serveTransparentBroker(ctl *control, fds []int) {
	tp := b.transparent.Load()
	if len(fds) != 1 || tp == nil {
		closeFDs(fds)
		b.log.Error("sandbox: transparent egress is not ready for the connect broker", "fds", len(fds), "proxy", tp != nil)
		b.kill() // fail closed: nobody would answer connect
		return
	}
	ctl.watch(func(stop <-chan struct{}) {
		h := connbroker.Handler{Quick: tp.quick, Decide: tp.decide}
		if err := h.Serve(fds[0], stop); err != nil {
			b.log.Error("sandbox: connect broker", "err", err)
			b.kill()
		}
	})
}

// claim hands the tunnel listener the Tunnel registered for a connection
// from remote (an address on the sandbox's loopback, as the broker bound
// it).
func (tp *transparent) claim(remote netip.AddrPort) *egress.Tunnel {
	if !remote.Addr().IsLoopback() {
		return nil
	}
	tp.mu.Lock()
	defer tp.mu.Unlock()
	pt, ok := tp.pending[remote]
	if !ok {
		return nil
	}
	delete(tp.pending, remote)
	return pt.t
}

// register records t for the connection that will come from local,
// dropping tunnels that waited too long, and refuses when too many wait.
// The zero local (the broker made no connection) closes t.
func (tp *transparent) register(local netip.AddrPort, t *egress.Tunnel) {
	if !local.IsValid() {
		t.Close()
		return
	}
	tp.mu.Lock()
	defer tp.mu.Unlock()
	now := time.Now()
	for from, pt := range tp.pending {
		if now.Sub(pt.since) > pendingTunnelTTL {
			pt.t.Close()
			delete(tp.pending, from)
		}
	}
	if old, ok := tp.pending[local]; ok {
		old.t.Close()
	}
	if len(tp.pending) >= maxPendingTunnels {
		t.Close() // the connection arrives unclaimed and is closed
		return
	}
	tp.pending[local] = pendingTunnel{t: t, since: now}
}

// decide answers one connect(2) of the sandbox. What the sandbox's network
// namespace can reach by itself (its loopback, unix sockets, any datagram
// socket, which reaches nothing else there) is the kernel's to connect; a
// TCP connect to a synthetic address (a granted name) or to any other
// address is decided by the proxy, and when granted the sandbox's own
// socket is connected to the tunnel listener, else it fails with the errno
// a real network would give.
func (tp *transparent) decide(r connbroker.Request) connbroker.Verdict {
	if r.NetNS != tp.netns {
		// Only the sandbox's own sockets exist inside; a socket from
		// anywhere else must never be connected by the supervisor or let
		// continue (its loopback would be another namespace's).
		tp.deny(r.Addr.String(), "the socket is not in the sandbox's network namespace", "")
		return connbroker.Verdict{Errno: unix.EACCES}
	}
	if local(r) {
		return connbroker.Verdict{Continue: true}
	}
	a := r.Addr.Addr()
	host := a.String()
	if egress.SyntheticPrefix.Contains(a) {
		name, ok := tp.names.Lookup(a)
		if !ok {
			tp.deny(r.Addr.String(), "an address airlock's DNS never handed out", "connect to a name in net_hosts, resolved inside the sandbox")
			return connbroker.Verdict{Errno: unix.ENETUNREACH}
		}
		host = name
	} else if a.Zone() != "" {
		tp.deny(r.Addr.String(), "a zoned IPv6 address (link-local) is never reachable", "")
		return connbroker.Verdict{Errno: unix.ENETUNREACH}
	}
	ctx, cancel := context.WithTimeout(context.Background(), openTunnelTimeout)
	defer cancel()
	t, err := tp.p.OpenTunnel(ctx, host, r.Addr.Port())
	if err != nil {
		return connbroker.Verdict{Errno: tunnelErrno(err)}
	}
	return connbroker.Verdict{
		Connect: netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), plan.TunnelPort),
		Bound:   func(local netip.AddrPort) { tp.register(local, t) },
	}
}

// quick answers at once, on the broker's receiving goroutine, the
// connects decide would let continue (a local server, the in-sandbox
// proxy, a resolver's UDP socket): the same checks, in the same order,
// and nothing that blocks or writes; it leaves everything else, denials
// and their audit events included, to decide.
func (tp *transparent) quick(r connbroker.Request) (connbroker.Verdict, bool) {
	if r.NetNS != tp.netns || !local(r) {
		return connbroker.Verdict{}, false
	}
	return connbroker.Verdict{Continue: true}, true
}

// local reports whether r is a connect the sandbox's network namespace
// carries out by itself, which reaches nothing outside it provided the
// socket is in that namespace (the caller checks r.NetNS first): any
// family but AF_INET and AF_INET6 (unix sockets), any socket but a stream
// one (a datagram goes nowhere but lo), and loopback or unspecified
// addresses (both mean lo).
func local(r connbroker.Request) bool {
	if r.Family != unix.AF_INET && r.Family != unix.AF_INET6 || r.Type != unix.SOCK_STREAM {
		return true
	}
	a := r.Addr.Addr()
	return a.IsLoopback() || a.IsUnspecified()
}

// tunnelErrno is the errno the sandbox's connect fails with when the
// proxy would not or could not open the tunnel.
func tunnelErrno(err error) syscall.Errno {
	var de *policy.DenyError
	var errno syscall.Errno
	switch {
	case errors.As(err, &de), errors.Is(err, budget.ErrExhausted):
		return unix.EACCES
	case errors.Is(err, egress.ErrUnresolved):
		return unix.EHOSTUNREACH
	case errors.As(err, &errno) && errno > 0 && errno < 512:
		return errno // the upstream's own answer: ECONNREFUSED, ETIMEDOUT, ...
	case errors.Is(err, context.DeadlineExceeded):
		return unix.ETIMEDOUT
	}
	return unix.ECONNREFUSED
}

// deny audits a connect the broker refused by itself (the proxy audits
// its own decisions).
func (tp *transparent) deny(target, reason, hint string) {
	tp.b.sink.Emit(audit.Event{Time: time.Now(), Kind: audit.Deny, Layer: audit.LayerNet, Op: "connect", Target: target,
		Rule: policy.NetHosts.String(), Message: "connect to " + target + " refused: " + reason, Hint: hint})
}
