package airlock_test

import (
	"bytes"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestPackageDocs checks that every package has a doc comment of the
// form "Package name ..." ("Command name ..." for a main package, named
// after its directory), written once (STYLE.md §6).
func TestPackageDocs(t *testing.T) {
	byDir := make(map[string][]string)
	for _, path := range goSourceFiles(t) {
		if !strings.HasSuffix(path, "_test.go") {
			byDir[filepath.Dir(path)] = append(byDir[filepath.Dir(path)], path)
		}
	}
	if len(byDir) == 0 {
		t.Fatal("found no Go packages")
	}
	dirs := make([]string, 0, len(byDir))
	for dir := range byDir {
		dirs = append(dirs, dir)
	}
	slices.Sort(dirs)
	fset := token.NewFileSet()
	for _, dir := range dirs {
		files := make(map[string]*ast.File)
		names := make(map[string]bool)
		for _, path := range byDir[dir] {
			f, err := parser.ParseFile(fset, path, nil, parser.PackageClauseOnly|parser.ParseComments)
			if err != nil {
				t.Errorf("parse %s: %v", path, err)
				continue
			}
			if buildIgnored(f) {
				continue
			}
			files[path] = f
			names[f.Name.Name] = true
		}
		if len(files) == 0 {
			continue
		}
		if len(names) != 1 {
			t.Errorf("%s: files declare several packages %v", dir, keys(names))
			continue
		}
		for _, msg := range checkPackageDoc(dir, files) {
			t.Error(msg)
		}
	}
}

// checkPackageDoc returns what is wrong with the doc comments of the
// package made of files (path → file, all in dir, one package name).
func checkPackageDoc(dir string, files map[string]*ast.File) []string {
	var bad []string
	var docs []string // files that carry a package doc
	for path, f := range files {
		if f.Doc == nil {
			continue
		}
		docs = append(docs, path)
		want := "Package " + f.Name.Name
		if f.Name.Name == "main" {
			want = "Command " + filepath.Base(dir)
		}
		text := f.Doc.Text()
		if !strings.HasPrefix(text, want+" ") && !strings.HasPrefix(text, want+"\n") {
			first, _, _ := strings.Cut(text, "\n")
			bad = append(bad, path+": package doc must start with \""+want+" \", got \""+first+"\"")
		}
	}
	slices.Sort(docs)
	switch {
	case len(docs) == 0:
		bad = append(bad, dir+": package has no doc comment (write one in doc.go or above a package clause)")
	case len(docs) > 1:
		bad = append(bad, dir+": package doc comment appears in several files "+strings.Join(docs, ", ")+"; keep one")
	}
	return bad
}

func keys(m map[string]bool) []string {
	var s []string
	for k := range m {
		s = append(s, k)
	}
	slices.Sort(s)
	return s
}

// TestCheckPackageDoc checks the doc rules on hand-written packages, so
// that a rule that can no longer fail is noticed.
func TestCheckPackageDoc(t *testing.T) {
	tests := []struct {
		name    string
		dir     string
		files   map[string]string // base name → source
		wantBad bool
	}{
		{"ok", "policy/pathspec", map[string]string{"a.go": "// Package pathspec cleans paths.\npackage pathspec\n", "b.go": "package pathspec\n"}, false},
		{"ok-doc-go", "audit", map[string]string{"doc.go": "// Package audit records.\n//\n// More.\npackage audit\n"}, false},
		{"ok-command", "cmd/airlock", map[string]string{"main.go": "// Command airlock runs.\npackage main\n"}, false},
		{"ok-build-tag", "sandbox", map[string]string{"a_linux.go": "//go:build linux\n\n// Package sandbox runs.\npackage sandbox\n"}, false},
		{"missing", "policy", map[string]string{"a.go": "package policy\n", "b.go": "// not a doc\n\npackage policy\n"}, true},
		{"wrong-name", "policy", map[string]string{"a.go": "// Package policies parses.\npackage policy\n"}, true},
		{"no-package-word", "policy", map[string]string{"a.go": "// This package parses.\npackage policy\n"}, true},
		{"main-as-package", "cmd/airlock", map[string]string{"main.go": "// Package main runs.\npackage main\n"}, true},
		{"twice", "audit", map[string]string{"a.go": "// Package audit records.\npackage audit\n", "b.go": "// Package audit again.\npackage audit\n"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fset := token.NewFileSet()
			files := make(map[string]*ast.File)
			for base, src := range tt.files {
				path := filepath.Join(tt.dir, base)
				f, err := parser.ParseFile(fset, path, src, parser.PackageClauseOnly|parser.ParseComments)
				if err != nil {
					t.Fatal(err)
				}
				files[path] = f
			}
			got := checkPackageDoc(tt.dir, files)
			if (len(got) > 0) != tt.wantBad {
				t.Errorf("checkPackageDoc(%s, %v) = %q, want problems: %v", tt.dir, tt.files, got, tt.wantBad)
			}
		})
	}
}

// TestGofmt checks that every tracked Go file is formatted as gofmt
// formats it (go/format is gofmt's printer, so no gofmt binary is needed).
func TestGofmt(t *testing.T) {
	var unformatted []string
	files := trackedGoFiles(t)
	if len(files) == 0 {
		t.Fatal("found no Go files")
	}
	for _, path := range files {
		src, err := os.ReadFile(path)
		if os.IsNotExist(err) {
			continue // deleted in the working tree, not yet in the index
		}
		if err != nil {
			t.Fatal(err)
		}
		got, err := format.Source(src)
		if err != nil {
			t.Errorf("gofmt %s: %v", path, err)
			continue
		}
		if !bytes.Equal(got, src) {
			unformatted = append(unformatted, path)
		}
	}
	if len(unformatted) > 0 {
		t.Errorf("gofmt -l lists these files; run gofmt -w on them:\n\t%s", strings.Join(unformatted, "\n\t"))
	}
}

// trackedGoFiles lists the .go files git tracks, outside testdata; it
// walks the tree when git or the repository is unavailable (a module
// download, a source tarball).
func trackedGoFiles(t *testing.T) []string {
	t.Helper()
	if git, err := exec.LookPath("git"); err == nil {
		ctx, cancel := contextWithTimeout(t, 60*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, git, "ls-files", "-z", "--", "*.go").Output()
		if err == nil {
			var files []string
			for _, p := range strings.Split(string(out), "\x00") {
				if p != "" && !slices.Contains(strings.Split(p, "/"), "testdata") {
					files = append(files, filepath.FromSlash(p))
				}
			}
			return files
		}
		t.Logf("git ls-files: %v; walking the tree instead", err)
	}
	return goSourceFiles(t)
}

// TestGoLineAllowsEveryPatch: the go line of go.mod names a minor release
// (x.y or x.y.0), so a module that imports airlock is not forced onto the
// newest patch release of the toolchain.
func TestGoLineAllowsEveryPatch(t *testing.T) {
	for _, f := range []string{"go.mod", "bench/go.mod"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			v, ok := strings.CutPrefix(line, "go ")
			if !ok {
				continue
			}
			if parts := strings.Split(v, "."); len(parts) > 2 && parts[2] != "0" {
				t.Errorf("%s: go %s forces patch release %s on every importer: write go %s.%s.0", f, v, v, parts[0], parts[1])
			}
		}
	}
}
