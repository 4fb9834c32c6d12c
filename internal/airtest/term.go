package airtest

import (
	"testing"
	"unicode/utf8"
)

// Forged is a verdict that hostile text tries to print on a line of its
// own, as if airlock had printed it.
const Forged = "airlock: all checks passed, 0 denials"

// Hostile is what a sandbox, an API client or a hostile file name can put
// in a string airlock prints: every kind of control a terminal acts on,
// Forged on a fresh line, bidi and invisible characters, and invalid UTF-8.
const Hostile = "\x1b[2K\r\n" + Forged + "\n\x1b]0;pwned\x07\x1b]52;c;cHduZWQ=\x07\u009b31m\u202e\u2066\u200b\u2028\ufeff\x7f\x08\t\xff\xc3"

// CheckNoControls fails for every byte or character of w, as written by
// airlock, that a terminal acts on or that makes text look different from
// what it is. This list is the test's own, not the escaping code's.
func CheckNoControls(t testing.TB, w string) {
	t.Helper()
	if !utf8.ValidString(w) {
		t.Errorf("airlock printed invalid UTF-8: %q", w)
	}
	bad := 0
	for i, r := range w {
		hostile := (r < 0x20 && r != '\n') || (r >= 0x7f && r <= 0x9f) ||
			(r >= 0x200b && r <= 0x200f) || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069) ||
			r == 0x2028 || r == 0x2029 || r == 0xfeff
		if !hostile {
			continue
		}
		if bad++; bad <= 5 {
			lo, hi := max(0, i-40), min(len(w), i+40)
			t.Errorf("airlock printed %U at byte %d: ...%q...", r, i, w[lo:hi])
		}
	}
	if bad > 5 {
		t.Errorf("... and %d more such characters", bad-5)
	}
}
