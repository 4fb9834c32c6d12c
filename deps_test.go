// Package airlock_test holds repository-wide checks: the dependency rules
// of STYLE.md §2 (this file), package doc comments and gofmt
// (pkgdoc_test.go). The repository root has no Go package of its own.
package airlock_test

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const module = "github.com/airlock-sandbox/airlock"

// listedPackage is the part of `go list -json` output the rules need.
type listedPackage struct {
	ImportPath string
	Name       string
	Dir        string
	Standard   bool
	DepOnly    bool
	Imports    []string
	Deps       []string
	Error      *struct{ Err string }
}

var (
	listOnce sync.Once
	listed   map[string]*listedPackage // by import path, deps included
	listErr  error
)

// goList runs `go list -deps -json ./...` once per test binary. Without
// -test, Deps and Imports are those of the production build.
func goList(t *testing.T) map[string]*listedPackage {
	t.Helper()
	listOnce.Do(func() {
		out, err := runGo(t, "list", "-e", "-deps", "-json", "./...")
		if err != nil {
			listErr = err
			return
		}
		listed = make(map[string]*listedPackage)
		dec := json.NewDecoder(bytes.NewReader(out))
		for {
			p := new(listedPackage)
			if err := dec.Decode(p); err == io.EOF {
				break
			} else if err != nil {
				listErr = err
				return
			}
			listed[p.ImportPath] = p
		}
	})
	if listErr != nil {
		t.Fatalf("go list: %v", listErr)
	}
	return listed
}

// runGo runs the go command in the repository root with a bounded time.
func runGo(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	ctx, cancel := contextWithTimeout(t, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool(t), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, &cmdError{args: args, err: err, stderr: stderr.String()}
	}
	return out, nil
}

type cmdError struct {
	args   []string
	err    error
	stderr string
}

func (e *cmdError) Error() string {
	return "go " + strings.Join(e.args, " ") + ": " + e.err.Error() + "\n" + e.stderr
}

// goTool returns the go command; go test puts $GOROOT/bin first on PATH.
func goTool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("go command not on PATH: %v", err)
	}
	return p
}

// ours reports whether path is a package of this module.
func ours(path string) bool { return path == module || strings.HasPrefix(path, module+"/") }

// rel returns path relative to the module ("policy/hostspec"); "" for the root.
func rel(path string) string {
	return strings.TrimPrefix(strings.TrimPrefix(path, module), "/")
}

// under reports whether the module package path is dir or below it.
func under(path, dir string) bool {
	r := rel(path)
	return ours(path) && (r == dir || strings.HasPrefix(r, dir+"/"))
}

// modulePackages returns this module's packages matched by ./..., sorted.
func modulePackages(t *testing.T) []*listedPackage {
	t.Helper()
	var pkgs []*listedPackage
	for _, p := range goList(t) {
		if !ours(p.ImportPath) || p.DepOnly {
			continue
		}
		if p.Error != nil {
			t.Errorf("go list %s: %s", p.ImportPath, p.Error.Err)
			continue
		}
		if rel(p.ImportPath) == "" { // this test-only package
			continue
		}
		pkgs = append(pkgs, p)
	}
	slices.SortFunc(pkgs, func(a, b *listedPackage) int { return strings.Compare(a.ImportPath, b.ImportPath) })
	if len(pkgs) == 0 {
		t.Fatal("go list ./... found none of this module's packages")
	}
	return pkgs
}

func isStd(t *testing.T, path string) bool {
	t.Helper()
	p, ok := goList(t)[path]
	if !ok {
		t.Fatalf("go list did not report dependency %s", path)
	}
	return p.Standard
}

// TestPolicyImports checks that policy/... is pure data: the standard
// library (never the OS-facing parts) plus the YAML parser.
func TestPolicyImports(t *testing.T) {
	forbiddenDirect := []string{"os", "os/exec", "syscall", "net/http", "log"}
	forbiddenAnywhere := []string{"os/exec", "net/http"}
	seen := false
	for _, p := range modulePackages(t) {
		if !under(p.ImportPath, "policy") {
			continue
		}
		seen = true
		for _, imp := range p.Imports {
			if slices.Contains(forbiddenDirect, imp) || imp == "golang.org/x/sys" || strings.HasPrefix(imp, "golang.org/x/sys/") {
				t.Errorf("%s imports %s; policy packages must not touch OS APIs", rel(p.ImportPath), imp)
			}
		}
		for _, d := range p.Deps {
			switch {
			case slices.Contains(forbiddenAnywhere, d):
				t.Errorf("%s depends on %s (transitively); policy packages must not reach it", rel(p.ImportPath), d)
			case under(d, "policy"), d == "go.yaml.in/yaml/v3":
			case ours(d):
				t.Errorf("%s depends on %s; policy packages import only policy/...", rel(p.ImportPath), d)
			case !isStd(t, d):
				t.Errorf("%s depends on %s; policy packages import only the standard library and go.yaml.in/yaml/v3", rel(p.ImportPath), d)
			}
		}
	}
	if !seen {
		t.Fatal("no policy packages found")
	}
}

// TestModelImports checks that audit and internal/plan import only
// policy/... and the standard library.
func TestModelImports(t *testing.T) {
	for _, p := range modulePackages(t) {
		r := rel(p.ImportPath)
		if r != "audit" && r != "internal/plan" {
			continue
		}
		for _, imp := range p.Imports {
			if !under(imp, "policy") && !isStd(t, imp) {
				t.Errorf("%s imports %s; it may import only policy/... and the standard library", r, imp)
			}
		}
	}
}

// TestEnforceImports checks that the enforcement packages never reach
// the network-facing layers, not even through another package.
func TestEnforceImports(t *testing.T) {
	for _, p := range modulePackages(t) {
		if !under(p.ImportPath, "internal/enforce") {
			continue
		}
		for _, d := range p.Deps {
			if d == "net/http" || under(d, "egress") || under(d, "server") || under(d, "mcp") {
				t.Errorf("%s depends on %s; internal/enforce must not reach net/http, egress, server or mcp", rel(p.ImportPath), d)
			}
		}
	}
}

// TestFrontendImports checks that exports and network-facing packages
// never reach the enforcement packages, and that the Kubernetes types and
// the MCP SDK stay in the one package each that needs them.
func TestFrontendImports(t *testing.T) {
	for _, p := range modulePackages(t) {
		r := rel(p.ImportPath)
		if under(p.ImportPath, "export") || under(p.ImportPath, "egress") || under(p.ImportPath, "server") || under(p.ImportPath, "mcp") {
			for _, d := range p.Deps {
				if under(d, "internal/enforce") {
					t.Errorf("%s depends on %s; export, egress, server and mcp must not reach internal/enforce", r, d)
				}
			}
		}
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, "k8s.io/") && !under(p.ImportPath, "export/k8s") {
				t.Errorf("%s imports %s; only export/k8s imports the Kubernetes types", r, imp)
			}
			if strings.HasPrefix(imp, "github.com/modelcontextprotocol/") && !under(p.ImportPath, "mcp") {
				t.Errorf("%s imports %s; only mcp imports the MCP SDK", r, imp)
			}
		}
	}
}

// TestNoTestingInProduction checks that no production package links the
// testing package, the test kit, or a fake package (xxxtest).
func TestNoTestingInProduction(t *testing.T) {
	isKit := func(path string) bool {
		return ours(path) && (under(path, "internal/airtest") || strings.HasSuffix(path, "test"))
	}
	for _, p := range modulePackages(t) {
		if isKit(p.ImportPath) {
			continue
		}
		for _, d := range p.Deps {
			if d == "testing" || isKit(d) {
				t.Errorf("%s depends on %s; production packages must not link test code", rel(p.ImportPath), d)
			}
		}
	}
}

// TestUnsafeFileNames checks that only *_unsafe.go files import unsafe, so
// that every use of it is easy to find and review.
func TestUnsafeFileNames(t *testing.T) {
	fset := token.NewFileSet()
	for _, path := range goSourceFiles(t) {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly|parser.ParseComments)
		if err != nil {
			t.Errorf("parse %s: %v", path, err)
			continue
		}
		if buildIgnored(f) {
			continue
		}
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == "unsafe" && !strings.HasSuffix(path, "_unsafe.go") {
				t.Errorf("%s imports unsafe; rename it to *_unsafe.go", path)
			}
		}
	}
}

// TestStaticBinary checks that airlock builds without cgo into a binary
// that needs no dynamic loader and no shared library.
func TestStaticBinary(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skipf("the ELF check runs on linux; GOOS is %s", runtime.GOOS)
	}
	bin := filepath.Join(t.TempDir(), "airlock")
	ctx, cancel := contextWithTimeout(t, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool(t), "build", "-o", bin, "./cmd/airlock")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("CGO_ENABLED=0 go build ./cmd/airlock: %v\n%s", err, out)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			t.Error("airlock has a PT_INTERP program header: it needs a dynamic loader")
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		t.Fatalf("read DT_NEEDED: %v", err)
	}
	if len(libs) > 0 {
		t.Errorf("airlock needs shared libraries (DT_NEEDED) %v; it must be static", libs)
	}
}

// goSourceFiles returns every .go file of the module, as a path relative
// to the root, skipping what the go command skips (testdata, and
// directories starting with "." or "_") and nested modules.
func goSourceFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path == "." {
				return nil
			}
			if name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".go") && !strings.HasPrefix(name, ".") && !strings.HasPrefix(name, "_") && d.Type().IsRegular() {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk the repository: %v", err)
	}
	return files
}

// buildIgnored reports whether the file carries //go:build ignore (a
// generator run with go run, not part of any package).
func buildIgnored(f *ast.File) bool {
	for _, cg := range f.Comments {
		if cg.Pos() >= f.Package {
			break
		}
		for _, c := range cg.List {
			if strings.TrimSpace(c.Text) == "//go:build ignore" {
				return true
			}
		}
	}
	return false
}

// contextWithTimeout bounds a child process by d and by the test's life.
func contextWithTimeout(t *testing.T, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(t.Context(), d)
}
