// Package hostspec parses and matches the host patterns of net_hosts: exact
// names, "*.suffix" wildcards (subdomains only, never the apex), IPv4/IPv6
// literals and CIDRs, each with an optional port or port range (default 80
// and 443). Names are normalized (case, trailing dot, IDNA to punycode)
// before they are stored or matched, so "EVIL.test." and "evil.test" cannot
// be told apart by an attacker. It stops suffix/prefix confusion
// ("evilallowed.test"), userinfo tricks and over-broad wildcards.
//
// API CONTRACT (fixed; other packages code against it):
//
//	Parse(s string) (Pattern, error)     // one net_hosts entry
//	MustParse(s string) Pattern          // tests and tables only
//	(Pattern) String() string            // Parse(p.String()) == p
//	(Pattern) Match(host string, port uint16) bool   // host: output of NormalizeHost
//	(Pattern) IsAddr() bool              // IP literal or CIDR pattern
//	(Pattern) MatchAddr(a netip.Addr, port uint16) bool // exact IP / CIDR listing
//	NormalizeHost(h string) (string, error) // canonical name or canonical IP text
//	IsSpecial(a netip.Addr) bool          // loopback, private, link-local, CGNAT, ULA, multicast, ...
package hostspec
