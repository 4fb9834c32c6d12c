// Package bench_test holds the benchmark module's import rule: it measures
// airlock through its public packages only, the way a user would build on
// them. An internal package here would let the benchmark re-implement (and
// drift from) what airlock ships, as its hand-written OCI bundle and
// seccomp conversion once did.
package bench_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const airlockModule = "github.com/airlock-sandbox/airlock"

func TestPublicImportsOnly(t *testing.T) {
	fset := token.NewFileSet()
	n := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		n++
		for _, imp := range f.Imports {
			p, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				return err
			}
			rest, ok := strings.CutPrefix(p, airlockModule+"/")
			if ok && (strings.HasPrefix(rest, "internal/") || strings.Contains(rest, "/internal/")) {
				t.Errorf("%s imports %s: the benchmark may use only airlock's public packages; export what it needs or measure through the CLI", fset.Position(imp.Pos()), p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("no Go files found below bench/: run the test from the bench module")
	}
}
