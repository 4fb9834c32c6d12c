package hostspec_test

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/airlock-sandbox/airlock/policy/hostspec"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name, in, want string
		addr           bool
	}{
		{"exact", "api.example.com", "api.example.com", false},
		{"single-label", "localhost", "localhost", false},
		{"upper-case", "API.Example.COM", "api.example.com", false},
		{"trailing-dot", "example.com.", "example.com", false},
		{"port", "example.com:8080", "example.com:8080", false},
		{"port-range", "example.com:8000-8100", "example.com:8000-8100", false},
		{"range-of-one", "example.com:443-443", "example.com:443", false},
		{"all-ports", "example.com:1-65535", "example.com:1-65535", false},
		{"wildcard", "*.pythonhosted.org:443", "*.pythonhosted.org:443", false},
		{"wildcard-deep", "*.a.b.example.com", "*.a.b.example.com", false},
		{"wildcard-trailing-dot", "*.Example.com.", "*.example.com", false},
		{"idna", "bücher.example", "xn--bcher-kva.example", false},
		{"punycode", "XN--BCHER-KVA.example", "xn--bcher-kva.example", false},
		{"idna-wildcard", "*.bücher.example", "*.xn--bcher-kva.example", false},
		{"triple-hyphen", "r3---sn-abc.googlevideo.com", "r3---sn-abc.googlevideo.com", false},
		{"digits-not-last", "123.example.com", "123.example.com", false},
		{"hex-like-not-last", "0x7f.example.com", "0x7f.example.com", false},
		{"ipv4", "127.0.0.1", "127.0.0.1", true},
		{"ipv4-port", "127.0.0.1:8080", "127.0.0.1:8080", true},
		{"ipv6-brackets", "[2001:db8::1]", "[2001:db8::1]", true},
		{"ipv6-bare", "2001:DB8:0::1", "[2001:db8::1]", true},
		{"ipv6-port", "[::1]:8080", "[::1]:8080", true},
		{"ipv4-mapped", "[::ffff:10.0.0.1]:22", "10.0.0.1:22", true},
		{"cidr4", "10.0.0.0/8", "10.0.0.0/8", true},
		{"cidr4-port", "10.0.0.0/8:5432", "10.0.0.0/8:5432", true},
		{"cidr4-single", "10.1.2.3/32", "10.1.2.3", true},
		{"cidr6", "[fd00::/8]:443", "[fd00::/8]:443", true},
		{"cidr6-bare", "fd00::/16", "[fd00::/16]", true},
		{"cidr6-single", "[2001:db8::1/128]", "[2001:db8::1]", true},
		{"cidr6-mapped", "[::ffff:10.0.0.0/104]", "10.0.0.0/8", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := hostspec.Parse(tt.in)
			if err != nil {
				t.Fatalf("Parse(%q) = %v, want %q", tt.in, err, tt.want)
			}
			if got := p.String(); got != tt.want {
				t.Errorf("Parse(%q).String() = %q, want %q", tt.in, got, tt.want)
			}
			if got := p.IsAddr(); got != tt.addr {
				t.Errorf("Parse(%q).IsAddr() = %v, want %v", tt.in, got, tt.addr)
			}
			q, err := hostspec.Parse(p.String())
			if err != nil || !q.Equal(p) || q != p {
				t.Errorf("Parse(%q) = %v, %v, want %v", p.String(), q, err, p)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct{ name, in string }{
		{"empty", ""},
		{"space", "example .com"},
		{"leading-space", " example.com"},
		{"tab", "example.com\t"},
		{"newline", "example.com\n"},
		{"nul", "example.com\x00"},
		{"nbsp", "example\u00a0.com"},
		{"soft-hyphen", "exam\u00adple.com"},
		{"zero-width-joiner", "exa\u200dmple.com"},
		{"bidi-override", "\u202eexample.com"},
		{"bad-utf8", "exa\xffmple.com"},
		{"too-long-input", string(make([]byte, 2000))},
		{"userinfo", "user@example.com"},
		{"userinfo-host", "evil.test@allowed.test"},
		{"scheme", "https://example.com"},
		{"path", "example.com/x"},
		{"path-after-port", "example.com:443/x"},
		{"query", "example.com?x"},
		{"fragment", "example.com#x"},
		{"backslash", "example.com\\x"},
		{"percent", "exa%6dple.com"},
		{"underscore", "_dmarc.example.com"},
		{"empty-label", "a..b"},
		{"leading-dot", ".a"},
		{"two-trailing-dots", "example.com.."},
		{"only-dot", "."},
		{"leading-hyphen", "-a.example.com"},
		{"trailing-hyphen", "a-.example.com"},
		{"label-64", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.com"},
		{"name-254", longName(254)},
		{"star-alone", "*"},
		{"star-port", "*:443"},
		{"star-dot", "*."},
		{"wildcard-middle", "a.*.b"},
		{"wildcard-partial", "*x.b"},
		{"wildcard-suffix", "example.*"},
		{"wildcard-double", "*.*.example.com"},
		{"wildcard-tld", "*.com"},
		{"wildcard-tld-dot", "*.com."},
		{"wildcard-co-uk", "*.co.uk"},
		{"wildcard-com-au", "*.COM.AU"},
		{"wildcard-github-io", "*.github.io"},
		{"wildcard-ip", "*.0.0.1"},
		{"port-zero", "example.com:0"},
		{"port-too-big", "example.com:65536"},
		{"port-leading-zero", "example.com:0443"},
		{"port-empty", "example.com:"},
		{"port-sign", "example.com:+443"},
		{"port-name", "example.com:https"},
		{"port-range-reversed", "example.com:9000-8000"},
		{"port-range-open", "example.com:8000-"},
		{"host-empty", ":443"},
		{"octal-ipv4", "0177.0.0.1"},
		{"hex-ipv4", "0x7f.0.0.1"},
		{"decimal-ipv4", "2130706433"},
		{"short-ipv4", "127.1"},
		{"hex-single", "0x7f"},
		{"numeric-tld", "example.123"},
		{"ipv4-trailing-dot", "127.0.0.1."},
		{"ipv4-leading-zero", "127.0.0.01"},
		{"ipv4-brackets", "[127.0.0.1]"},
		{"ipv6-port-unbracketed", "2001:db8::1:443:"},
		{"ipv6-missing-bracket", "[2001:db8::1"},
		{"ipv6-junk-after-bracket", "[2001:db8::1]x"},
		{"ipv6-zone", "[fe80::1%eth0]"},
		{"stray-bracket", "example.com]"},
		{"cidr-host-bits", "10.0.0.1/8"},
		{"cidr-bad-len", "10.0.0.0/33"},
		{"cidr-too-broad4", "0.0.0.0/0"},
		{"cidr-too-broad6", "[::/0]"},
		{"cidr6-host-bits", "[fd00::1/8]"},
		{"idna-upper", "BÜCHER.example"},
		{"idna-decomposed", "bu\u0308cher.example"},
		{"idna-fullwidth", "ｅｘａｍｐｌｅ.com"},
		{"idna-ideographic-dot", "example\u3002com"},
		{"idna-kelvin", "\u212a.example"},
		{"punycode-invalid", "xn--zz.example"},
		{"punycode-ascii", "xn--abc-.example"},
		{"punycode-upper-decoded", "xn--bcher-kva-.example"},
		{"punycode-empty", "xn--.example"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := hostspec.Parse(tt.in)
			if err == nil {
				t.Fatalf("Parse(%q) = %q, want error", tt.in, p)
			}
			if !errors.Is(err, hostspec.ErrInvalid) {
				t.Errorf("Parse(%q) error %v does not match ErrInvalid", tt.in, err)
			}
		})
	}
}

func longName(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = 'a'
		if i%50 == 49 {
			b[i] = '.'
		}
	}
	return string(b)
}

func TestParseLimits(t *testing.T) {
	for _, in := range []string{longName(253), "x.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"} {
		if _, err := hostspec.Parse(in); err != nil {
			t.Errorf("Parse(%q) = %v, want no error", in, err)
		}
	}
}

func TestMustParsePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("MustParse(\"*\") did not panic")
		}
	}()
	hostspec.MustParse("*")
}

func TestZeroPattern(t *testing.T) {
	var p hostspec.Pattern
	if p.String() != "" || p.IsAddr() || p.Match("", 443) || p.MatchAddr(netip.MustParseAddr("1.2.3.4"), 443) {
		t.Errorf("zero Pattern = %q matches or is an address, want nothing", p)
	}
}

func TestMatch(t *testing.T) {
	tests := []struct {
		name, pattern, host string
		port                uint16
		want                bool
	}{
		{"exact", "allowed.test", "allowed.test", 443, true},
		{"exact-http", "allowed.test", "allowed.test", 80, true},
		{"exact-default-port-only", "allowed.test", "allowed.test", 8080, false},
		{"exact-subdomain", "allowed.test", "a.allowed.test", 443, false},
		{"exact-prefix-confusion", "allowed.test", "evilallowed.test", 443, false},
		{"exact-suffix-confusion", "allowed.test", "allowed.test.evil.test", 443, false},
		{"exact-case-not-normalized", "allowed.test", "ALLOWED.test", 443, false},
		{"exact-trailing-dot-not-normalized", "allowed.test", "allowed.test.", 443, false},
		{"exact-pattern-case", "ALLOWED.Test.", "allowed.test", 443, true},
		{"port", "allowed.test:8080", "allowed.test", 8080, true},
		{"port-other", "allowed.test:8080", "allowed.test", 443, false},
		{"range-low", "allowed.test:8000-8100", "allowed.test", 8000, true},
		{"range-high", "allowed.test:8000-8100", "allowed.test", 8100, true},
		{"range-below", "allowed.test:8000-8100", "allowed.test", 7999, false},
		{"range-above", "allowed.test:8000-8100", "allowed.test", 8101, false},
		{"wildcard-sub", "*.allowed.test", "a.allowed.test", 443, true},
		{"wildcard-deep", "*.allowed.test", "a.b.allowed.test", 443, true},
		{"wildcard-apex", "*.allowed.test", "allowed.test", 443, false},
		{"wildcard-prefix-confusion", "*.allowed.test", "evilallowed.test", 443, false},
		{"wildcard-suffix-confusion", "*.allowed.test", "allowed.test.evil.test", 443, false},
		{"wildcard-empty-label", "*.allowed.test", ".allowed.test", 443, false},
		{"wildcard-double-dot", "*.allowed.test", "a..allowed.test", 443, false},
		{"wildcard-upper", "*.allowed.test", "A.allowed.test", 443, false},
		{"wildcard-port", "*.allowed.test", "a.allowed.test", 22, false},
		{"wildcard-port-range", "*.allowed.test:1-1024", "a.allowed.test", 22, true},
		{"idna-unicode-pattern", "bücher.example", "xn--bcher-kva.example", 443, true},
		{"idna-punycode-pattern", "xn--bcher-kva.example", "xn--bcher-kva.example", 443, true},
		{"idna-wildcard", "*.bücher.example", "www.xn--bcher-kva.example", 443, true},
		{"name-vs-ip", "localhost", "127.0.0.1", 80, false},
		{"ip-exact", "127.0.0.1:8080", "127.0.0.1", 8080, true},
		{"ip-port", "127.0.0.1:8080", "127.0.0.1", 80, false},
		{"ip-default-ports", "192.0.2.1", "192.0.2.1", 443, true},
		{"ip-mapped-host", "127.0.0.1", "::ffff:127.0.0.1", 443, true},
		{"ip-noncanonical-host", "127.0.0.1", "127.000.0.1", 443, false},
		{"ip-vs-name", "127.0.0.1", "localhost", 443, false},
		{"ipv6", "[2001:db8::1]", "2001:db8::1", 443, true},
		{"ipv6-brackets-not-normalized", "[2001:db8::1]", "[2001:db8::1]", 443, false},
		{"ipv6-long-form-not-normalized", "[2001:db8::1]", "2001:db8:0:0:0:0:0:1", 443, false},
		{"cidr-in", "10.0.0.0/8", "10.9.8.7", 443, true},
		{"cidr-out", "10.0.0.0/8", "11.0.0.1", 443, false},
		{"cidr6-in", "[fd00::/8]:443", "fd12::1", 443, true},
		{"cidr6-v4", "[fd00::/8]:443", "10.0.0.1", 443, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := hostspec.MustParse(tt.pattern)
			if got := p.Match(tt.host, tt.port); got != tt.want {
				t.Errorf("MustParse(%q).Match(%q, %d) = %v, want %v", tt.pattern, tt.host, tt.port, got, tt.want)
			}
		})
	}
}

func TestMatchAddr(t *testing.T) {
	tests := []struct {
		name, pattern, addr string
		port                uint16
		want                bool
	}{
		{"ip", "127.0.0.1:8080", "127.0.0.1", 8080, true},
		{"ip-other", "127.0.0.1:8080", "127.0.0.2", 8080, false},
		{"ip-port", "127.0.0.1:8080", "127.0.0.1", 8081, false},
		{"ip-mapped", "127.0.0.1", "::ffff:127.0.0.1", 80, true},
		{"ip6", "[::1]:8080", "::1", 8080, true},
		{"ip6-zone", "[fe80::1]", "fe80::1%eth0", 443, false},
		{"cidr", "169.254.0.0/16", "169.254.169.254", 80, true},
		{"cidr-mapped", "10.0.0.0/8", "::ffff:10.1.1.1", 443, true},
		{"cidr6", "[2001:db8::/32]", "2001:db8:1::1", 443, true},
		{"cidr6-out", "[2001:db8::/32]", "2001:db9::1", 443, false},
		{"name-pattern", "localhost", "127.0.0.1", 80, false},
		{"wildcard-pattern", "*.example.com", "93.184.216.34", 443, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := hostspec.MustParse(tt.pattern)
			a := netip.MustParseAddr(tt.addr)
			if got := p.MatchAddr(a, tt.port); got != tt.want {
				t.Errorf("MustParse(%q).MatchAddr(%v, %d) = %v, want %v", tt.pattern, a, tt.port, got, tt.want)
			}
		})
	}
	if hostspec.MustParse("10.0.0.0/8").MatchAddr(netip.Addr{}, 443) {
		t.Error("MatchAddr(invalid address) = true, want false")
	}
}

func BenchmarkMatch(b *testing.B) {
	pats := []hostspec.Pattern{
		hostspec.MustParse("api.example.com"),
		hostspec.MustParse("*.pythonhosted.org:443"),
		hostspec.MustParse("10.0.0.0/8:5432"),
	}
	b.ReportAllocs()
	for b.Loop() {
		for _, p := range pats {
			p.Match("files.pythonhosted.org", 443)
			p.Match("10.1.2.3", 5432)
		}
	}
}
