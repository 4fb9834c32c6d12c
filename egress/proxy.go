package egress

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
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

// Default timeouts used when the Config leaves them zero.
const (
	DefaultIdleTimeout      = 2 * time.Minute
	DefaultHandshakeTimeout = 10 * time.Second
)

// Config configures a Proxy. Policy and Meter are required; every other
// zero field takes the documented default.
type Config struct {
	// Policy decides which hosts and ports may be reached (net_hosts).
	// Required.
	Policy *policy.Policy

	// Meter is charged one op per forwarded HTTP request, CONNECT tunnel
	// and SOCKS connect, before anything is resolved or dialed. When it is
	// exhausted the request is refused. Required.
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
	// HTTP requests and how long a tunnel may carry no data in either
	// direction. Zero means DefaultIdleTimeout.
	IdleTimeout time.Duration

	// HandshakeTimeout bounds reading a request head, a SOCKS5 handshake or
	// a TLS ClientHello, and resolving a name. Zero means
	// DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
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

	ctx    context.Context // cancelled by Close; parent of every decision and dial
	cancel context.CancelFunc
	wg     sync.WaitGroup // one per connection handler

	mu        sync.Mutex
	closed    bool                      // guarded by mu
	listeners map[net.Listener]struct{} // guarded by mu
	conns     map[net.Conn]struct{}     // guarded by mu; client and upstream conns
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
	p := &Proxy{
		policy:    cfg.Policy,
		meter:     cfg.Meter,
		audit:     cfg.Audit,
		resolver:  cfg.Resolver,
		dialer:    cfg.Dialer,
		log:       cfg.Logger,
		skipSNI:   cfg.SkipSNICheck,
		idle:      cfg.IdleTimeout,
		handshake: cfg.HandshakeTimeout,
		listeners: make(map[net.Listener]struct{}),
		conns:     make(map[net.Conn]struct{}),
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
	p.mu.Unlock()
	// Closed outside mu: an upstream conn's Close takes mu to untrack itself.
	for _, c := range ls {
		c.Close() // the error of tearing down says nothing useful
	}
	p.wg.Wait()
	return nil
}

// serve accepts connections on l and runs handle for each until l fails or
// the proxy is closed. It returns nil when Close stopped it.
func (p *Proxy) serve(l net.Listener, handle func(net.Conn)) error {
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
		if !p.track(c) {
			return nil
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer p.untrack(c)
			defer c.Close()
			handle(c)
		}()
	}
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
		return tc, nil
	}
	err := errors.Join(errs...)
	p.log.Info("egress: dial", "target", d.target, "err", err)
	return nil, err
}

var errProxyClosed = errors.New("egress: proxy is closed")
