package termtext

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Bounds, in bytes of output.
const (
	// FieldMax bounds one field inside a line airlock prints: a target,
	// a path, a host name, a message.
	FieldMax = 1024
	// LineMax bounds one line of multi-line text (Lines): a line of the
	// plan `airlock explain` prints, an error message.
	LineMax = 8192
	// MarkerMax is the longest cut marker: "…[+N bytes]" with N of up
	// to 20 digits. Escape(s, max) is never longer than max+MarkerMax.
	MarkerMax = len("…[+") + 20 + len(" bytes]")
)

// Printable reports whether a terminal shows r as itself, so that it may
// be printed unescaped: printable ASCII (space included), or a letter,
// mark, number, punctuation or symbol (strconv.IsPrint) that is not a
// variation selector or another default-ignorable character (the Hangul
// fillers, U+034F). Everything else is refused: C0 and C1 controls, DEL,
// TAB, the format characters (bidi embeddings, overrides and isolates,
// zero-width spaces and joiners, LRM/RLM, U+FEFF, soft hyphen), the line
// and paragraph separators, spaces other than U+0020, private use and
// unassigned code points.
func Printable(r rune) bool {
	if r < utf8.RuneSelf {
		return r >= 0x20 && r < 0x7f
	}
	return strconv.IsPrint(r) &&
		!unicode.Is(unicode.Variation_Selector, r) &&
		!unicode.Is(unicode.Other_Default_Ignorable_Code_Point, r)
}

// Field returns Escape(s, FieldMax).
func Field(s string) string { return Escape(s, FieldMax) }

// Escape returns s with every character that Printable refuses replaced by
// a visible escape: \n, \r and \t for those three, \xHH for the other
// ASCII controls and for each byte that is not valid UTF-8, \uHHHH or
// \UHHHHHHHH for a refused code point. The result is at most max bytes
// (max < 0 counts as 0), cut at an escape or character boundary, plus a
// marker "…[+N bytes]" naming how many bytes of s were left out. Printable
// ASCII text of at most max bytes comes back unchanged. A backslash in s
// stays as it is, so text that already looks like an escape is ambiguous;
// it can never be a control character.
func Escape(s string, max int) string {
	if max < 0 {
		max = 0
	}
	if len(s) <= max && plainASCII(s) {
		return s
	}
	var b strings.Builder
	b.Grow(min(len(s), max) + 16)
	var esc [10]byte // the longest escape is \UHHHHHHHH
	for i := 0; i < len(s); {
		piece, size := next(s[i:], esc[:0])
		if b.Len()+len(piece) > max {
			b.WriteString(marker(len(s) - i))
			return b.String()
		}
		b.Write(piece)
		i += size
	}
	return b.String()
}

// next returns the output for the character at the start of s, appended
// to esc when it needs escaping, and how many bytes of s it consumed.
func next(s string, esc []byte) ([]byte, int) {
	c := s[0]
	if c < utf8.RuneSelf {
		switch {
		case c >= 0x20 && c < 0x7f:
			return append(esc, c), 1
		case c == '\n':
			return append(esc, `\n`...), 1
		case c == '\r':
			return append(esc, `\r`...), 1
		case c == '\t':
			return append(esc, `\t`...), 1
		}
		return appendHex(append(esc, `\x`...), uint32(c), 2), 1
	}
	r, size := utf8.DecodeRuneInString(s)
	switch {
	case r == utf8.RuneError && size == 1:
		return appendHex(append(esc, `\x`...), uint32(c), 2), 1
	case Printable(r):
		return append(esc, s[:size]...), size
	case r <= 0xffff:
		return appendHex(append(esc, `\u`...), uint32(r), 4), size
	}
	return appendHex(append(esc, `\U`...), uint32(r), 8), size
}

// Lines escapes each line of s with Escape(line, max) and joins them with
// the newlines kept: for multi-line text that airlock formatted itself
// around fields it did not check (a plan, a host report).
func Lines(s string, max int) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = Escape(l, max)
	}
	return strings.Join(lines, "\n")
}

// Truncate returns s cut to at most max bytes (max < 0 counts as 0) at a
// UTF-8 character boundary, with the marker of Escape when anything was
// cut, and s itself otherwise. It escapes nothing: it is for output that
// quotes on its own, such as slog's TextHandler.
func Truncate(s string, max int) string {
	if max < 0 {
		max = 0
	}
	if len(s) <= max {
		return s
	}
	j := max
	for j > 0 && !utf8.RuneStart(s[j]) {
		j--
	}
	return s[:j] + marker(len(s)-j)
}

func marker(cut int) string {
	if cut == 1 {
		return "…[+1 byte]"
	}
	return "…[+" + strconv.Itoa(cut) + " bytes]"
}

// AllPrintable reports whether s is valid UTF-8 and Printable accepts each
// of its characters: whether Escape leaves it unchanged, at any length.
// Names a person will read and type (file names that cross an API) are
// accepted only when it holds.
func AllPrintable(s string) bool {
	if plainASCII(s) {
		return true
	}
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 || !Printable(r) {
			return false
		}
		i += size
	}
	return true
}

// plainASCII reports whether s is printable ASCII only.
func plainASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] >= 0x7f {
			return false
		}
	}
	return true
}

// appendHex appends v as digits lowercase hex digits.
func appendHex(dst []byte, v uint32, digits int) []byte {
	const hex = "0123456789abcdef"
	for shift := 4 * (digits - 1); shift >= 0; shift -= 4 {
		dst = append(dst, hex[(v>>uint(shift))&0xf])
	}
	return dst
}
