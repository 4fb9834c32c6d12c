package hostspec_test

import (
	"errors"
	"testing"

	"github.com/airlock-sandbox/airlock/policy/hostspec"
)

func TestNormalizeHost(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"name", "example.com", "example.com"},
		{"upper", "EXAMPLE.com", "example.com"},
		{"trailing-dot", "example.com.", "example.com"},
		{"single-label", "localhost", "localhost"},
		{"idna", "Bücher.example", "xn--bcher-kva.example"},
		{"punycode-upper", "XN--BCHER-KVA.EXAMPLE", "xn--bcher-kva.example"},
		{"eszett-nontransitional", "faß.de", "xn--fa-hia.de"},
		{"ipv4", "127.0.0.1", "127.0.0.1"},
		{"ipv4-zero", "0.0.0.0", "0.0.0.0"},
		{"ipv6", "2001:DB8:0:0::1", "2001:db8::1"},
		{"ipv6-brackets", "[::1]", "::1"},
		{"ipv6-mapped", "[::FFFF:127.0.0.1]", "::ffff:127.0.0.1"},
		{"ipv6-mapped-hex", "::ffff:7f00:1", "::ffff:127.0.0.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := hostspec.NormalizeHost(tt.in)
			if err != nil || got != tt.want {
				t.Errorf("NormalizeHost(%q) = %q, %v, want %q", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestNormalizeHostErrors(t *testing.T) {
	tests := []struct{ name, in string }{
		{"empty", ""},
		{"octal", "0177.0.0.1"},
		{"octal-last", "127.0.0.01"},
		{"hex", "0x7f.0.0.1"},
		{"hex-short", "0x7f.1"},
		{"hex-single", "0x7f000001"},
		{"hex-upper", "0X7F.0.0.1"},
		{"decimal", "2130706433"},
		{"short", "127.1"},
		{"three-part", "127.0.1"},
		{"trailing-dot-ip", "127.0.0.1."},
		{"five-part", "1.2.3.4.5"},
		{"userinfo", "evil.test@allowed.test"},
		{"userinfo-ip", "allowed.test@127.0.0.1"},
		{"port", "example.com:443"},
		{"ipv6-port", "[::1]:443"},
		{"ipv6-zone", "fe80::1%eth0"},
		{"ipv6-bracket-zone", "[fe80::1%25eth0]"},
		{"ipv4-brackets", "[127.0.0.1]"},
		{"ipv6-half-bracket", "[::1"},
		{"path", "example.com/x"},
		{"scheme", "http://example.com"},
		{"wildcard", "*.example.com"},
		{"space", "example.com "},
		{"nul", "example.com\x00.evil"},
		{"empty-label", "a..b"},
		{"underscore", "a_b.example"},
		{"decomposed", "bu\u0308cher.example"},
		{"fullwidth-dot", "example\uff0ecom"},
		{"cidr", "10.0.0.0/8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := hostspec.NormalizeHost(tt.in)
			if err == nil {
				t.Fatalf("NormalizeHost(%q) = %q, want error", tt.in, got)
			}
			if !errors.Is(err, hostspec.ErrInvalid) {
				t.Errorf("NormalizeHost(%q) error %v does not match ErrInvalid", tt.in, err)
			}
		})
	}
}
