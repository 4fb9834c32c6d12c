package hostspec

import "net/netip"

// special4 lists the IPv4 ranges that are not ordinary public unicast
// (IANA IPv4 Special-Purpose Address Registry, RFC 6890 and successors).
var special4 = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),       // "this network", includes 0.0.0.0
	netip.MustParsePrefix("10.0.0.0/8"),      // private, RFC 1918
	netip.MustParsePrefix("100.64.0.0/10"),   // shared address space (CGNAT), RFC 6598
	netip.MustParsePrefix("127.0.0.0/8"),     // loopback
	netip.MustParsePrefix("169.254.0.0/16"),  // link-local, includes cloud metadata 169.254.169.254
	netip.MustParsePrefix("172.16.0.0/12"),   // private
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments
	netip.MustParsePrefix("192.0.2.0/24"),    // TEST-NET-1
	netip.MustParsePrefix("192.88.99.0/24"),  // deprecated 6to4 relay anycast
	netip.MustParsePrefix("192.168.0.0/16"),  // private
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
	netip.MustParsePrefix("198.51.100.0/24"), // TEST-NET-2
	netip.MustParsePrefix("203.0.113.0/24"),  // TEST-NET-3
	netip.MustParsePrefix("224.0.0.0/4"),     // multicast
	netip.MustParsePrefix("240.0.0.0/4"),     // reserved, includes broadcast 255.255.255.255
}

// IPv6 is judged by allow-list: only global unicast 2000::/3 can be
// ordinary, which already excludes ::/128, ::1, IPv4-compatible ::/96,
// discard 100::/64, ULA fc00::/7, site-local fec0::/10, link-local
// fe80::/10 and multicast ff00::/8.
var (
	global6 = netip.MustParsePrefix("2000::/3")
	nat64   = netip.MustParsePrefix("64:ff9b::/96") // RFC 6052 well-known prefix, IPv4 in the last 32 bits
	sixTo4  = netip.MustParsePrefix("2002::/16")    // RFC 3056, IPv4 in bits 16-47
)

// special6 lists the ranges inside 2000::/3 that are not ordinary.
var special6 = []netip.Prefix{
	netip.MustParsePrefix("2001::/23"),     // IETF protocol assignments, includes Teredo 2001::/32
	netip.MustParsePrefix("2001:db8::/32"), // documentation
	netip.MustParsePrefix("3fff::/20"),     // documentation, RFC 9637
}

// IsSpecial reports whether a is anything but an ordinary public unicast
// address: unspecified, loopback, private, link-local (cloud metadata
// included), CGNAT, documentation, benchmarking, reserved, broadcast,
// multicast, ULA, site-local, Teredo and other IETF assignments. IPv4-mapped
// (::ffff:0:0/96), NAT64 (64:ff9b::/96) and 6to4 (2002::/16) addresses are
// judged by the IPv4 address they embed. The local-use NAT64 prefix
// 64:ff9b:1::/48 is always special: its embedding depends on a local prefix
// length we cannot know. Invalid and zoned addresses are special (fail
// closed). The egress proxy refuses special addresses unless net_hosts
// lists them exactly.
func IsSpecial(a netip.Addr) bool {
	if !a.IsValid() || a.Zone() != "" {
		return true
	}
	if a.Is4In6() {
		a = a.Unmap()
	}
	if a.Is4() {
		return inAny(special4, a)
	}
	b := a.As16()
	switch {
	case nat64.Contains(a):
		return IsSpecial(netip.AddrFrom4([4]byte(b[12:16])))
	case !global6.Contains(a):
		return true
	case sixTo4.Contains(a):
		return IsSpecial(netip.AddrFrom4([4]byte(b[2:6])))
	}
	return inAny(special6, a)
}

func inAny(list []netip.Prefix, a netip.Addr) bool {
	for _, p := range list {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
