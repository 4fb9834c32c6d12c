package policy_test

import (
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/pathspec"
)

// FuzzParse checks that Parse never panics, that every policy it accepts
// holds only canonical grants, and that each one round-trips through
// MarshalJSON to an Equal policy. Seeds are in testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	f.Add([]byte(fullPolicy))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := policy.Parse(data, policy.ParseOptions{File: "f.yaml", BaseDir: "/base"})
		if err != nil {
			if p != nil {
				t.Fatalf("Parse returned a policy and an error %v", err)
			}
			return
		}
		for _, path := range append(p.FSRead(), p.FSWrite()...) {
			if path == "/" || pathspec.Clean(path) != path || pathspec.Within("/proc", path) || pathspec.Within("/sys", path) {
				t.Fatalf("Parse accepted grant %q", path)
			}
		}
		for _, e := range p.Env() {
			if strings.EqualFold(e.Name, "HTTP_PROXY") || strings.EqualFold(e.Name, "HTTPS_PROXY") {
				t.Fatalf("Parse accepted env %q", e.Name)
			}
		}
		if err := policy.CheckLimits(p.Budget()); err != nil {
			t.Fatalf("Parse accepted budget %+v: %v", p.Budget(), err)
		}
		js, err := p.MarshalJSON()
		if err != nil {
			t.Fatalf("MarshalJSON = %v", err)
		}
		q, err := policy.Parse(js, policy.ParseOptions{})
		if err != nil {
			t.Fatalf("Parse(MarshalJSON(p)) = %v\ninput: %q\njson: %s", err, data, js)
		}
		if !policy.Equal(p, q) {
			t.Fatalf("Parse(MarshalJSON(p)) = %s, want %s\njson: %s", q.Summary(), p.Summary(), js)
		}
		_ = p.Summary()
	})
}
