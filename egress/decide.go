package egress

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
	"github.com/airlock-sandbox/airlock/policy/hostspec"
)

// Ops recorded in audit events and denials.
const (
	opConnect = "connect" // CONNECT tunnels, SOCKS5 and Decide
	opHTTP    = "http"    // forwarded absolute-URI requests
	opAccept  = "accept"  // a client connection to the proxy
)

// decision is an allowed destination: the names it was checked under and
// the only addresses the proxy may dial for it.
type decision struct {
	host   string           // normalized host name or canonical IP text
	port   uint16           // granted port
	target string           // host:port, as in audit events
	isIP   bool             // host is an IP literal listed in net_hosts
	addrs  []netip.AddrPort // checked addresses, resolver order, never empty
	start  time.Time        // when the decision began: dial's latency counts from it
}

// resolveError reports that a granted name could not be resolved. It is
// not a policy denial, so front ends answer "bad gateway", not "forbidden".
type resolveError struct {
	host string
	err  error
}

func (e *resolveError) Error() string {
	if e.err == nil {
		return "egress: resolve " + e.host + ": no addresses"
	}
	return "egress: resolve " + e.host + ": " + e.err.Error()
}

func (e *resolveError) Unwrap() error { return e.err }

// Decide is the proxy's single admission decision, used by every front
// end; it is exported for tests and benchmarks. It charges the budget one
// op, normalizes host, checks host:port against net_hosts, resolves a name
// once with the configured Resolver and refuses the host if any resolved
// address is special (hostspec.IsSpecial) and not listed exactly. It returns
// the first checked address: the only kind of address the proxy dials.
//
// Denials are *policy.DenyError (Cap net_hosts) and a blown budget is a
// *budget.ExhaustedError; both are audited. The op is charged before
// anything is decided, so a denial costs the same op as a grant: a flood of
// denied requests ends at max_ops. Nothing touches the network before the
// op is charged and the name and port are granted.
func (p *Proxy) Decide(ctx context.Context, host string, port uint16) (netip.AddrPort, error) {
	d, err := p.decide(ctx, opConnect, host, port)
	if r, ok := err.(*refused); ok {
		return netip.AddrPort{}, r.deny
	}
	if err != nil {
		return netip.AddrPort{}, err
	}
	return d.addrs[0], nil
}

func (p *Proxy) decide(ctx context.Context, op, host string, port uint16) (*decision, error) {
	if err := p.charge(op, hostspec.Join(host, port)); err != nil {
		return nil, err
	}
	return p.decideCharged(ctx, op, host, port)
}

// charge spends the op of one decision before it is made, and audits a
// refusal.
func (p *Proxy) charge(op, target string) error {
	if err := p.meter.ChargeOp(); err != nil {
		p.denyBudget(op, target, err)
		return err
	}
	return nil
}

// decideCharged is decide once its op has been charged.
func (p *Proxy) decideCharged(ctx context.Context, op, host string, port uint16) (*decision, error) {
	start := time.Now()
	if port == 0 {
		return nil, p.deny(op, host+":0", "port 0 cannot be reached", policy.Suggestion{})
	}
	n, err := hostspec.NormalizeHost(host)
	if err != nil {
		// Non-canonical IPv4 (0x7f.1, 2130706433), bad IDNA, empty labels.
		return nil, p.deny(op, hostspec.Join(host, port), err.Error(), policy.Suggestion{})
	}
	target := hostspec.Join(n, port)
	if err := p.policy.CheckHost(n, port); err != nil {
		var de *policy.DenyError
		if !errors.As(err, &de) {
			return nil, fmt.Errorf("airlock bug: CheckHost returned %T: %w", err, err)
		}
		return nil, p.deny(op, target, de.Reason, p.policy.Suggest(de))
	}
	d := &decision{host: n, port: port, target: target, start: start}
	if n == hostspec.HostLoopback {
		// The host's own loopback, by its explicit name: never by a
		// wildcard, never by accident.
		if !slices.ContainsFunc(p.policy.NetHosts(), func(h hostspec.Pattern) bool { return h.IsExact(n) && h.Match(n, port) }) {
			return nil, p.deny(op, target, n+" reaches the host's loopback and is granted only by an exact net_hosts entry for it, never by a wildcard", p.policy.SuggestHost(target))
		}
		d.addrs = []netip.AddrPort{netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), port)}
		p.allow(op, target, "the host's loopback, 127.0.0.1")
		return d, nil
	}
	if a, err := netip.ParseAddr(n); err == nil {
		// CheckHost admits an IP literal only when it is listed exactly.
		d.isIP = true
		d.addrs = []netip.AddrPort{netip.AddrPortFrom(a, port)}
		p.allow(op, target, "listed address "+a.String())
		return d, nil
	}

	rctx, cancel := context.WithTimeout(ctx, p.handshake)
	addrs, err := p.resolver.LookupNetIP(rctx, "ip", n)
	cancel()
	if err != nil || len(addrs) == 0 {
		re := &resolveError{host: n, err: err}
		p.emit(audit.Event{Kind: audit.Info, Op: audit.OpResolveFailed, Target: target, Message: re.Error()})
		return nil, re
	}
	for _, a := range addrs {
		if !a.IsValid() || a.Zone() != "" {
			return nil, p.deny(op, target, fmt.Sprintf("%s resolves to an unusable address %q", n, a), policy.Suggestion{})
		}
		// One special address refuses the whole name: which address a later
		// dial would pick must not decide what is reachable.
		if hostspec.IsSpecial(a) && !p.policy.AllowsAddr(a, port) {
			listed := hostspec.Join(a.String(), port)
			return nil, p.deny(op, target,
				fmt.Sprintf("%s resolves to %s, a loopback, private, link-local or other special address, reachable only when listed exactly in net_hosts", n, a),
				p.policy.SuggestHost(listed))
		}
		ap := netip.AddrPortFrom(a, port)
		if !slices.Contains(d.addrs, ap) {
			d.addrs = append(d.addrs, ap)
		}
	}
	p.allow(op, target, "resolved to "+addrList(d.addrs))
	return d, nil
}

// refused is a net_hosts denial together with the advice the client
// hears: the audited suggestion when Config.AgentAdvice is set, else none.
type refused struct {
	deny       *policy.DenyError
	suggestion string
}

func (r *refused) Error() string { return r.deny.Error() }
func (r *refused) Unwrap() error { return r.deny }

// deny audits a net_hosts denial, with fix as the operator's suggestion,
// and returns it.
func (p *Proxy) deny(op, target, reason string, fix policy.Suggestion) *refused {
	return p.denyHint(op, target, reason, fix, "")
}

// denyHint is deny with a hint: what the client can do instead within its
// grants, which it may always hear.
func (p *Proxy) denyHint(op, target, reason string, fix policy.Suggestion, hint string) *refused {
	p.emit(audit.Event{Kind: audit.Deny, Op: op, Target: target, Rule: policy.NetHosts.String(),
		Message: reason, Suggestion: fix.String(), Hint: hint})
	r := &refused{deny: &policy.DenyError{Cap: policy.NetHosts, Op: op, Subject: target, Reason: reason, Hint: hint, Fix: fix}}
	if p.advice {
		r.suggestion = fix.String()
	}
	return r
}

func (p *Proxy) denyBudget(op, target string, err error) {
	rule := string(budget.MaxOps)
	var ee *budget.ExhaustedError
	if errors.As(err, &ee) {
		rule = string(ee.Limit)
	}
	p.emit(audit.Event{Kind: audit.Deny, Op: op, Target: target, Rule: rule, Message: err.Error(),
		Suggestion: p.policy.SuggestBudget(budget.Limit(rule)).String()})
}

func (p *Proxy) allow(op, target, msg string) {
	p.emit(audit.Event{Kind: audit.Allow, Op: op, Target: target, Rule: policy.NetHosts.String(), Message: msg})
}

func (p *Proxy) emit(e audit.Event) {
	e.Time = time.Now()
	e.Layer = audit.LayerNet
	p.audit.Emit(e)
}

// refusal renders a decide or dial error as the one-line explanation sent
// to the sandboxed client: which target and why, and with
// Config.AgentAdvice which grant would allow it.
func refusal(err error) string {
	var r *refused
	if errors.As(err, &r) {
		s := "airlock: " + r.deny.Subject + " denied: " + r.deny.Reason
		if r.deny.Hint != "" {
			s += "; " + r.deny.Hint
		}
		if r.suggestion != "" {
			s += "; " + r.suggestion + " to allow it"
		}
		return s
	}
	if errors.Is(err, budget.ErrExhausted) {
		return "airlock: " + err.Error()
	}
	var re *resolveError
	if errors.As(err, &re) {
		return "airlock: " + re.host + " could not be resolved"
	}
	return "airlock: upstream connection failed"
}

func addrList(aps []netip.AddrPort) string {
	s := make([]string, len(aps))
	for i, ap := range aps {
		s[i] = ap.Addr().String()
	}
	return strings.Join(s, ", ")
}
