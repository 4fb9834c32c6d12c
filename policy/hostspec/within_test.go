package hostspec

import (
	"net/netip"
	"testing"
)

func TestWithin(t *testing.T) {
	tests := []struct {
		name, inner, outer string
		want               bool
	}{
		// Exact names.
		{"same-name", "api.example.com", "api.example.com", true},
		{"other-name", "api.example.com", "www.example.com", false},
		{"suffix-not-label", "evilexample.com", "*.example.com", false},
		{"name-in-wildcard", "a.example.com", "*.example.com", true},
		{"deep-name-in-wildcard", "a.b.c.example.com", "*.example.com", true},
		{"apex-not-in-wildcard", "example.com", "*.example.com", false},
		{"name-not-in-sibling-wildcard", "a.example.org", "*.example.com", false},
		{"case-normalized", "API.Example.COM", "*.example.com", true},
		{"trailing-dot-normalized", "api.example.com.", "api.example.com", true},
		{"idna-normalized", "bücher.example", "xn--bcher-kva.example", true},
		{"idna-in-wildcard", "www.bücher.example", "*.XN--BCHER-KVA.example", true},
		{"idna-wildcard-in-unicode", "*.xn--bcher-kva.example", "*.bücher.example", true},
		// Wildcards.
		{"same-wildcard", "*.example.com", "*.example.com", true},
		{"narrower-wildcard", "*.a.example.com", "*.example.com", true},
		{"wider-wildcard", "*.example.com", "*.a.example.com", false},
		{"wildcard-not-in-name", "*.example.com", "a.example.com", false},
		{"wildcard-not-in-apex-name", "*.example.com", "example.com", false},
		{"wildcard-suffix-not-label", "*.evilexample.com", "*.example.com", false},
		// Ports.
		{"default-in-default", "example.com", "example.com", true},
		{"443-in-default", "a.example.com:443", "*.example.com", true},
		{"80-in-default", "a.example.com:80", "*.example.com", true},
		{"8443-not-in-default", "a.example.com:8443", "*.example.com", false},
		{"443-in-443", "a.example.com:443", "*.example.com:443", true},
		{"default-not-in-443", "a.example.com", "*.example.com:443", false},
		{"default-in-wide-range", "example.com", "example.com:1-65535", true},
		{"default-not-in-range-without-80", "example.com", "example.com:100-65535", false},
		{"range-80-443-not-in-default", "example.com:80-443", "example.com", false},
		{"range-in-range", "example.com:8000-8010", "example.com:8000-8100", true},
		{"range-over-top", "example.com:8000-8200", "example.com:8000-8100", false},
		{"range-under-bottom", "example.com:7999-8010", "example.com:8000-8100", false},
		{"port-in-range", "example.com:8080", "example.com:8000-8100", true},
		{"port-edge-of-range", "example.com:8100", "example.com:8000-8100", true},
		{"wildcard-ports", "*.a.example.com:443", "*.example.com:1-1024", true},
		// Addresses.
		{"same-ip", "192.0.2.7", "192.0.2.7", true},
		{"ip-in-cidr", "10.1.2.3", "10.0.0.0/8", true},
		{"ip-not-in-cidr", "11.1.2.3", "10.0.0.0/8", false},
		{"cidr-in-cidr", "10.1.0.0/16", "10.0.0.0/8", true},
		{"cidr-not-in-ip", "10.1.0.0/16", "10.1.0.0", false},
		{"wider-cidr", "10.0.0.0/8", "10.1.0.0/16", false},
		{"overlapping-cidr", "10.0.0.0/15", "10.1.0.0/16", false},
		{"same-cidr", "10.0.0.0/8:5432", "10.0.0.0/8:5432", true},
		{"cidr-port-not-covered", "10.0.0.0/16:5432", "10.0.0.0/8:443", false},
		{"ipv6-in-cidr", "[fd00::1]:443", "[fd00::/8]:443", true},
		{"ipv6-cidr-in-cidr", "[fd12::/16]", "[fd00::/8]", true},
		{"ipv6-not-in-cidr", "[2001:db8::1]", "[fd00::/8]", false},
		{"mapped-is-ipv4", "[::ffff:10.0.0.1]", "10.0.0.0/8", true},
		{"ipv4-not-in-ipv6", "10.0.0.1", "[fd00::/8]", false},
		{"ipv6-not-in-ipv4", "[::a00:1]", "10.0.0.0/8", false},
		// Names and addresses never cover each other.
		{"ip-not-in-name", "127.0.0.1", "localhost", false},
		{"name-not-in-cidr", "localhost", "127.0.0.0/8", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in, out := MustParse(tt.inner), MustParse(tt.outer)
			if got := in.Within(out); got != tt.want {
				t.Errorf("MustParse(%q).Within(MustParse(%q)) = %v, want %v", tt.inner, tt.outer, got, tt.want)
			}
			if got, want := in.Within(out), samplesMatch(in, out); got != want {
				t.Errorf("Within = %v but the samples of %q say %v for %q", got, tt.inner, want, tt.outer)
			}
			if got := in.Within(in); !got {
				t.Errorf("MustParse(%q) is not within itself", tt.inner)
			}
		})
	}
}

func TestWithinZero(t *testing.T) {
	p := MustParse("example.com")
	if (Pattern{}).Within(p) || p.Within(Pattern{}) || (Pattern{}).Within(Pattern{}) {
		t.Error("a zero Pattern is within something, or something within it")
	}
}

// FuzzWithin checks Within against Match and MatchAddr: a pattern is always
// within itself, and inner.Within(outer) holds exactly when outer matches
// every sample of inner. The samples (see samples) are chosen so that any
// inner not within outer has one outer does not match.
func FuzzWithin(f *testing.F) {
	for _, s := range [][2]string{
		{"a.example.com", "*.example.com"}, {"example.com", "*.example.com"}, {"*.a.example.com:443", "*.example.com:1-1024"},
		{"example.com:80-443", "example.com"}, {"10.1.0.0/16", "10.0.0.0/8"}, {"[fd00::/8]:443", "[fd00::1]"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		in, err := Parse(a)
		if err != nil {
			return
		}
		if !in.Within(in) {
			t.Fatalf("%q is not within itself", in)
		}
		out, err := Parse(b)
		if err != nil {
			return
		}
		got, want := in.Within(out), samplesMatch(in, out)
		if got && !want {
			t.Fatalf("MustParse(%q).Within(MustParse(%q)) = true, but a host it matches is not matched", in, out)
		}
		// A wildcard whose suffix leaves no room for a label matches no
		// host; Within may then say false where nothing is granted.
		if !got && want && len(samples(in)) > 0 {
			t.Fatalf("MustParse(%q).Within(MustParse(%q)) = false, but every sample is matched", in, out)
		}
	})
}

// samplesMatch reports whether outer matches every sample of inner.
func samplesMatch(inner, outer Pattern) bool {
	for _, s := range samples(inner) {
		ok := outer.Match(s.host, s.port)
		if s.addr.IsValid() {
			ok = outer.MatchAddr(s.addr, s.port)
		}
		if !ok {
			return false
		}
	}
	return true
}

type sample struct {
	host string
	addr netip.Addr
	port uint16
}

// samples returns hosts and ports that p matches, enough to witness any
// pattern p is not within: the name itself; two different subdomains of a
// wildcard (an exact name matches at most one); the first and last address
// of a prefix (a prefix not holding all of p misses one of them); and the
// lowest, next-lowest and highest port (the default {80, 443} holds no
// range of two or more ports).
func samples(p Pattern) []sample {
	ports := []uint16{80, 443}
	if p.lo != 0 {
		ports = []uint16{p.lo, p.hi}
		if p.lo < p.hi {
			ports = append(ports, p.lo+1)
		}
	}
	var out []sample
	for _, port := range ports {
		switch p.kind {
		case kindExact:
			out = append(out, sample{host: p.name, port: port})
		case kindWildcard:
			out = append(out, sample{host: "a1." + p.name, port: port}, sample{host: "b2." + p.name, port: port})
		case kindAddr:
			out = append(out, sample{addr: p.prefix.Addr(), port: port}, sample{addr: lastAddr(p.prefix), port: port})
		}
	}
	for _, s := range out {
		if s.addr.IsValid() && !p.MatchAddr(s.addr, s.port) || !s.addr.IsValid() && !p.Match(s.host, s.port) {
			return nil // p does not match it (a subdomain too long to exist): no witness
		}
	}
	return out
}

// lastAddr returns the highest address in pfx.
func lastAddr(pfx netip.Prefix) netip.Addr {
	b := pfx.Addr().As16()
	off := 0
	if pfx.Addr().Is4() {
		off = 96
	}
	for i := off + pfx.Bits(); i < 128; i++ {
		b[i/8] |= 1 << (7 - i%8)
	}
	a := netip.AddrFrom16(b)
	if pfx.Addr().Is4() {
		a = a.Unmap()
	}
	return a
}
