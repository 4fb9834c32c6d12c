package egress

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// TestScrubBodySplits: every form of a credential is found however the
// body is cut into reads, and a body that fails keeps back what may be
// the start of one.
func TestScrubBodySplits(t *testing.T) {
	s := newScrubber([]Credential{{Value: "Bearer tok-0123456789/+"}})
	for _, form := range []string{"Bearer tok-0123456789/+", "tok-0123456789/+", "Bearer+tok-0123456789%2F%2B", "BEARER TOK-0123456789/+", `tok-0123456789\/+`} {
		body := "a" + form + "b" + form + form + "c"
		want := "a" + Redacted + "b" + Redacted + Redacted + "c"
		for cut := 0; cut <= len(body); cut++ {
			r := &scrubBody{rc: io.NopCloser(io.MultiReader(strings.NewReader(body[:cut]), strings.NewReader(body[cut:]))), s: s}
			got, err := io.ReadAll(r)
			if err != nil || string(got) != want {
				t.Fatalf("form %q cut at %d: %q, %v; want %q", form, cut, got, err, want)
			}
		}
		one := &scrubBody{rc: io.NopCloser(iotest.OneByteReader(strings.NewReader(body))), s: s}
		if got, _ := io.ReadAll(one); string(got) != want {
			t.Errorf("form %q a byte at a time: %q, want %q", form, got, want)
		}
	}
	cut := &scrubBody{rc: io.NopCloser(io.MultiReader(strings.NewReader("ok Bearer tok-0123"), iotest.ErrReader(io.ErrUnexpectedEOF))), s: s}
	got, err := io.ReadAll(cut)
	if !errors.Is(err, io.ErrUnexpectedEOF) || strings.Contains(string(got), "tok-0123") {
		t.Errorf("a body cut inside a form gave %q, %v; want what precedes it and the error", got, err)
	}
}

func BenchmarkScrubBody(b *testing.B) {
	s := newScrubber([]Credential{{Value: "Bearer tok-0123456789abcdef0123456789"}})
	body := bytes.Repeat([]byte("the quick brown fox jumps over the lazy dog; Bearer is a word, so is token. "), 1<<20/76)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		io.Copy(io.Discard, &scrubBody{rc: io.NopCloser(bytes.NewReader(body)), s: s})
	}
}
