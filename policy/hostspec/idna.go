package hostspec

import (
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// This file converts host names to their ASCII form. The full IDNA2008 /
// UTS #46 mapping (golang.org/x/net/idna) needs golang.org/x/text, which
// this module does not carry, so hostspec implements the subset where no
// mapping is needed: ASCII is lowercased, and a non-ASCII label is accepted
// only if every rune is in idnTable, runes that UTS #46 lookup keeps as
// they are and that NFC cannot change in any sequence of them. Such a label
// is already what idna.Lookup would produce and is encoded as is. Anything
// else (upper-case or compatibility characters, decomposed accents) is
// refused rather than guessed at: write such names in lower case, NFC, or
// their "xn--" form. The Bidi and context rules are not checked; they only
// ever refuse a name, never change it. testdata/idnagen generates the table
// and checks that NormalizeHost agrees with idna.Lookup on every name both
// accept, so "bücher.example" and "xn--bcher-kva.example" are one host.

// toASCII lowercases ASCII letters, strips one trailing dot and converts
// each non-ASCII label to its A-label. It checks A-labels given as input
// ("xn--...") by decoding them and requiring the same rune rule and a
// byte-identical re-encoding, so every accepted name has one spelling.
func toASCII(s string) (string, error) {
	s = strings.TrimSuffix(asciiLower(s), ".")
	ascii := true
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			ascii = false
			break
		}
	}
	if ascii && !strings.Contains(s, "xn--") {
		return s, nil
	}
	labels := strings.Split(s, ".")
	for i, l := range labels {
		switch {
		case strings.HasPrefix(l, "xn--"):
			if err := checkALabel(l); err != nil {
				return "", err
			}
		case !isASCII(l):
			if err := checkULabel(l); err != nil {
				return "", err
			}
			a, err := punyEncode(l)
			if err != nil {
				return "", invalidf("label %q cannot be encoded as punycode", l)
			}
			labels[i] = a
		}
	}
	return strings.Join(labels, "."), nil
}

// checkALabel reports why an "xn--" label is not the canonical encoding of
// a label checkULabel accepts.
func checkALabel(l string) error {
	u, err := punyDecode(l[len("xn--"):])
	if err != nil {
		return invalidf("label %q is not valid punycode", l)
	}
	if isASCII(u) {
		return invalidf("label %q decodes to ASCII: write %q instead", l, u)
	}
	if err := checkULabel(u); err != nil {
		return err
	}
	if a, err := punyEncode(u); err != nil || a != l {
		return invalidf("label %q is not in canonical punycode form", l)
	}
	return nil
}

// checkULabel reports why a Unicode label is outside the accepted subset.
func checkULabel(l string) error {
	for i, r := range l {
		switch {
		case r == utf8.RuneError:
			return invalidf("label %q is not valid UTF-8", l)
		case r < utf8.RuneSelf:
			if !isLDH(byte(r)) {
				return invalidf("label %q contains %q", l, r)
			}
		case unicode.IsUpper(r) || unicode.IsTitle(r):
			return invalidf("label %q contains upper-case %q: write internationalized names in lower case", l, r)
		case !idnRune(r):
			return invalidf("label %q contains %q (%U), which IDNA maps, ignores or forbids: write the name in lower-case NFC or as xn--", l, r, r)
		case i == 0 && unicode.Is(unicode.M, r):
			return invalidf("label %q starts with a combining mark", l)
		}
	}
	return nil
}

// idnRune reports whether a non-ASCII rune may appear in a label as is,
// by binary search in the generated idnTable.
func idnRune(r rune) bool {
	_, ok := slices.BinarySearchFunc(idnTable, r, func(x runeRange, r rune) int {
		switch {
		case x.hi < r:
			return -1
		case x.lo > r:
			return 1
		}
		return 0
	})
	return ok
}

// runeRange is an inclusive range of runes.
type runeRange struct{ lo, hi rune }

// asciiLower lowercases ASCII letters only: Unicode case mapping could
// turn a non-ASCII letter into ASCII ("K" KELVIN SIGN into "k").
func asciiLower(s string) string {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if 'A' <= b[j] && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}
