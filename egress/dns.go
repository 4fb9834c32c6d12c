package egress

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/hostspec"
)

// SyntheticPrefix is where the sandbox's DNS answers come from: 198.18.0.0/15,
// reserved for benchmarking (RFC 2544) and routed nowhere. An address in it
// stands for one granted name for the whole run (Names); the sandbox's
// network namespace has no route to it, so only airlock's connect broker,
// which maps it back to the name, can make a connection to it.
var SyntheticPrefix = netip.MustParsePrefix("198.18.0.0/15")

// opResolve is the op of DNS answers in audit events.
const opResolve = "resolve"

// DefaultMaxNames bounds the names one run can have addresses for.
const DefaultMaxNames = 4096

// Names maps the granted names a sandbox asked its DNS for to addresses in
// SyntheticPrefix, one each, for the lifetime of the run. The name is what
// is decided when the sandbox connects to the address, so resolving it on
// the host happens once per connection, in the proxy, as for a CONNECT:
// nothing about the real addresses reaches the sandbox, and no DNS query
// from it ever leaves the machine. It is safe for concurrent use.
type Names struct {
	mu     sync.Mutex
	byName map[string]netip.Addr // guarded by mu
	byAddr map[netip.Addr]string // guarded by mu
	next   netip.Addr            // guarded by mu: the next free address
	max    int
}

// NewNames returns an empty map that holds at most max names (0 means
// DefaultMaxNames). Addresses start at 198.18.0.1.
func NewNames(max int) *Names {
	if max <= 0 {
		max = DefaultMaxNames
	}
	if limit := 1<<(32-SyntheticPrefix.Bits()) - 2; max > limit {
		max = limit
	}
	return &Names{byName: map[string]netip.Addr{}, byAddr: map[netip.Addr]string{}, next: SyntheticPrefix.Addr().Next(), max: max}
}

// Lookup returns the name the address a stands for, unmapping an
// IPv4-mapped form.
func (n *Names) Lookup(a netip.Addr) (string, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	name, ok := n.byAddr[a.Unmap()]
	return name, ok
}

// assign returns name's address, giving it the next free one when it has
// none; false when the map is full.
func (n *Names) assign(name string) (netip.Addr, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if a, ok := n.byName[name]; ok {
		return a, true
	}
	if len(n.byName) >= n.max {
		return netip.Addr{}, false
	}
	a := n.next
	n.next = a.Next()
	n.byName[name], n.byAddr[a] = a, name
	return a, true
}

// answerTTL is the TTL of every answer, in seconds: a name keeps its
// address for the whole run.
const answerTTL = 300

// maxDNSPacket is the largest query read; more is truncated and refused.
const maxDNSPacket = 1500

// ServeDNS answers the sandbox's DNS queries on pc (UDP on the sandbox's
// loopback) from names, never from upstream: a name net_hosts grants (on
// any port) gets its address in SyntheticPrefix for A queries and an empty
// answer for every other type (the sandbox then connects over IPv4); any
// other name gets NXDOMAIN and a denial in the audit. Each query is charged
// one op before it is answered, like every proxy decision, so a flood of
// queries ends at max_ops. Malformed packets are answered FORMERR when
// their header can be read, else dropped. It returns nil once Close stops
// it, or the connection's error.
func (p *Proxy) ServeDNS(pc net.PacketConn, names *Names) error {
	if !p.trackPacketConn(pc) {
		return nil
	}
	defer p.untrackPacketConn(pc)
	buf := make([]byte, maxDNSPacket+1)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			if p.isClosed() || errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("egress: dns: %w", err)
		}
		if resp := p.answerDNS(buf[:n], names); resp != nil {
			pc.WriteTo(resp, from) // a client that went away needs nothing
		}
	}
}

func (p *Proxy) trackPacketConn(pc net.PacketConn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		pc.Close()
		return false
	}
	p.packetConns[pc] = struct{}{}
	return true
}

func (p *Proxy) untrackPacketConn(pc net.PacketConn) {
	p.mu.Lock()
	delete(p.packetConns, pc)
	p.mu.Unlock()
}

// answerDNS builds the response to one query, or nil to drop it.
func (p *Proxy) answerDNS(q []byte, names *Names) []byte {
	var parser dnsmessage.Parser
	h, err := parser.Start(q)
	if err != nil || h.Response {
		return nil // not even a header, or not a query: nothing to answer
	}
	resp := dnsmessage.Header{ID: h.ID, Response: true, OpCode: h.OpCode, RecursionDesired: h.RecursionDesired, RecursionAvailable: true}
	if len(q) > maxDNSPacket {
		return buildDNS(resp, dnsmessage.RCodeFormatError, nil, nil)
	}
	if h.OpCode != 0 {
		return buildDNS(resp, dnsmessage.RCodeNotImplemented, nil, nil)
	}
	qs, err := parser.AllQuestions()
	if err != nil || len(qs) != 1 {
		return buildDNS(resp, dnsmessage.RCodeFormatError, nil, nil)
	}
	qn := qs[0]
	raw := strings.TrimSuffix(qn.Name.String(), ".")
	if err := p.charge(opResolve, raw); err != nil {
		return buildDNS(resp, dnsmessage.RCodeRefused, &qn, nil)
	}
	if qn.Class != dnsmessage.ClassINET {
		return buildDNS(resp, dnsmessage.RCodeRefused, &qn, nil)
	}
	name, err := hostspec.NormalizeHost(raw)
	if err == nil {
		if _, perr := netip.ParseAddr(name); perr == nil {
			err = errors.New("an address is not a name")
		}
	}
	if err != nil || !p.grantsName(name) {
		why := "no net_hosts entry grants this name on any port"
		if err != nil {
			why = err.Error()
		}
		p.emit(audit.Event{Kind: audit.Deny, Op: opResolve, Target: raw, Rule: policy.NetHosts.String(),
			Message:    "DNS: " + why + "; answered NXDOMAIN, nothing was sent anywhere",
			Suggestion: p.policy.SuggestHost(hostspec.Join(raw, 443)).String()})
		resp.Authoritative = true
		return buildDNS(resp, dnsmessage.RCodeNameError, &qn, nil)
	}
	resp.Authoritative = true
	if qn.Type != dnsmessage.TypeA {
		return buildDNS(resp, dnsmessage.RCodeSuccess, &qn, nil) // no records of this type
	}
	a, ok := names.assign(name)
	if !ok {
		p.emit(audit.Event{Kind: audit.Deny, Op: opResolve, Target: name, Rule: policy.NetHosts.String(),
			Message: fmt.Sprintf("DNS: the run already has addresses for %d names, the most it may have; answered SERVFAIL", names.max)})
		return buildDNS(resp, dnsmessage.RCodeServerFailure, &qn, nil)
	}
	p.emit(audit.Event{Kind: audit.Allow, Op: opResolve, Target: name, Rule: policy.NetHosts.String(),
		Message: "DNS: answered " + a.String() + ", which airlock connects to " + name + " when the port is granted"})
	return buildDNS(resp, dnsmessage.RCodeSuccess, &qn, &a)
}

// grantsName reports whether a name pattern of net_hosts grants name on
// some port.
func (p *Proxy) grantsName(name string) bool {
	for _, h := range p.policy.NetHosts() {
		if h.MatchName(name) {
			return true
		}
	}
	return false
}

// buildDNS packs a response with header h, rcode, the question q (when
// set) and one A record for a (when set).
func buildDNS(h dnsmessage.Header, rcode dnsmessage.RCode, q *dnsmessage.Question, a *netip.Addr) []byte {
	h.RCode = rcode
	b := dnsmessage.NewBuilder(make([]byte, 0, 512), h)
	b.EnableCompression()
	if q != nil {
		if b.StartQuestions() != nil || b.Question(*q) != nil {
			return nil
		}
	}
	if a != nil {
		if b.StartAnswers() != nil ||
			b.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: answerTTL}, dnsmessage.AResource{A: a.As4()}) != nil {
			return nil
		}
	}
	out, err := b.Finish()
	if err != nil {
		return nil
	}
	return out
}
