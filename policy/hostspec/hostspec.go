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
//	(Pattern) Within(outer Pattern) bool // outer matches every host:port p matches (ceilings)
//	NormalizeHost(h string) (string, error) // canonical name or canonical IP text
//	IsSpecial(a netip.Addr) bool          // loopback, private, link-local, CGNAT, ULA, multicast, ...
//	Join(host string, port uint16) string // "host:port", IPv6 in brackets
//
// # Entry syntax
//
// One net_hosts entry is a host part optionally followed by ":PORT" or
// ":LO-HI" (decimal, 1..65535, no leading zeros, LO <= HI). Without a port
// the entry grants ports 80 and 443 only. The host part is one of:
//
//	api.example.com         exact name (one label such as "localhost" is allowed)
//	*.example.com           any subdomain of example.com, never example.com itself
//	192.0.2.7               IPv4 address, four decimal octets, no leading zeros
//	[2001:db8::7]           IPv6 address; brackets are required when a port follows
//	2001:db8::7             bare IPv6 address, only without a port
//	10.0.0.0/8              IPv4 CIDR, host bits zero, prefix length at least 8
//	[fd00::/8]              IPv6 CIDR in brackets (bare without a port), length at least 8
//
// So "10.0.0.0/8:5432" and "[fd00::/8]:443" carry ports. An IPv4-mapped IPv6
// literal or CIDR ("[::ffff:10.0.0.1]") is stored as its IPv4 form. IPv6
// zones are refused. A /32 or /128 CIDR is stored as the plain address.
//
// # Names
//
// ASCII letters are lowercased and one trailing dot is stripped. A
// non-ASCII label is converted to its punycode A-label ("bücher" becomes
// "xn--bcher-kva") if it is already in the form IDNA2008 lookup (UTS #46,
// non-transitional) would produce: lowercase, NFC, no compatibility,
// ignored or disallowed characters (see idna.go; the table is generated
// from golang.org/x/net/idna). Other Unicode is refused rather than mapped,
// because this module does not carry the mapping data: write the name in
// lower case or as its xn-- form. An xn-- label must decode to such a label
// and be its exact encoding. The result must be strict LDH: every label 1
// to 63 bytes of a-z, 0-9 and "-", not starting or ending with "-", the
// whole name at most 253 bytes. Underscores are refused: they are not valid
// in host names and IDNA's STD3 rules reject them. "--" in positions 3 and
// 4 of a non-xn-- label is allowed, as real hosts use it. A name whose last
// label is all digits, or "0x" followed by hex digits, is refused: some
// parser (inet_aton, WHATWG URL) reads it as an IPv4 address, which is how
// "0x7f.1", "0177.0.0.1" and "2130706433" would otherwise pass as names.
//
// A wildcard is exactly "*." followed by a name with at least two labels
// that is not on the package's public-suffix list. That list is small and
// built in (registry suffixes such as co.uk and com.au, and hosting suffixes
// where anyone can claim a subdomain, such as github.io); it is not the full
// Public Suffix List, so reviewers must still read wildcard grants.
//
// # Matching
//
// Match compares a host already normalized by NormalizeHost: exact patterns
// by equality, wildcards by a "." label boundary with at least one extra
// label. Name patterns never match IP text, and address patterns match only
// IP text (through MatchAddr). A host that is not in NormalizeHost's output
// form never matches.
//
// This package must not import os, syscall, net/http, log or os/exec; it is
// pure policy data (standard library only).
package hostspec
