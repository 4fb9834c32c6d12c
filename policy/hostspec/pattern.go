package hostspec

import (
	"net/netip"
	"strconv"
	"strings"
)

// kind says which form a Pattern has. The zero kind matches nothing.
type kind uint8

const (
	kindNone     kind = iota
	kindExact         // name
	kindWildcard      // "*." + name
	kindAddr          // prefix (a single address is a full-length prefix)
)

// Minimum CIDR lengths: anything broader is refused as over-broad, since an
// address grant also admits private and metadata addresses inside it.
const (
	minBits4 = 8
	minBits6 = 8
)

// Pattern is one parsed net_hosts entry. Patterns are comparable values:
// two patterns are == exactly when their String forms are equal. The zero
// Pattern matches nothing and its String is "".
type Pattern struct {
	kind   kind
	name   string       // kindExact: the host; kindWildcard: the suffix after "*."
	prefix netip.Prefix // kindAddr: masked, IPv4 never in mapped form
	lo, hi uint16       // port range; both 0 means the default ports 80 and 443
}

// Parse parses one net_hosts entry (see the package doc for the syntax) and
// returns it in canonical form. Every error matches ErrInvalid.
func Parse(s string) (Pattern, error) {
	if err := checkRaw("entry", s); err != nil {
		return Pattern{}, err
	}
	host, port, hasPort, bracketed, err := splitEntry(s)
	if err != nil {
		return Pattern{}, err
	}
	var p Pattern
	if hasPort {
		if strings.IndexByte(port, '/') >= 0 {
			return Pattern{}, invalidf("%q contains a path: write the host and port only", s)
		}
		if p.lo, p.hi, err = parsePorts(port); err != nil {
			return Pattern{}, err
		}
	}
	switch {
	case bracketed || strings.IndexByte(host, ':') >= 0:
		return p.withAddr(host, true)
	case strings.IndexByte(host, '/') >= 0:
		if !looksNumeric(host) {
			return Pattern{}, invalidf("%q contains a path: write the host only", host)
		}
		return p.withAddr(host, false)
	}
	if a, aerr := netip.ParseAddr(host); aerr == nil {
		p.kind, p.prefix = kindAddr, netip.PrefixFrom(a, a.BitLen())
		return p, nil
	}
	if strings.HasPrefix(host, "*.") {
		return p.withWildcard(host[2:])
	}
	if strings.IndexByte(host, '*') >= 0 {
		return Pattern{}, invalidf("%q: a wildcard must be a leading \"*.\" followed by a domain, as in *.example.com", host)
	}
	if p.name, err = normalizeName(host); err != nil {
		return Pattern{}, err
	}
	p.kind = kindExact
	return p, nil
}

// MustParse is like Parse but panics on error. Use it only in tests and
// package-level tables of constant entries.
func MustParse(s string) Pattern {
	p, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return p
}

// splitEntry separates the host part from the port text. A bracketed host
// is returned without its brackets. Bare IPv6 (two or more colons) never
// carries a port.
func splitEntry(s string) (host, port string, hasPort, bracketed bool, err error) {
	if s[0] == '[' {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", "", false, false, invalidf("%q: missing \"]\" after IPv6 address", s)
		}
		host, rest := s[1:end], s[end+1:]
		switch {
		case rest == "":
			return host, "", false, true, nil
		case rest[0] == ':':
			return host, rest[1:], true, true, nil
		}
		return "", "", false, false, invalidf("%q: unexpected %q after \"]\": only \":PORT\" may follow", s, rest)
	}
	if strings.IndexByte(s, ']') >= 0 {
		return "", "", false, false, invalidf("%q: unmatched \"]\"", s)
	}
	switch strings.Count(s, ":") {
	case 0:
		return s, "", false, false, nil
	case 1:
		host, port, _ := strings.Cut(s, ":")
		if host == "" {
			return "", "", false, false, invalidf("%q: empty host before \":\"", s)
		}
		return host, port, true, false, nil
	}
	return s, "", false, false, nil
}

// withAddr completes p with an IP address or CIDR. v6 says the text came in
// brackets or contains a colon, so it must be IPv6.
func (p Pattern) withAddr(s string, v6 bool) (Pattern, error) {
	var pfx netip.Prefix
	if strings.IndexByte(s, '/') >= 0 {
		var err error
		if pfx, err = netip.ParsePrefix(s); err != nil {
			return Pattern{}, invalidf("%q is not a valid CIDR: %v", s, err)
		}
		if m := pfx.Masked(); m != pfx {
			return Pattern{}, invalidf("CIDR %s has host bits set: write %s", pfx, m)
		}
	} else {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return Pattern{}, invalidf("%q is not a valid IP address: write IPv4 as four decimal octets, IPv6 in brackets", s)
		}
		if a.Zone() != "" {
			return Pattern{}, invalidf("%q: IPv6 zones are not allowed", s)
		}
		pfx = netip.PrefixFrom(a, a.BitLen())
	}
	a, bits := pfx.Addr(), pfx.Bits()
	if a.Is4() && v6 {
		return Pattern{}, invalidf("%q: brackets are only for IPv6 addresses: write the IPv4 address bare", s)
	}
	if a.Is4In6() && bits >= 96 {
		a, bits = a.Unmap(), bits-96
	}
	if a.Is4() && bits < minBits4 || a.Is6() && bits < minBits6 {
		return Pattern{}, invalidf("CIDR %q is too broad: use a prefix length of at least %d for IPv4 and %d for IPv6", s, minBits4, minBits6)
	}
	p.kind, p.prefix = kindAddr, netip.PrefixFrom(a, bits)
	return p, nil
}

// withWildcard completes p with the suffix of a "*." wildcard.
func (p Pattern) withWildcard(suffix string) (Pattern, error) {
	if suffix == "" || suffix == "." {
		return Pattern{}, invalidf("\"*.%s\": empty domain after wildcard: write *.example.com", suffix)
	}
	if strings.IndexByte(suffix, '*') >= 0 {
		return Pattern{}, invalidf("\"*.%s\": only one leading wildcard label is allowed", suffix)
	}
	name, err := normalizeName(suffix)
	if err != nil {
		return Pattern{}, err
	}
	if strings.IndexByte(name, '.') < 0 {
		return Pattern{}, invalidf("\"*.%s\" is too broad: a wildcard needs at least two labels after \"*.\": list the hosts instead", name)
	}
	if isPublicSuffix(name) {
		return Pattern{}, invalidf("\"*.%s\" is too broad: %s is a public suffix: list the hosts instead", name, name)
	}
	p.kind, p.name = kindWildcard, name
	return p, nil
}

// parsePorts parses "PORT" or "LO-HI". A range of one port is stored as
// that port, so both spellings have one canonical form.
func parsePorts(s string) (lo, hi uint16, err error) {
	a, b, isRange := strings.Cut(s, "-")
	if lo, err = parsePort(a); err != nil {
		return 0, 0, err
	}
	hi = lo
	if isRange {
		if hi, err = parsePort(b); err != nil {
			return 0, 0, err
		}
		if lo > hi {
			return 0, 0, invalidf("port range %q is reversed: write the lower port first", s)
		}
	}
	return lo, hi, nil
}

func parsePort(s string) (uint16, error) {
	if s == "" {
		return 0, invalidf("empty port: write a port 1-65535 after \":\"")
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, invalidf("port %q is not a decimal number", s)
		}
	}
	if s[0] == '0' {
		return 0, invalidf("port %q: ports are 1-65535 without leading zeros", s)
	}
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil {
		return 0, invalidf("port %q is out of range: ports are 1-65535", s)
	}
	return uint16(n), nil
}

// looksNumeric reports whether s uses only the characters of an IPv4 CIDR,
// to tell "10.0.0.0/33" (bad CIDR) from "example.com/x" (a path).
func looksNumeric(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && c != '.' && c != '/' {
			return false
		}
	}
	return true
}

// looksLikeAddr reports whether s uses only the characters of IP text.
func looksLikeAddr(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if ('0' > c || c > '9') && ('a' > c || c > 'f') && c != '.' && c != ':' {
			return false
		}
	}
	return s != ""
}

// String returns the canonical entry: lowercase punycode names without a
// trailing dot, IPv6 always in brackets, and the port omitted when it is the
// default 80 and 443.
func (p Pattern) String() string {
	var s string
	switch p.kind {
	case kindExact:
		s = p.name
	case kindWildcard:
		s = "*." + p.name
	case kindAddr:
		if p.prefix.IsSingleIP() {
			s = p.prefix.Addr().String()
		} else {
			s = p.prefix.String()
		}
		if p.prefix.Addr().Is6() {
			s = "[" + s + "]"
		}
	default:
		return ""
	}
	switch {
	case p.lo == 0 && p.hi == 0:
		return s
	case p.lo == p.hi:
		return s + ":" + strconv.Itoa(int(p.lo))
	}
	return s + ":" + strconv.Itoa(int(p.lo)) + "-" + strconv.Itoa(int(p.hi))
}

// HostLoopback is the name that reaches the host's loopback through the
// egress proxy: net_hosts "host.airlock.internal:8081" grants the host's
// 127.0.0.1:8081. The sandbox's own loopback (127.0.0.1 inside) is
// something else and always direct (plan.DefaultNoProxy). Only an exact
// entry grants it; a wildcard never does.
const HostLoopback = "host.airlock.internal"

// IsExact reports whether p is the exact name pattern for name (not a
// wildcard or an address).
func (p Pattern) IsExact(name string) bool { return p.kind == kindExact && p.name == name }

// Equal reports whether p and q are the same pattern. It is the same as
// p == q and exists for readability at call sites.
func (p Pattern) Equal(q Pattern) bool { return p == q }

// IsAddr reports whether p is an IP literal or CIDR pattern. Such patterns
// match through MatchAddr only.
func (p Pattern) IsAddr() bool { return p.kind == kindAddr }

// Match reports whether host and port are granted by p. host must be the
// output of NormalizeHost; anything else (upper case, a trailing dot,
// brackets, non-canonical IP text) never matches. An IP host matches only
// address patterns, as MatchAddr would; a name matches only name patterns.
func (p Pattern) Match(host string, port uint16) bool {
	switch p.kind {
	case kindExact:
		return host == p.name && p.portOK(port)
	case kindWildcard:
		n := len(host) - len(p.name)
		return n >= 2 && host[n-1] == '.' && host[n:] == p.name &&
			isCanonicalName(host) && p.portOK(port)
	case kindAddr:
		if !looksLikeAddr(host) {
			return false // a name; ParseAddr would allocate an error
		}
		a, err := netip.ParseAddr(host)
		// ParseAddr accepts IPv4 only in canonical form; IPv6 text has
		// several spellings, and only netip's own is normalized.
		if err != nil || a.Is6() && a.String() != host {
			return false
		}
		return p.MatchAddr(a, port)
	}
	return false
}

// MatchName reports whether p is a name pattern that grants host on some
// port (host as for Match). It is what decides whether a name resolves
// inside the sandbox at all; the port is decided at connect.
func (p Pattern) MatchName(host string) bool {
	if p.kind != kindExact && p.kind != kindWildcard {
		return false
	}
	port := p.lo
	if port == 0 {
		port = 80
	}
	return p.Match(host, port)
}

// MatchAddr reports whether the address and port are granted by an address
// pattern: a equal to a listed IP, or inside a listed CIDR. IPv4-mapped
// IPv6 addresses are compared in their IPv4 form. Name patterns, zoned and
// invalid addresses never match.
func (p Pattern) MatchAddr(a netip.Addr, port uint16) bool {
	if p.kind != kindAddr || !a.IsValid() || a.Zone() != "" {
		return false
	}
	return p.prefix.Contains(a.Unmap()) && p.portOK(port)
}

func (p Pattern) portOK(port uint16) bool {
	if p.lo == 0 && p.hi == 0 {
		return port == 80 || port == 443
	}
	return p.lo <= port && port <= p.hi
}
