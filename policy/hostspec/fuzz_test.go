package hostspec_test

import (
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/policy/hostspec"
)

// FuzzParse checks that Parse never panics and that every accepted entry
// round-trips through its canonical String form.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"example.com", "*.example.com:443", "10.0.0.0/8:1-1024", "[fd00::/8]:443", "bücher.example"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := hostspec.Parse(s)
		if err != nil {
			return
		}
		q, err := hostspec.Parse(p.String())
		if err != nil {
			t.Fatalf("Parse(%q) = %v, want %q (from %q)", p.String(), err, p, s)
		}
		if !q.Equal(p) {
			t.Fatalf("Parse(%q) = %q, want %q (from %q)", p.String(), q, p, s)
		}
	})
}

// FuzzNormalizeHost checks that NormalizeHost never panics, is idempotent,
// and that a normalized name matches itself as an exact pattern.
func FuzzNormalizeHost(f *testing.F) {
	for _, s := range []string{"Example.COM.", "0x7f.1", "[::ffff:127.0.0.1]", "xn--bcher-kva.example", "a@b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out, err := hostspec.NormalizeHost(s)
		if err != nil {
			return
		}
		again, err := hostspec.NormalizeHost(out)
		if err != nil || again != out {
			t.Fatalf("NormalizeHost(%q) = %q, %v, want %q (from %q)", out, again, err, out, s)
		}
		entry := out + ":443"
		if strings.IndexByte(out, ':') >= 0 {
			entry = "[" + out + "]:443"
		}
		p, err := hostspec.Parse(entry)
		if err != nil {
			t.Fatalf("Parse(%q) = %v, want a pattern", entry, err)
		}
		if !p.Match(out, 443) {
			t.Fatalf("Parse(%q).Match(%q, 443) = false, want true", entry, out)
		}
	})
}
