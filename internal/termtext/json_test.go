package termtext_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/internal/termtext"
)

func TestAppendJSON(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"ascii", `{"a":"b c","n":1}`, `{"a":"b c","n":1}`},
		{"encoder-escapes-kept", `"\u001b[2K\r\n"`, `"\u001b[2K\r\n"`},
		{"c1", "\"\u009b31m\u0085\"", `"\u009b31m\u0085"`},
		{"del", "\"a\x7f\"", `"a\u007f"`},
		{"line-sep", "\"\u2028\u2029\"", `"\u2028\u2029"`},
		{"rlo", "\"\u202e\"", `"\u202e"`},
		{"astral-tag", "\"\U000e0041\"", `"\udb40\udc41"`},
		{"invalid-utf8", "\"a\xffb\"", `"a\ufffdb"`},
		{"unicode-kept", `"Grüße 日本 😀"`, `"Grüße 日本 😀"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(termtext.AppendJSON(nil, []byte(tt.in))); got != tt.want {
				t.Errorf("AppendJSON(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// TestJSONSameValue: a value encoding/json writes with C1 controls,
// U+2028/2029, DEL and bidi characters decodes to the same value after
// AppendJSON, and none of them is left raw.
func TestJSONSameValue(t *testing.T) {
	in := map[string]any{
		"target":  "[\x1b[2K\r\nairlock: all checks passed\u009b31m\u202e\u2028\u2029\x7f]:443",
		"c1":      "\u0080\u0085\u009f",
		"k\u009b": []any{"\u200b\ufeff", "\U000e0041", 1.5, true, nil},
	}
	enc, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	got := termtext.AppendJSON(nil, enc)
	checkJSONSafe(t, got)
	var back any
	if err := json.Unmarshal(got, &back); err != nil {
		t.Fatalf("AppendJSON(%s) = %s: not valid JSON: %v", enc, got, err)
	}
	gotJSON, _ := json.Marshal(back)
	if !bytes.Equal(gotJSON, enc) {
		t.Errorf("decoded value changed:\n got %q\nwant %q", gotJSON, enc)
	}
}

// TestJSONWriterSplits writes the same JSON cut at every byte and checks
// that the output never depends on where the cut was.
func TestJSONWriterSplits(t *testing.T) {
	src := []byte("{\"a\":\"x\u009b\u202e😀\U000e0041é\"}\n")
	want := termtext.AppendJSON(nil, src)
	for cut := 0; cut <= len(src); cut++ {
		var b bytes.Buffer
		w := termtext.NewJSONWriter(&b)
		for _, part := range [][]byte{src[:cut], src[cut:]} {
			if n, err := w.Write(part); err != nil || n != len(part) {
				t.Fatalf("cut %d: Write(%q) = %d, %v; want %d, nil", cut, part, n, err, len(part))
			}
		}
		if !bytes.Equal(b.Bytes(), want) {
			t.Errorf("cut %d: wrote %q, want %q", cut, b.Bytes(), want)
		}
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestJSONWriterError(t *testing.T) {
	if n, err := termtext.NewJSONWriter(failWriter{}).Write([]byte(`{}`)); err == nil || n != 0 {
		t.Errorf("Write to a failing writer = %d, %v; want 0 and its error", n, err)
	}
}

// FuzzAppendJSON: for any string encoding/json writes, AppendJSON keeps the
// JSON valid with the same decoded value, leaves nothing raw that a
// terminal acts on, and NewJSONWriter gives the same bytes however the
// text is cut into writes.
func FuzzAppendJSON(f *testing.F) {
	for _, s := range []string{"", "plain", "\x1b]0;t\x07\u009b\u202e\u2028", "\xff\xfe", "😀\U000e0041"} {
		f.Add(s, 3)
	}
	f.Fuzz(func(t *testing.T, s string, cut int) {
		enc, err := json.Marshal(map[string]string{s: s})
		if err != nil {
			t.Fatal(err)
		}
		got := termtext.AppendJSON(nil, enc)
		checkJSONSafe(t, got)
		var a, b map[string]string
		if err := json.Unmarshal(enc, &a); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(got, &b); err != nil {
			t.Fatalf("AppendJSON(%q) = %q: invalid JSON: %v", enc, got, err)
		}
		for k, v := range a {
			if b[k] != v || len(b) != len(a) {
				t.Fatalf("AppendJSON(%q) = %q decodes to %q, want %q", enc, got, b, a)
			}
		}
		if cut < 0 {
			cut = -cut
		}
		cut %= len(enc) + 1
		var buf bytes.Buffer
		w := termtext.NewJSONWriter(&buf)
		w.Write(enc[:cut]) // a bytes.Buffer does not fail
		w.Write(enc[cut:])
		if !bytes.Equal(buf.Bytes(), got) {
			t.Fatalf("NewJSONWriter cut at %d wrote %q, want %q", cut, buf.Bytes(), got)
		}
	})
}

// checkJSONSafe fails when js holds invalid UTF-8, DEL, or a raw non-ASCII
// character that Printable refuses.
func checkJSONSafe(t *testing.T, js []byte) {
	t.Helper()
	if !utf8.Valid(js) {
		t.Fatalf("%q: invalid UTF-8", js)
	}
	for _, r := range string(js) {
		if r == 0x7f || (r >= utf8.RuneSelf && !termtext.Printable(r)) {
			t.Fatalf("%q: %U left raw", js, r)
		}
	}
}
