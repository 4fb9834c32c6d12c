package hostspec

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"unicode"
	"unicode/utf8"
)

// ErrInvalid is matched (errors.Is) by every error Parse and NormalizeHost
// return, so callers can tell a malformed host from a denied one.
var ErrInvalid = errors.New("hostspec: invalid host")

type invalidError struct{ msg string }

func (e *invalidError) Error() string        { return "hostspec: " + e.msg }
func (e *invalidError) Is(target error) bool { return target == ErrInvalid }

func invalidf(format string, args ...any) error {
	return &invalidError{msg: fmt.Sprintf(format, args...)}
}

const (
	maxRaw   = 1024 // bytes of input looked at; longer text is refused before IDNA runs
	maxName  = 253  // RFC 1035 name length without the trailing dot
	maxLabel = 63
)

// NormalizeHost returns the canonical form of a request's host (without a
// port): an IPv4 address as four decimal octets, an IPv6 address (bare or in
// brackets) as netip text without brackets, an IPv4-mapped IPv6 address
// still as IPv6 text ("::ffff:127.0.0.1"; see IsSpecial), or a host name in
// lowercase punycode without a trailing dot. Non-canonical IPv4 forms
// ("0x7f.1", "0177.0.0.1", "2130706433", "127.1"), userinfo ("a@b"), ports,
// paths, zones, wildcards and anything that is neither a host name nor an IP
// address are errors matching ErrInvalid. NormalizeHost(out) == out.
func NormalizeHost(h string) (string, error) {
	if err := checkRaw("host", h); err != nil {
		return "", err
	}
	if h[0] == '[' {
		if h[len(h)-1] != ']' {
			return "", invalidf("host %q: \"[\" must enclose the whole IPv6 address, without a port", h)
		}
		a, err := netip.ParseAddr(h[1 : len(h)-1])
		if err != nil || !a.Is6() {
			return "", invalidf("host %q is not a bracketed IPv6 address", h)
		}
		return a.String(), nil
	}
	if strings.IndexByte(h, ':') >= 0 {
		if a, err := netip.ParseAddr(h); err == nil && a.Is6() {
			return a.String(), nil
		}
		return "", invalidf("host %q contains \":\": pass the host without a port, and IPv6 as an address", h)
	}
	if strings.IndexByte(h, '/') >= 0 {
		return "", invalidf("host %q contains a path: pass the host only", h)
	}
	if a, err := netip.ParseAddr(h); err == nil {
		return a.String(), nil
	}
	if strings.IndexByte(h, '*') >= 0 {
		return "", invalidf("host %q contains \"*\": wildcards belong in net_hosts patterns only", h)
	}
	return normalizeName(h)
}

// checkRaw refuses text that is never part of a host entry, with an error
// that names the mistake: emptiness, excess length, bad UTF-8, whitespace
// and control or invisible format characters, URL schemes, userinfo, query
// and fragment markers, backslashes and percent signs (zones, escapes).
// what is "entry" or "host", for the message.
func checkRaw(what, s string) error {
	switch {
	case s == "":
		return invalidf("empty %s: write a host name, *.domain or an IP address", what)
	case len(s) > maxRaw:
		return invalidf("%s is longer than %d bytes", what, maxRaw)
	case !utf8.ValidString(s):
		return invalidf("%s %q is not valid UTF-8", what, s)
	case strings.Contains(s, "://"):
		return invalidf("%s %q has a URL scheme: write the host only, as in example.com", what, s)
	}
	for _, r := range s {
		switch {
		case r == 0:
			return invalidf("%s %q contains a NUL byte", what, s)
		case unicode.IsSpace(r) || unicode.IsControl(r):
			return invalidf("%s %q contains whitespace or a control character", what, s)
		case unicode.Is(unicode.Cf, r):
			// Invisible format characters (soft hyphen, joiners, bidi
			// overrides) would hide what a grant says.
			return invalidf("%s %q contains invisible character %U", what, s, r)
		case r == '@':
			return invalidf("%s %q contains userinfo (\"@\"): write the host only", what, s)
		case r == '?' || r == '#' || r == '\\' || r == '%':
			return invalidf("%s %q contains %q: write the host only, without zones or escapes", what, s, r)
		}
	}
	return nil
}

// normalizeName converts a host name to ASCII (see toASCII), which also
// strips one trailing dot, and checks the result as strict LDH.
func normalizeName(s string) (string, error) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < utf8.RuneSelf && !isLDH(c) && !('A' <= c && c <= 'Z') && c != '.' {
			return "", invalidf("host name %q contains %q: use letters, digits, hyphens and dots", s, c)
		}
	}
	a, err := toASCII(s)
	if err != nil {
		return "", err
	}
	if err := checkLDH(a); err != nil {
		return "", invalidf("host name %q: %v", s, err)
	}
	if numericLabel(lastLabel(a)) {
		return "", invalidf("%q is not a host name (its last label is a number) and not a canonical IPv4 address: write IPv4 as four decimal octets without leading zeros, as in 127.0.0.1", s)
	}
	return a, nil
}

// checkLDH reports why s is not a lowercase LDH name without trailing dot.
func checkLDH(s string) error {
	if s == "" {
		return errors.New("empty name")
	}
	if len(s) > maxName {
		return fmt.Errorf("name is longer than %d bytes", maxName)
	}
	for label := range strings.SplitSeq(s, ".") {
		switch {
		case label == "":
			return errors.New("empty label: remove the extra dot")
		case len(label) > maxLabel:
			return fmt.Errorf("label %q is longer than %d bytes", label, maxLabel)
		case label[0] == '-' || label[len(label)-1] == '-':
			return fmt.Errorf("label %q starts or ends with a hyphen", label)
		}
		for i := 0; i < len(label); i++ {
			if !isLDH(label[i]) {
				return fmt.Errorf("label %q contains %q", label, label[i])
			}
		}
	}
	return nil
}

// isCanonicalName is checkLDH without allocations, for Match.
func isCanonicalName(s string) bool {
	if s == "" || len(s) > maxName {
		return false
	}
	start := 0
	for i := 0; i <= len(s); i++ {
		if i < len(s) && s[i] != '.' {
			if !isLDH(s[i]) {
				return false
			}
			continue
		}
		n := i - start
		if n == 0 || n > maxLabel || s[start] == '-' || s[i-1] == '-' {
			return false
		}
		start = i + 1
	}
	return true
}

func isLDH(c byte) bool {
	return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-'
}

func lastLabel(s string) string {
	return s[strings.LastIndexByte(s, '.')+1:]
}

// numericLabel reports whether a label would end an IPv4 address in the
// WHATWG URL host parser or inet_aton: all decimal digits, or "0x"
// followed by zero or more hex digits.
func numericLabel(l string) bool {
	digits := l
	hex := false
	if strings.HasPrefix(l, "0x") {
		digits, hex = l[2:], true
	} else if l == "" {
		return false
	}
	for i := 0; i < len(digits); i++ {
		c := digits[i]
		if '0' <= c && c <= '9' || hex && 'a' <= c && c <= 'f' {
			continue
		}
		return false
	}
	return true
}
