package policy_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/airlock-sandbox/airlock/policy"
)

// TestExamples parses every examples/*.yaml the way `airlock policy check`
// does: relative paths against the file's folder.
func TestExamples(t *testing.T) {
	dir, err := filepath.Abs("../examples")
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 3 {
		t.Fatalf("found %d examples in %s, want at least 3", len(files), dir)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			p, err := policy.Parse(data, policy.ParseOptions{File: f, BaseDir: dir})
			if err != nil {
				t.Fatalf("Parse(%s) = %v", f, err)
			}
			t.Log(p.Summary())
		})
	}
}

func TestExampleDataAnalysis(t *testing.T) {
	dir, err := filepath.Abs("../examples")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "data-analysis.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.Parse(data, policy.ParseOptions{BaseDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.CheckRead("/", filepath.Join(dir, "data/x.csv")); err != nil {
		t.Errorf("CheckRead(data/x.csv) = %v, want nil", err)
	}
	if err := p.CheckWrite("/", filepath.Join(dir, "out/r.png")); err != nil {
		t.Errorf("CheckWrite(out/r.png) = %v, want nil", err)
	}
	if err := p.CheckWrite("/", filepath.Join(dir, "data/x.csv")); err == nil {
		t.Errorf("CheckWrite(data/x.csv) = nil, want a denial")
	}
	if err := p.CheckTool("python3"); err != nil {
		t.Errorf("CheckTool(python3) = %v, want nil", err)
	}
}
