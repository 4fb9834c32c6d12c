package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/airtest"
)

// TestDataAnalysisExample runs examples/data-analysis.yaml as its comment
// says, on a copy of the examples folder as a fresh clone has it: policy
// check passes on this host, and the run starts in examples/data and
// writes its totals to examples/out.
func TestDataAnalysisExample(t *testing.T) {
	airtest.RequireUserNS(t)
	airtest.RequireLandlockABI(t, 4)
	airtest.RequireBinary(t, "/usr/bin/python3")
	ex := filepath.Join(t.TempDir(), "examples")
	for _, f := range []string{"data-analysis.yaml", "data/sales.csv", "data/analyze.py", "out/.gitignore"} {
		b, err := os.ReadFile(filepath.Join("../../examples", f))
		if err != nil {
			t.Fatalf("the example's %s: %v", f, err)
		}
		dst := filepath.Join(ex, f)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if r := airlock(t, ex, "policy", "check", "data-analysis.yaml"); r.code != 0 {
		t.Fatalf("policy check data-analysis.yaml: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r := airlock(t, filepath.Join(ex, "data"), "run", "--policy", "../data-analysis.yaml", "--", "python3", "analyze.py")
	if r.code != 0 {
		t.Fatalf("the example's run: exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	got, err := os.ReadFile(filepath.Join(ex, "out", "summary.csv"))
	if want := "month,total\n2024-01,200\n2024-02,225\n2024-03,250\n"; err != nil || strings.ReplaceAll(string(got), "\r\n", "\n") != want {
		t.Errorf("out/summary.csv = %q, %v; want %q", got, err, want)
	}
}
