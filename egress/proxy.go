package egress

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
)

// Resolver looks up the addresses of a host name. *net.Resolver satisfies it.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Dialer opens outbound connections. *net.Dialer satisfies it. The proxy
// only ever passes it an IP address and port that Decide checked.
type Dialer interface {
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
}

// Defaults used when the Config leaves a field zero.
const (
	DefaultIdleTimeout      = 2 * time.Minute
	DefaultHandshakeTimeout = 10 * time.Second
	// DefaultMaxConns is what a sandbox of the default max_pids (64) gets:
	// 4 connections per task (see sandbox.Config.MaxProxyConns).
	DefaultMaxConns = 256
)

// RuleMaxConns is the rule of the denial for a connection closed because
// MaxConns were open.
const RuleMaxConns = "max_proxy_conns"

// Config configures a Proxy. Policy and Meter are required; every other
// zero field takes the documented default.
type Config struct {
	// Policy decides which hosts and ports may be reached (net_hosts).
	// Required.
	Policy *policy.Policy

	// Meter is charged one op per accepted client connection and one per
	// decision (an HTTP request, a CONNECT, a SOCKS connect), granted or
	// denied, before the decision is made: a program that provokes
	// denials or holds connections spends its budget like one that makes
	// requests. When it is exhausted the connection or request is refused
	// and the meter's Done is closed; the supervisor ends the run. Required.
	Meter *budget.Meter

	// Audit receives one event per decision. Nil means audit.Discard.
	Audit audit.Sink

	// Resolver resolves granted names, once per decision. Nil means
	// net.DefaultResolver.
	Resolver Resolver

	// Dialer dials the checked addresses. Nil means a *net.Dialer with a
	// 10 second timeout.
	Dialer Dialer

	// Logger receives operational messages (accept errors, failed dials).
	// Decisions go to Audit, not here. Nil discards them.
	Logger *slog.Logger

	// SkipSNICheck turns off the check that a CONNECT tunnel opens with a
	// TLS ClientHello whose SNI names the CONNECT host. The zero value
	// (false) enforces the check, so CONNECT carries only TLS to the
	// granted name; set it only to tunnel non-TLS protocols over CONNECT.
	SkipSNICheck bool

	// IdleTimeout bounds how long a client connection may wait between
	// HTTP requests, how long a tunnel may carry no data in either
	// direction, and how long an upstream connection is kept open for the
	// next request (at most MaxIdleUpstreams of them). Zero means
	// DefaultIdleTimeout.
	IdleTimeout time.Duration

	// HandshakeTimeout is the one deadline, counted from accept, for a
	// client to send a complete request head, SOCKS5 handshake or (after
	// CONNECT) TLS ClientHello; bytes that trickle in do not extend it.
	// The next request head on a keep-alive connection gets it again from
	// its first byte. It also bounds resolving a name. Zero means
	// DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration

	// MaxConns bounds the client connections served at once, over every
	// listener of the proxy. A connection accepted beyond it is closed at
	// once, counted (Stats) and audited as a denial with rule
	// RuleMaxConns. Each served connection costs the supervisor an fd
	// (two while it tunnels) and a few KiB until its head is complete.
	// Zero means DefaultMaxConns.
	MaxConns int

	// Credentials are the headers the proxy sets on requests to their
	// hosts (the policy's credentials, values read on the host). Each must
	// be in the policy. HTTPS to such a host is terminated with CA.
	Credentials []Credential

	// CA signs the certificates the proxy presents for the hosts of
	// Credentials; required with HTTPS credentials. Nil terminates
	// nothing: such a tunnel is refused.
	CA *CA

	// UpstreamRoots verifies the upstream's certificate where the proxy
	// terminates TLS. Nil means the host's system roots.
	UpstreamRoots *x509.CertPool

	// AgentAdvice lets the refusals the proxy sends the sandboxed client
	// name the net_hosts entry that would allow the request. The advice
	// widens the policy, so it is for the operator (the audit event always
	// carries it); false, the default, keeps it from the program, which
	// may be an agent steered by an injected instruction.
	AgentAdvice bool
}

// Stats counts the client connections a proxy accepted.
type Stats struct {
	Served     int64 // admitted and handed to a front end
	OverCap    int64 // closed at once because MaxConns were open
	OverBudget int64 // closed at once because the meter refused the op
	Open       int   // being served now
}

// Proxy serves the sandbox's egress listeners. Create it with New; it is
// safe for concurrent use. The zero Proxy is not usable.
type Proxy struct {
	policy    *policy.Policy
	meter     *budget.Meter
	audit     audit.Sink
	resolver  Resolver
	dialer    Dialer
	log       *slog.Logger
	skipSNI   bool
	idle      time.Duration
	handshake time.Duration
	maxConns  int
	advice    bool                    // refusals to the client carry the audit suggestion
	creds     map[string][]Credential // by host
	scrubs    map[string]*scrubber    // by host: its credentials' forms, read only
	ca        *CA
	roots     *x509.CertPool

	served, overCap, overBudget atomic.Int64

	idlePool idlePool // upstream connections kept between requests

	ctx    context.Context // cancelled by Close; parent of every decision and dial
	cancel context.CancelFunc
	wg     sync.WaitGroup // one per connection handler

	mu          sync.Mutex
	closed      bool                        // guarded by mu
	listeners   map[net.Listener]struct{}   // guarded by mu
	conns       map[net.Conn]struct{}       // guarded by mu; client and upstream conns
	packetConns map[net.PacketConn]struct{} // guarded by mu; ServeDNS sockets
	clients     int                         // guarded by mu; client conns in conns
}

// New checks cfg and returns a Proxy that serves nothing until
// ServeHTTPProxy or ServeSOCKS5 is called.
func New(cfg Config) (*Proxy, error) {
	if cfg.Policy == nil {
		return nil, errors.New("egress: config has no policy; a proxy without one would decide nothing")
	}
	if cfg.Meter == nil {
		return nil, errors.New("egress: config has no budget meter; every egress op must be counted")
	}
	if err := checkCredentials(cfg.Policy, cfg.Credentials); err != nil {
		return nil, err
	}
	p := &Proxy{
		policy:      cfg.Policy,
		meter:       cfg.Meter,
		audit:       cfg.Audit,
		resolver:    cfg.Resolver,
		dialer:      cfg.Dialer,
		log:         cfg.Logger,
		skipSNI:     cfg.SkipSNICheck,
		idle:        cfg.IdleTimeout,
		handshake:   cfg.HandshakeTimeout,
		maxConns:    cfg.MaxConns,
		advice:      cfg.AgentAdvice,
		ca:          cfg.CA,
		roots:       cfg.UpstreamRoots,
		creds:       map[string][]Credential{},
		scrubs:      map[string]*scrubber{},
		listeners:   make(map[net.Listener]struct{}),
		conns:       make(map[net.Conn]struct{}),
		packetConns: make(map[net.PacketConn]struct{}),
	}
	for _, c := range cfg.Credentials {
		p.creds[c.Host] = append(p.creds[c.Host], c)
	}
	for host, cs := range p.creds {
		p.scrubs[host] = newScrubber(cs)
	}
	if p.audit == nil {
		p.audit = audit.Discard
	}
	if p.resolver == nil {
		p.resolver = net.DefaultResolver
	}
	if p.dialer == nil {
		p.dialer = &net.Dialer{Timeout: 10 * time.Second}
	}
	if p.log == nil {
		p.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if p.idle <= 0 {
		p.idle = DefaultIdleTimeout
	}
	if p.handshake <= 0 {
		p.handshake = DefaultHandshakeTimeout
	}
	if p.maxConns <= 0 {
		p.maxConns = DefaultMaxConns
	}
	p.idlePool = idlePool{max: MaxIdleUpstreams, idle: p.idle}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	return p, nil
}

// Close stops every listener being served, closes every client connection
// and tunnel, and waits for their handlers to return. It is idempotent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.wg.Wait()
		return nil
	}
	p.closed = true
	p.cancel()
	ls := make([]io.Closer, 0, len(p.listeners)+len(p.conns))
	for l := range p.listeners {
		ls = append(ls, l)
	}
	for c := range p.conns {
		ls = append(ls, c)
	}
	for pc := range p.packetConns {
		ls = append(ls, pc)
	}
	p.mu.Unlock()
	// Closed outside mu: an upstream conn's Close takes mu to untrack itself.
	p.idlePool.closeAll()
	for _, c := range ls {
		c.Close() // the error of tearing down says nothing useful
	}
	p.wg.Wait()
	return nil
}

// Stats returns the proxy's connection counts so far.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	open := p.clients
	p.mu.Unlock()
	return Stats{Served: p.served.Load(), OverCap: p.overCap.Load(), OverBudget: p.overBudget.Load(), Open: open}
}

// serve accepts connections on l and runs handle for each admitted one,
// with the time it was accepted, until l fails or the proxy is closed. It
// returns nil when Close stopped it.
func (p *Proxy) serve(l net.Listener, handle func(c net.Conn, accepted time.Time)) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		l.Close()
		return nil
	}
	p.listeners[l] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.listeners, l)
		p.mu.Unlock()
	}()
	where := l.Addr().String()

	var backoff time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			if p.isClosed() {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			// Out of fds and similar: back off instead of spinning, like net/http.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			p.log.Warn("egress: accept", "err", err, "retry_in", backoff)
			select {
			case <-time.After(backoff):
				continue
			case <-p.ctx.Done():
				return nil
			}
		}
		backoff = 0
		accepted := time.Now()
		ok, closed := p.admit(c, where)
		if closed {
			return nil
		}
		if !ok {
			continue
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer p.release(c)
			defer c.Close()
			handle(c, accepted)
		}()
	}
}

// admit charges the op of an accepted client connection and registers it,
// or closes it at once: when the meter refuses the op, or when MaxConns
// client connections are open. The op is charged first, so that a client
// that reconnects in a loop against a full proxy still spends its budget
// and is ended by it. closed reports that the proxy is closed.
func (p *Proxy) admit(c net.Conn, where string) (ok, closed bool) {
	if err := p.meter.ChargeOp(); err != nil {
		c.Close()
		p.overBudget.Add(1)
		p.denyBudget(opAccept, where, err)
		return false, p.isClosed()
	}
	p.mu.Lock()
	switch {
	case p.closed:
		p.mu.Unlock()
		c.Close()
		return false, true
	case p.clients >= p.maxConns:
		p.mu.Unlock()
		c.Close()
		p.overCap.Add(1)
		p.emit(audit.Event{Kind: audit.Deny, Op: opAccept, Target: where, Rule: RuleMaxConns,
			Message: fmt.Sprintf("the sandbox already holds %d connections to the proxy, the most it may hold at once; this one was closed", p.maxConns),
			Hint:    "close proxy connections the program no longer uses, or open fewer at once"})
		return false, false
	}
	p.clients++
	p.conns[c] = struct{}{}
	room := p.maxConns - p.clients
	p.mu.Unlock()
	p.idlePool.shrink(room) // kept upstream connections give way to clients
	p.served.Add(1)
	return true, false
}

// release forgets a client connection admitted by admit.
func (p *Proxy) release(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.clients--
	p.mu.Unlock()
}

func (p *Proxy) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// track registers c so that Close ends it. It closes c and reports false
// when the proxy is already closed.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	closed := p.closed
	if !closed {
		p.conns[c] = struct{}{}
	}
	p.mu.Unlock()
	if closed {
		c.Close()
	}
	return !closed
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// trackedConn is an upstream connection that leaves the proxy's set when
// closed.
type trackedConn struct {
	net.Conn
	p    *Proxy
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() { c.p.untrack(c) })
	return c.Conn.Close()
}

// CloseWrite half-closes the connection when the underlying one supports it.
func (c *trackedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// dial connects to the checked addresses of d in order and returns the
// first connection that opens. It never dials a name.
func (p *Proxy) dial(ctx context.Context, d *decision) (net.Conn, error) {
	var errs []error
	for _, ap := range d.addrs {
		c, err := p.dialer.DialContext(ctx, "tcp", ap.String())
		if err != nil {
			errs = append(errs, err)
			if ctx.Err() != nil {
				break
			}
			continue
		}
		tc := &trackedConn{Conn: c, p: p}
		if !p.track(tc) {
			return nil, errProxyClosed
		}
		p.emitDial(d, audit.OpDial, "connected to "+ap.String())
		return tc, nil
	}
	err := errors.Join(errs...)
	p.log.Info("egress: dial", "target", d.target, "err", err)
	p.emitDial(d, audit.OpDialFailed, err.Error())
	return nil, &dialError{err}
}

// dialError is a failed dial of every checked address, already audited
// as an OpDialFailed event.
type dialError struct{ err error }

func (e *dialError) Error() string { return e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// emitDial audits how long the proxy took from its decision (resolution
// included) to an open upstream connection, or to giving up: the latency
// it adds before the first byte, which `airlock serve --metrics-listen`
// exports.
func (p *Proxy) emitDial(d *decision, op, msg string) {
	e := audit.Event{Kind: audit.Info, Op: op, Target: d.target, Message: msg}
	if !d.start.IsZero() {
		e.DurationMS = float64(time.Since(d.start).Microseconds()) / 1000
	}
	p.emit(e)
}

var errProxyClosed = errors.New("egress: proxy is closed")
