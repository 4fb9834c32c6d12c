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

// graph is the import information the rules look at. std reports whether
// an import path belongs to the standard library.
type graph struct {
	pkgs []*listedPackage // this module's packages, production build
	std  func(path string) bool
}

func realGraph(t *testing.T) graph {
	t.Helper()
	all := goList(t)
	return graph{pkgs: modulePackages(t), std: func(path string) bool {
		p, ok := all[path]
		return ok && p.Standard // unknown paths count as outside std
	}}
}

// rule is one dependency rule of STYLE.md §2. check returns one message
// per violation.
type rule struct {
	name  string
	check func(g graph) []string
}

var rules = []rule{
	{"policy-is-pure", checkPolicy},
	{"model-imports", checkModel},
	{"enforce-stays-offline", checkEnforce},
	{"frontends-skip-enforce", checkFrontends},
	{"no-test-code-in-production", checkNoTestCode},
}

// TestDependencyRules applies every rule to this module.
func TestDependencyRules(t *testing.T) {
	g := realGraph(t)
	for _, want := range []string{"policy", "audit", "plan", "internal/enforce/nsinit", "cmd/airlock"} {
		if !slices.ContainsFunc(g.pkgs, func(p *listedPackage) bool { return rel(p.ImportPath) == want }) {
			t.Errorf("package %s not found: the rules about it check nothing", want)
		}
	}
	for _, r := range rules {
		t.Run(r.name, func(t *testing.T) {
			for _, msg := range r.check(g) {
				t.Error(msg)
			}
		})
	}
}

// TestDependencyRulesCatch feeds each rule a module that breaks it, so
// that a rule that can no longer fail is noticed.
func TestDependencyRulesCatch(t *testing.T) {
	std := func(path string) bool { return !strings.Contains(strings.Split(path, "/")[0], ".") }
	m := func(r string) string { return module + "/" + r }
	pkg := func(r string, imports, deps []string) *listedPackage {
		return &listedPackage{ImportPath: m(r), Imports: imports, Deps: deps}
	}
	tests := []struct {
		rule string
		pkg  *listedPackage
	}{
		{"policy-is-pure", pkg("policy", []string{"os"}, []string{"os"})},
		{"policy-is-pure", pkg("policy/hostspec", []string{"log"}, []string{"log"})},
		{"policy-is-pure", pkg("policy/pathspec", []string{"golang.org/x/sys/unix"}, []string{"golang.org/x/sys/unix"})},
		{"policy-is-pure", pkg("policy/budget", []string{m("audit")}, []string{m("audit")})},
		{"policy-is-pure", pkg("policy", []string{"example.com/x"}, []string{"example.com/y"})},
		{"policy-is-pure", pkg("policy", []string{"net/url"}, []string{"net/http"})},
		{"model-imports", pkg("audit", []string{"go.yaml.in/yaml/v3"}, nil)},
		{"model-imports", pkg("plan", []string{m("internal/enforce/mount")}, nil)},
		{"enforce-stays-offline", pkg("internal/enforce/mount", nil, []string{"net/http"})},
		{"enforce-stays-offline", pkg("internal/enforce/nsinit", nil, []string{m("egress")})},
		{"enforce-stays-offline", pkg("internal/enforce/seccomp", nil, []string{m("server/api")})},
		{"frontends-skip-enforce", pkg("egress", nil, []string{m("internal/enforce/netns")})},
		{"frontends-skip-enforce", pkg("export/oci", nil, []string{m("internal/enforce/mount")})},
		{"frontends-skip-enforce", pkg("export/oci", []string{m("internal/enforce/seccomp")}, []string{m("internal/enforce/seccomp")})},
		{"frontends-skip-enforce", pkg("egress", nil, []string{m("internal/enforce/seccomp")})},
		{"frontends-skip-enforce", pkg("sandbox", []string{"k8s.io/api/core/v1"}, nil)},
		{"frontends-skip-enforce", pkg("server", []string{"github.com/modelcontextprotocol/go-sdk/mcp"}, nil)},
		{"no-test-code-in-production", pkg("sandbox", nil, []string{"testing"})},
		{"no-test-code-in-production", pkg("cmd/airlock", nil, []string{m("internal/airtest")})},
		{"no-test-code-in-production", pkg("server", nil, []string{m("egress/egresstest")})},
	}
	for _, tt := range tests {
		t.Run(tt.rule+"/"+rel(tt.pkg.ImportPath), func(t *testing.T) {
			i := slices.IndexFunc(rules, func(r rule) bool { return r.name == tt.rule })
			if i < 0 {
				t.Fatalf("no rule %q", tt.rule)
			}
			if got := rules[i].check(graph{pkgs: []*listedPackage{tt.pkg}, std: std}); len(got) == 0 {
				t.Errorf("rule %s accepts %s importing %v (deps %v)", tt.rule, rel(tt.pkg.ImportPath), tt.pkg.Imports, tt.pkg.Deps)
			}
		})
	}
	// And the allowed shapes pass.
	ok := []*listedPackage{
		pkg("policy", []string{"fmt", "go.yaml.in/yaml/v3", m("policy/hostspec")}, []string{"fmt", "os", "syscall", "go.yaml.in/yaml/v3", m("policy/hostspec")}),
		pkg("plan", []string{"sort", m("policy")}, []string{"go.yaml.in/yaml/v3", m("policy")}),
		pkg("internal/enforce/nsinit", nil, []string{m("internal/enforce/mount"), m("plan")}),
		pkg("export/k8s", []string{"k8s.io/api/core/v1", m("export/oci")}, []string{m("plan"), m("export/oci")}),
		pkg("internal/airtest", nil, []string{"testing"}),
	}
	for _, r := range rules {
		if got := r.check(graph{pkgs: ok, std: std}); len(got) > 0 {
			t.Errorf("rule %s rejects an allowed module: %v", r.name, got)
		}
	}
}

// checkPolicy: policy/... is pure data. It imports only the standard
// library (never the OS-facing parts), other policy packages and the YAML
// parser.
func checkPolicy(g graph) []string {
	forbiddenDirect := []string{"os", "os/exec", "syscall", "net/http", "log"}
	forbiddenAnywhere := []string{"os/exec", "net/http"} // fmt reaches os and syscall, nothing reaches these
	var bad []string
	for _, p := range g.pkgs {
		if !under(p.ImportPath, "policy") {
			continue
		}
		r := rel(p.ImportPath)
		for _, imp := range p.Imports {
			if slices.Contains(forbiddenDirect, imp) || imp == "golang.org/x/sys" || strings.HasPrefix(imp, "golang.org/x/sys/") {
				bad = append(bad, r+" imports "+imp+"; policy packages must not touch OS APIs")
			}
		}
		for _, d := range p.Deps {
			switch {
			case slices.Contains(forbiddenAnywhere, d):
				bad = append(bad, r+" depends on "+d+" (transitively); policy packages must not reach it")
			case under(d, "policy"), d == "go.yaml.in/yaml/v3":
			case ours(d):
				bad = append(bad, r+" depends on "+d+"; policy packages import only policy/...")
			case !g.std(d):
				bad = append(bad, r+" depends on "+d+"; policy packages import only the standard library and go.yaml.in/yaml/v3")
			}
		}
	}
	return bad
}

// checkModel: audit and plan import only policy/... and the
// standard library.
func checkModel(g graph) []string {
	var bad []string
	for _, p := range g.pkgs {
		r := rel(p.ImportPath)
		if r != "audit" && r != "plan" {
			continue
		}
		for _, imp := range p.Imports {
			if !under(imp, "policy") && (ours(imp) || !g.std(imp)) {
				bad = append(bad, r+" imports "+imp+"; it may import only policy/... and the standard library")
			}
		}
	}
	return bad
}

// checkEnforce: the enforcement packages never reach the network-facing
// layers, not even through another package.
func checkEnforce(g graph) []string {
	var bad []string
	for _, p := range g.pkgs {
		if !under(p.ImportPath, "internal/enforce") {
			continue
		}
		for _, d := range p.Deps {
			if d == "net/http" || under(d, "egress") || under(d, "server") || under(d, "mcp") {
				bad = append(bad, rel(p.ImportPath)+" depends on "+d+"; internal/enforce must not reach net/http, egress, server or mcp")
			}
		}
	}
	return bad
}

// checkFrontends: exports and network-facing packages never reach the
// enforcement packages, and the Kubernetes types and the MCP SDK stay in
// the one package each that needs them.
func checkFrontends(g graph) []string {
	var bad []string
	for _, p := range g.pkgs {
		r := rel(p.ImportPath)
		if under(p.ImportPath, "export") || under(p.ImportPath, "egress") || under(p.ImportPath, "server") || under(p.ImportPath, "mcp") {
			for _, d := range p.Deps {
				if under(d, "internal/enforce") {
					bad = append(bad, r+" depends on "+d+"; export, egress, server and mcp must not reach internal/enforce")
				}
			}
		}
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, "k8s.io/") && !under(p.ImportPath, "export/k8s") {
				bad = append(bad, r+" imports "+imp+"; only export/k8s imports the Kubernetes types")
			}
			if strings.HasPrefix(imp, "github.com/modelcontextprotocol/") && !under(p.ImportPath, "mcp") {
				bad = append(bad, r+" imports "+imp+"; only mcp imports the MCP SDK")
			}
		}
	}
	return bad
}

// checkNoTestCode: no production package links the testing package, the
// test kit, or a fake package (xxxtest).
func checkNoTestCode(g graph) []string {
	isKit := func(path string) bool {
		return ours(path) && (under(path, "internal/airtest") || strings.HasSuffix(path, "test"))
	}
	var bad []string
	for _, p := range g.pkgs {
		if isKit(p.ImportPath) {
			continue
		}
		for _, d := range p.Deps {
			if d == "testing" || isKit(d) {
				bad = append(bad, rel(p.ImportPath)+" depends on "+d+"; production packages must not link test code")
			}
		}
	}
	return bad
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
