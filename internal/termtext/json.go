package termtext

import (
	"io"
	"unicode/utf8"
)

// AppendJSON appends the JSON text src to dst with DEL and every non-ASCII
// character that Printable refuses written as a \u escape (a UTF-16
// surrogate pair above U+FFFF), and each byte that is not valid UTF-8 as
// \ufffd, which is what a JSON decoder makes of it. Outside strings, valid
// JSON holds only ASCII, and inside them a \u escape decodes to the same
// character, so valid JSON stays valid with the same value. Every other
// byte is copied: encoding/json already escapes C0 controls, U+2028 and
// U+2029, but leaves C1 controls, DEL and bidi overrides raw.
func AppendJSON(dst, src []byte) []byte {
	for i := 0; i < len(src); {
		c := src[i]
		if c < utf8.RuneSelf {
			if c == 0x7f {
				dst = append(dst, `\u007f`...)
			} else {
				dst = append(dst, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRune(src[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, `\ufffd`...)
		case Printable(r):
			dst = append(dst, src[i:i+size]...)
		case r <= 0xffff:
			dst = appendHex(append(dst, `\u`...), uint32(r), 4)
		default:
			r -= 0x10000
			dst = appendHex(append(dst, `\u`...), uint32(0xd800+(r>>10)), 4)
			dst = appendHex(append(dst, `\u`...), uint32(0xdc00+(r&0x3ff)), 4)
		}
		i += size
	}
	return dst
}

// NewJSONWriter returns a writer that passes JSON text on to w through
// AppendJSON. A UTF-8 sequence split across two writes is held until the
// rest arrives, so the output does not depend on how the text was cut
// into writes. Write reports len(p) written when w accepts the escaped
// text, and w's error otherwise. It is not safe for concurrent use.
func NewJSONWriter(w io.Writer) io.Writer { return &jsonWriter{w: w} }

type jsonWriter struct {
	w     io.Writer
	carry []byte // the start of an incomplete UTF-8 sequence, at most 3 bytes
	buf   []byte // reused output buffer
}

func (j *jsonWriter) Write(p []byte) (int, error) {
	in := p
	if len(j.carry) > 0 {
		in = append(j.carry, p...)
		j.carry = nil
	}
	cut := len(in)
	for k := 1; k < utf8.UTFMax && k <= len(in); k++ {
		c := in[len(in)-k]
		if c < utf8.RuneSelf {
			break
		}
		if utf8.RuneStart(c) {
			if !utf8.FullRune(in[len(in)-k:]) {
				cut = len(in) - k
			}
			break
		}
	}
	j.buf = AppendJSON(j.buf[:0], in[:cut])
	if cut < len(in) {
		j.carry = append([]byte(nil), in[cut:]...)
	}
	if _, err := j.w.Write(j.buf); err != nil {
		return 0, err
	}
	return len(p), nil
}
