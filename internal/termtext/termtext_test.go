package termtext_test

import (
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/internal/termtext"
)

func TestEscape(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"empty", "", ""},
		{"plain-path", "/tmp/home/.aws/credentials", "/tmp/home/.aws/credentials"},
		{"host-port", "pypi.org:443", "pypi.org:443"},
		{"backslash-kept", `C:\x1b`, `C:\x1b`},
		{"esc", "a\x1bb", `a\x1bb`},
		{"csi-erase-line", "\x1b[2K", `\x1b[2K`},
		{"cr-lf-tab", "a\r\nb\tc", `a\r\nb\tc`},
		{"bel-bs-nul", "\a\b\x00", `\x07\x08\x00`},
		{"del", "a\x7f", `a\x7f`},
		{"osc-title", "\x1b]0;pwned\x07", `\x1b]0;pwned\x07`},
		{"osc52-clipboard", "\x1b]52;c;cHduZWQ=\x1b\\", `\x1b]52;c;cHduZWQ=\x1b\`},
		{"c1-csi-utf8", "\u009b31m", `\u009b31m`},
		{"c1-first-last", "\u0080\u009f", `\u0080\u009f`},
		{"c1-raw-byte", "\x9b31m", `\x9b31m`},
		{"invalid-utf8", "a\xffb\xc3", `a\xffb\xc3`},
		{"surrogate-encoded", "\xed\xa0\x80", `\xed\xa0\x80`},
		{"rlo", "evil\u202egnp.exe", `evil\u202egnp.exe`},
		{"bidi-embeddings", "\u202a\u202b\u202c\u202d", `\u202a\u202b\u202c\u202d`},
		{"bidi-isolates", "\u2066\u2067\u2068\u2069", `\u2066\u2067\u2068\u2069`},
		{"zero-width", "\u200b\u200c\u200d\u200e\u200f", `\u200b\u200c\u200d\u200e\u200f`},
		{"line-para-sep", "a\u2028b\u2029c", `a\u2028b\u2029c`},
		{"bom", "\ufeffx", `\ufeffx`},
		{"soft-hyphen", "pay\u00adpal", `pay\u00adpal`},
		{"nbsp", "a\u00a0b", `a\u00a0b`},
		{"word-joiner", "a\u2060b", `a\u2060b`},
		{"hangul-filler", "a\u3164b", `a\u3164b`},
		{"variation-selector", "a\ufe0fb", `a\ufe0fb`},
		{"tag-char", "a\U000e0041b", `a\U000e0041b`},
		{"private-use", "\ue000", `\ue000`},
		{"unassigned", "\U0010ffff", `\U0010ffff`},
		{"unicode-kept", "Grüße/日本語/ü/€/…", "Grüße/日本語/ü/€/…"},
		{"emoji-kept", "😀", "😀"},
		{"replacement-char-kept", "\ufffd", "\ufffd"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := termtext.Escape(tt.in, 100); got != tt.want {
				t.Errorf("Escape(%q, 100) = %q, want %q", tt.in, got, tt.want)
			}
			if got, want := termtext.AllPrintable(tt.in), tt.in == tt.want; got != want {
				t.Errorf("AllPrintable(%q) = %v, want %v (whether Escape leaves it as it is)", tt.in, got, want)
			}
		})
	}
}

func TestEscapeBound(t *testing.T) {
	tests := []struct {
		name, in string
		max      int
		want     string
	}{
		{"fits", "abcdef", 6, "abcdef"},
		{"cut-ascii", "abcdefgh", 6, "abcdef…[+2 bytes]"},
		{"cut-one", "abcdefg", 6, "abcdef…[+1 byte]"},
		{"cut-at-escape", "abcd\x1bxyz", 6, "abcd…[+4 bytes]"},    // \x1b does not fit in 2
		{"cut-at-rune", "abcd€xyz", 6, "abcd…[+6 bytes]"},         // € is 3 bytes
		{"escape-fills", "\x1b\x1b\x1b", 8, `\x1b\x1b…[+1 byte]`}, // counted in output bytes
		{"zero", "abc", 0, "…[+3 bytes]"},
		{"negative", "abc", -5, "…[+3 bytes]"},
		{"empty-zero", "", 0, ""},
		{"long", strings.Repeat("a", 5000), 1024, strings.Repeat("a", 1024) + "…[+3976 bytes]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := termtext.Escape(tt.in, tt.max); got != tt.want {
				t.Errorf("Escape(%q, %d) = %q, want %q", tt.in, tt.max, got, tt.want)
			}
		})
	}
	if got := termtext.Field(strings.Repeat("x", termtext.FieldMax+1)); !strings.HasSuffix(got, "…[+1 byte]") {
		t.Errorf("Field of FieldMax+1 bytes = ...%q, want it cut by one byte", got[len(got)-20:])
	}
}

func TestLines(t *testing.T) {
	tests := []struct {
		name, in string
		max      int
		want     string
	}{
		{"kept", "a\nb\n", 10, "a\nb\n"},
		{"escaped-per-line", "a\x1b]0;x\x07\n\u202eb\n", 100, "a\\x1b]0;x\\x07\n\\u202eb\n"},
		{"cr-escaped", "a\r\nb", 10, "a\\r\nb"},
		{"bounded-per-line", "abcdef\nabc", 3, "abc…[+3 bytes]\nabc"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := termtext.Lines(tt.in, tt.max); got != tt.want {
				t.Errorf("Lines(%q, %d) = %q, want %q", tt.in, tt.max, got, tt.want)
			}
		})
	}
}

func TestTruncate(t *testing.T) {
	tests := []struct {
		name, in string
		max      int
		want     string
	}{
		{"fits", "abc", 3, "abc"},
		{"controls-kept", "a\x1bb", 3, "a\x1bb"},
		{"cut", "abcdef", 4, "abcd…[+2 bytes]"},
		{"rune-boundary", "ab€cd", 4, "ab…[+5 bytes]"},
		{"zero", "abc", 0, "…[+3 bytes]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := termtext.Truncate(tt.in, tt.max); got != tt.want {
				t.Errorf("Truncate(%q, %d) = %q, want %q", tt.in, tt.max, got, tt.want)
			}
		})
	}
}

// FuzzEscape: Escape never panics, never lets a character through that a
// terminal acts on or that Printable refuses, is valid UTF-8, stays within
// max+MarkerMax, leaves short printable ASCII alone, and keeps whatever it
// printed unescaped in the order of the input.
func FuzzEscape(f *testing.F) {
	for _, s := range []string{"", "pypi.org:443", "\x1b[2K\r\nairlock: all checks passed\n\x1b]0;t\x07", "\u009b\u202e\xff", "日本\u200b語", strings.Repeat("\x1b", 300)} {
		f.Add(s, 64)
	}
	f.Fuzz(func(t *testing.T, s string, n int) {
		n %= 4096
		got := termtext.Escape(s, n)
		if !utf8.ValidString(got) {
			t.Fatalf("Escape(%q, %d) = %q: invalid UTF-8", s, n, got)
		}
		for _, r := range got {
			if !termtext.Printable(r) || r < 0x20 || (r >= 0x7f && r <= 0x9f) {
				t.Fatalf("Escape(%q, %d) = %q: contains %U", s, n, got, r)
			}
		}
		if bound := max(n, 0) + termtext.MarkerMax; len(got) > bound {
			t.Fatalf("len(Escape(%q, %d)) = %d, want at most %d", s, n, len(got), bound)
		}
		plain := true
		for i := 0; i < len(s); i++ {
			plain = plain && s[i] >= 0x20 && s[i] < 0x7f
		}
		if plain && len(s) <= n && got != s {
			t.Fatalf("Escape(%q, %d) = %q, want it unchanged", s, n, got)
		}
		if whole := termtext.Escape(s, 1<<30); termtext.AllPrintable(s) != (whole == s) {
			t.Fatalf("AllPrintable(%q) = %v, but Escape gives %q", s, termtext.AllPrintable(s), whole)
		}
		// Without a backslash in the input and nothing cut, the escapes
		// decode back to the input: nothing was lost or reordered.
		if whole := termtext.Escape(s, 1<<30); !strings.Contains(s, `\`) {
			if back, ok := unescape(whole); !ok || back != s {
				t.Fatalf("Escape(%q) = %q decodes to %q (ok %v)", s, whole, back, ok)
			}
		}
	})
}

// unescape decodes the escapes Escape writes.
func unescape(s string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			b.WriteByte(s[i])
			continue
		}
		if i+1 >= len(s) {
			return "", false
		}
		i++
		digits := 0
		switch s[i] {
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'x':
			digits = 2
		case 'u':
			digits = 4
		case 'U':
			digits = 8
		default:
			return "", false
		}
		if digits == 0 {
			continue
		}
		if i+digits >= len(s) {
			return "", false
		}
		v, err := strconv.ParseUint(s[i+1:i+1+digits], 16, 32)
		if err != nil {
			return "", false
		}
		if s[i] == 'x' {
			b.WriteByte(byte(v))
		} else {
			b.WriteRune(rune(v))
		}
		i += digits
	}
	return b.String(), true
}
