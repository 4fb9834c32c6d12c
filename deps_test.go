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
	"path"
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

// ruleGOOS are the systems the dependency rules are checked for: the
// sandbox's, and darwin's, where policy, plan, explain and export build.
var ruleGOOS = []string{"linux", "darwin"}

var (
	listMu sync.Mutex
	listed = map[string]map[string]*listedPackage{} // by GOOS, then import path, deps included
)

// goList runs `go list -deps -json ./...` for goos once per test binary.
// Without -test, Deps and Imports are those of the production build.
func goList(t *testing.T, goos string) map[string]*listedPackage {
	t.Helper()
	listMu.Lock()
	defer listMu.Unlock()
	if l, ok := listed[goos]; ok {
		return l
	}
	env := []string{"GOOS=" + goos}
	if goos != runtime.GOOS {
		env = append(env, "GOARCH=arm64") // as .ci/run's darwin step
	}
	out, err := runGoEnv(t, env, "list", "-e", "-deps", "-json", "./...")
	if err != nil {
		t.Fatalf("go list (GOOS=%s): %v", goos, err)
	}
	l := make(map[string]*listedPackage)
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		p := new(listedPackage)
		if err := dec.Decode(p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("go list (GOOS=%s): %v", goos, err)
		}
		l[p.ImportPath] = p
	}
	listed[goos] = l
	return l
}

// runGoEnv runs the go command in the repository root with env added to
// its environment, with a bounded time.
func runGoEnv(t *testing.T, env []string, args ...string) ([]byte, error) {
	t.Helper()
	ctx, cancel := contextWithTimeout(t, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool(t), args...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
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

// modulePackages returns this module's packages matched by ./... for
// goos, sorted.
func modulePackages(t *testing.T, goos string) []*listedPackage {
	t.Helper()
	var pkgs []*listedPackage
	for _, p := range goList(t, goos) {
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

func realGraph(t *testing.T, goos string) graph {
	t.Helper()
	all := goList(t, goos)
	return graph{pkgs: modulePackages(t, goos), std: func(path string) bool {
		p, ok := all[path]
		return ok && p.Standard // unknown paths count as outside std
	}}
}

// depRule forbids the packages it binds some imports, and says why: the
// dependency rules of STYLE.md §2 as data, in the manner of tailscale's
// tstest/deptest (package => forbidden imports => why). Patterns are
// import paths in which "std" stands for any standard-library package, a
// leading "./" for this module, "..." for any number of path elements
// (none included), and other elements are path.Match globs:
// "./internal/enforce/..." is internal/enforce and everything below it,
// "./.../*test" every package of the module whose name ends in "test".
type depRule struct {
	name   string   // names the rule in failures, -run and the self-test
	pkgs   []string // the packages the rule binds
	except []string // packages among pkgs it does not bind
	// deps makes the rule look at every transitive dependency; otherwise
	// it looks at the direct imports only.
	deps  bool
	deny  []string // imports forbidden
	allow []string // imports exempt from deny
	// only, when not nil, forbids everything it does not match.
	only []string
	why  string // printed with every violation
}

var depRules = []depRule{
	{name: "policy-no-os", pkgs: []string{"./policy/..."},
		deny: []string{"os", "os/exec", "syscall", "net/http", "log", "golang.org/x/sys/..."},
		why:  "policy packages are pure data and never touch OS APIs: Parse takes bytes or an io.Reader, never a file name"},
	{name: "policy-offline", pkgs: []string{"./policy/..."}, deps: true,
		deny: []string{"os/exec", "net/http"},
		why:  "no path from the policy model reaches processes or the network (fmt reaches os and syscall; nothing may reach these)"},
	{name: "policy-leaf", pkgs: []string{"./policy/..."}, deps: true,
		only: []string{"std", "./policy/...", "go.yaml.in/yaml/v3"},
		why:  "the policy model depends on no other airlock package and on no third party but the YAML parser"},
	{name: "api-std-only", pkgs: []string{"./api"},
		only: []string{"std"},
		why:  "the wire types are a leaf: a program that decodes airlock's answers must not link the sandbox, its enforcement code or the policy parser"},
	{name: "audit-std-only", pkgs: []string{"./audit"},
		only: []string{"std"},
		why:  "audit events are plain data that every layer emits, so audit sits below all of them"},
	{name: "plan-pure", pkgs: []string{"./plan"},
		only: []string{"std", "./policy/...", "./internal/wire", "./plan/spec"},
		why:  "the plan is computed from the policy alone (plan, then apply): it imports only policy/..., the standard library, its data types (plan/spec) and its wire encoding"},
	{name: "plan-spec-no-parser", pkgs: []string{"./plan/spec"}, deps: true,
		only: []string{"std", "./internal/wire", "./policy/budget", "./policy/downgrade", "./policy/protected"},
		why:  "the plan's data types are what the sandbox's init decodes and applies: they link no policy parser (package policy, policy/hostspec, YAML, regexp), only the standard library, the wire encoding and the policy's small leaves (budget, downgrade, protected)"},
	{name: "wire-std-only", pkgs: []string{"./internal/wire"},
		only: []string{"std"},
		why:  "the wire encoding sits below the plan and the control protocol, which both trust it to bound what it decodes"},
	{name: "enforce-offline", pkgs: []string{"./internal/enforce/..."}, deps: true,
		deny: []string{"net/http", "./egress/...", "./server/...", "./mcp/..."},
		why:  "the code that applies the restrictions never links an HTTP stack or a network front end, not even through another package"},
	{name: "enforce-below-sandbox", pkgs: []string{"./internal/enforce/..."}, deps: true,
		deny: []string{"./sandbox/..."},
		why:  "the kernel layers sit below the supervisor: the code that applies a restriction (and the re-executed init, which links it) never reaches back into the box that drives it"},
	{name: "egress-below-sandbox", pkgs: []string{"./egress/..."}, deps: true,
		deny: []string{"./sandbox/..."},
		why:  "the egress proxy decides by the policy alone: the box serves it (box.serveProxy), and the proxy never reaches back into the box"},
	// Not a rule yet: "sandbox never imports export/...". The OCI and
	// gVisor backends build their bundle with export/oci.Config
	// (sandbox/oci_linux.go), so sandbox imports export/oci today.
	{name: "export-skips-enforce", pkgs: []string{"./export/..."}, deps: true,
		deny: []string{"./internal/enforce/..."},
		why:  "exports are pure translations of the plan (its seccomp profile included, plan.Seccomp) and never reach the enforcement code"},
	{name: "egress-skips-enforce", pkgs: []string{"./egress/..."}, deps: true,
		deny: []string{"./internal/enforce/..."},
		why:  "the egress proxy decides by the policy alone and never links the enforcement code"},
	{name: "frontends-no-enforce", pkgs: []string{"./server/...", "./mcp/...", "./client/..."},
		deny: []string{"./internal/enforce/..."},
		why:  "front ends hold a sandbox through their small Session interfaces over api types and never drive the kernel layers themselves (they may reach them through sandbox)"},
	{name: "client-links-api-only", pkgs: []string{"./client/..."}, deps: true,
		only: []string{"std", "./api"},
		why:  "a program that drives airlock over HTTP must not link the sandbox, its enforcement code or the policy parser"},
	{name: "httpauth-std-only", pkgs: []string{"./internal/httpauth"},
		only: []string{"std"},
		why:  "the bearer-token check stays small enough to review at a glance"},
	{name: "inflight-std-only", pkgs: []string{"./internal/inflight"},
		only: []string{"std"},
		why:  "the limits on what clients hold in the servers at once stay small enough to review at a glance"},
	{name: "sibling-std-only", pkgs: []string{"./internal/sibling"},
		only: []string{"std"},
		why:  "the check that decides which program next to airlock is trusted to run stays small enough to review at a glance"},
	{name: "k8s-types-in-export-k8s", pkgs: []string{"./..."}, except: []string{"./export/k8s/...", "./internal/k8stest", "./controller/...", "./cmd/airlock-controller"},
		deny: []string{"k8s.io/..."},
		why:  "only export/k8s and the controller (controller/..., and cmd/airlock-controller, which starts it) import the Kubernetes packages (and internal/k8stest, the test kit that starts a control plane for its tests)"},
	{name: "client-go-in-controller", pkgs: []string{"./..."}, except: []string{"./internal/k8stest", "./controller", "./cmd/airlock-controller"}, deps: true,
		deny: []string{"k8s.io/client-go/..."},
		why:  "only the controller talks to a cluster: client-go is linked by package controller, by cmd/airlock-controller that runs it, and by internal/k8stest, the test kit that starts a real API server; the exports and the API types (controller/api/...) write and describe objects, and reach no cluster"},
	{name: "controller-runtime-in-controller", pkgs: []string{"./..."}, except: []string{"./controller", "./cmd/airlock-controller"}, deps: true,
		deny: []string{"sigs.k8s.io/controller-runtime/..."},
		why:  "controller-runtime (a manager, caches, leader election, a metrics server) is the controller's: only package controller and cmd/airlock-controller, which `airlock controller` runs, link it"},
	{name: "airlock-server-no-controller", pkgs: []string{"./cmd/airlock-server"}, deps: true,
		deny: []string{"./controller/...", "k8s.io/client-go/...", "sigs.k8s.io/controller-runtime/...", "k8s.io/apiextensions-apiserver/..."},
		why:  "client-go and controller-runtime take milliseconds to initialize, and Go initializes every linked package before main: in airlock-server they made every serve, mcp and export k8s start slower (airlock-server version, medians: 4.9 ms without them, 13.3 ms with), so the controller is a program of its own, cmd/airlock-controller"},
	{name: "controller-api-types-pure", pkgs: []string{"./controller/api/..."},
		only: []string{"std", "k8s.io/apimachinery/...", "./api"},
		why:  "the CRD types are data: a program that reads Sandboxes must not link the controller, client-go or the policy parser; they import only apimachinery and airlock's wire types (the report summary)"},
	{name: "mcp-sdk-in-mcp", pkgs: []string{"./..."}, except: []string{"./mcp/..."},
		deny: []string{"github.com/modelcontextprotocol/..."},
		why:  "only mcp imports the MCP SDK"},
	{name: "airlock-links-no-servers", pkgs: []string{"./cmd/airlock"}, deps: true,
		deny: []string{"./server/...", "./mcp/...", "./export/k8s/...", "./controller/...", "k8s.io/...", "sigs.k8s.io/...", "github.com/modelcontextprotocol/...",
			"github.com/google/jsonschema-go/...", "github.com/prometheus/..."},
		why: "Go initializes every package linked into a program before main, so every airlock run paid for the HTTP API, MCP and Kubernetes code (airlock version took 5.8 ms with it, 3.2 ms without): they live in cmd/airlock-server, which airlock executes for serve, mcp and export k8s, and in cmd/airlock-controller (client-go and controller-runtime), which it executes for controller"},
	{name: "init-links-no-parser", pkgs: []string{"./cmd/airlock-init"}, deps: true,
		deny: []string{"go.yaml.in/yaml/...", "regexp/...", "./policy", "./policy/hostspec", "./plan"},
		why: "airlock-init is pid 1 of every sandbox, and Go initializes every linked package before main, so its start-up is on the critical path of every sandbox start: " +
			"the YAML parser, regexp and the policy package (linked through plan.Compile) made it start and exit in 1.79 ms against 1.60 ms without them (perf stat -r 300); " +
			"the init decodes and applies a compiled plan through plan/spec and never needs the policy parser or the compiler"},
	{name: "no-test-code-in-production", pkgs: []string{"./..."}, except: []string{"./internal/airtest/...", "./.../*test"}, deps: true,
		deny: []string{"testing", "./internal/airtest/...", "./.../*test"},
		why:  "production packages never link the testing package, the test kit or a fake package (xxxtest)"},
}

// match reports whether the import path p matches the pattern pat (see
// depRule).
func (g graph) match(pat, p string) bool {
	if pat == "std" {
		return g.std(p)
	}
	if rest, ok := strings.CutPrefix(pat, "./"); ok {
		pat = module + "/" + rest
	}
	return matchElems(strings.Split(pat, "/"), strings.Split(p, "/"))
}

func matchElems(pat, p []string) bool {
	if len(pat) == 0 {
		return len(p) == 0
	}
	if pat[0] == "..." {
		for i := range len(p) + 1 {
			if matchElems(pat[1:], p[i:]) {
				return true
			}
		}
		return false
	}
	if len(p) == 0 {
		return false
	}
	ok, err := path.Match(pat[0], p[0])
	return err == nil && ok && matchElems(pat[1:], p[1:])
}

func (g graph) matchAny(pats []string, p string) bool {
	return slices.ContainsFunc(pats, func(pat string) bool { return g.match(pat, p) })
}

// check returns one message per import that breaks r.
func (r depRule) check(g graph) []string {
	var bad []string
	for _, p := range g.pkgs {
		if !g.matchAny(r.pkgs, p.ImportPath) || g.matchAny(r.except, p.ImportPath) {
			continue
		}
		list, verb := p.Imports, "imports"
		if r.deps {
			list, verb = p.Deps, "depends on"
		}
		for _, imp := range list {
			denied := g.matchAny(r.deny, imp) && !g.matchAny(r.allow, imp)
			if r.only != nil && !g.matchAny(r.only, imp) {
				denied = true
			}
			if denied {
				bad = append(bad, rel(p.ImportPath)+" "+verb+" "+imp+": "+r.why+" (rule "+r.name+")")
			}
		}
	}
	return bad
}

// TestDependencyRules applies every rule to this module, built for each
// of ruleGOOS. A rule whose packages do not exist checks nothing, which
// is an error too.
func TestDependencyRules(t *testing.T) {
	for _, goos := range ruleGOOS {
		g := realGraph(t, goos)
		for _, r := range depRules {
			t.Run(goos+"/"+r.name, func(t *testing.T) {
				for _, pat := range r.pkgs {
					if !slices.ContainsFunc(g.pkgs, func(p *listedPackage) bool { return g.match(pat, p.ImportPath) }) {
						t.Errorf("no package matches %q: the rule checks nothing", pat)
					}
				}
				for _, msg := range r.check(g) {
					t.Error(msg)
				}
			})
		}
	}
}

// TestDependencyRulesCatch feeds each rule a module that breaks it, so
// that a rule that can no longer fail is noticed, and checks that the
// allowed shapes pass every rule.
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
		{"policy-no-os", pkg("policy", []string{"os"}, []string{"os"})},
		{"policy-no-os", pkg("policy/hostspec", []string{"log"}, []string{"log"})},
		{"policy-no-os", pkg("policy/pathspec", []string{"golang.org/x/sys/unix"}, []string{"golang.org/x/sys/unix"})},
		{"policy-leaf", pkg("policy/budget", []string{m("audit")}, []string{m("audit")})},
		{"policy-leaf", pkg("policy", []string{"example.com/x"}, []string{"example.com/y"})},
		{"policy-offline", pkg("policy", []string{"net/url"}, []string{"net/http"})},
		{"api-std-only", pkg("api", []string{"encoding/json", m("policy")}, nil)},
		{"api-std-only", pkg("api", []string{"github.com/google/jsonschema-go/jsonschema"}, nil)},
		{"audit-std-only", pkg("audit", []string{"go.yaml.in/yaml/v3"}, nil)},
		{"audit-std-only", pkg("audit", []string{m("policy")}, nil)},
		{"plan-pure", pkg("plan", []string{m("internal/enforce/mount")}, nil)},
		{"plan-spec-no-parser", pkg("plan/spec", []string{m("policy")}, []string{m("policy"), "go.yaml.in/yaml/v3"})},
		{"plan-spec-no-parser", pkg("plan/spec", []string{"fmt"}, []string{"fmt", m("policy/hostspec")})},
		{"plan-spec-no-parser", pkg("plan/spec", []string{m("plan")}, []string{m("plan")})},
		{"wire-std-only", pkg("internal/wire", []string{m("policy")}, nil)},
		{"enforce-offline", pkg("internal/enforce/mount", nil, []string{"net/http"})},
		{"enforce-offline", pkg("internal/enforce/nsinit", nil, []string{m("egress")})},
		{"enforce-offline", pkg("internal/enforce/seccomp", nil, []string{m("server/api")})},
		{"enforce-below-sandbox", pkg("internal/enforce/nsinit", []string{m("sandbox")}, []string{m("sandbox")})},
		{"enforce-below-sandbox", pkg("internal/enforce/cgroup", nil, []string{m("sandbox")})},
		{"egress-below-sandbox", pkg("egress", nil, []string{m("sandbox")})},
		{"egress-below-sandbox", pkg("egress/egresstest", []string{m("sandbox")}, []string{m("sandbox")})},
		{"export-skips-enforce", pkg("export/oci", nil, []string{m("internal/enforce/mount")})},
		{"export-skips-enforce", pkg("export/k8s", nil, []string{m("internal/enforce/cgroup")})},
		{"export-skips-enforce", pkg("export/oci", []string{m("internal/enforce/seccomp")}, []string{m("internal/enforce/seccomp")})},
		{"egress-skips-enforce", pkg("egress", nil, []string{m("internal/enforce/netns")})},
		{"egress-skips-enforce", pkg("egress", nil, []string{m("internal/enforce/seccomp")})},
		{"frontends-no-enforce", pkg("server", []string{m("internal/enforce/cgroup")}, []string{m("internal/enforce/cgroup")})},
		{"frontends-no-enforce", pkg("mcp", []string{m("internal/enforce/nsinit")}, nil)},
		{"frontends-no-enforce", pkg("client", []string{m("internal/enforce")}, nil)},
		{"client-links-api-only", pkg("client", []string{m("api")}, []string{m("api"), m("policy")})},
		{"client-links-api-only", pkg("client", []string{m("sandbox")}, []string{m("sandbox")})},
		{"httpauth-std-only", pkg("internal/httpauth", []string{m("policy")}, nil)},
		{"inflight-std-only", pkg("internal/inflight", []string{m("policy")}, nil)},
		{"sibling-std-only", pkg("internal/sibling", []string{"golang.org/x/sys/unix"}, nil)},
		{"k8s-types-in-export-k8s", pkg("sandbox", []string{"k8s.io/api/core/v1"}, nil)},
		{"k8s-types-in-export-k8s", pkg("export/oci", []string{"k8s.io/apimachinery/pkg/api/resource"}, nil)},
		{"k8s-types-in-export-k8s", pkg("server", []string{"k8s.io/client-go/rest"}, nil)},
		{"client-go-in-controller", pkg("export/k8s", nil, []string{"k8s.io/client-go/rest"})},
		{"client-go-in-controller", pkg("controller/api/v1alpha1", nil, []string{"k8s.io/client-go/kubernetes/scheme"})},
		{"client-go-in-controller", pkg("cmd/airlock", nil, []string{"k8s.io/client-go/kubernetes"})},
		{"controller-runtime-in-controller", pkg("export/k8s", nil, []string{"sigs.k8s.io/controller-runtime/pkg/client"})},
		{"airlock-server-no-controller", pkg("cmd/airlock-server", nil, []string{m("controller")})},
		{"airlock-server-no-controller", pkg("cmd/airlock-server", nil, []string{"k8s.io/client-go/kubernetes/scheme"})},
		{"airlock-server-no-controller", pkg("cmd/airlock-server", nil, []string{"sigs.k8s.io/controller-runtime/pkg/manager"})},
		{"controller-runtime-in-controller", pkg("internal/k8stest", nil, []string{"sigs.k8s.io/controller-runtime/pkg/envtest"})},
		{"controller-runtime-in-controller", pkg("controller/api/v1alpha1", nil, []string{"sigs.k8s.io/controller-runtime/pkg/scheme"})},
		{"controller-api-types-pure", pkg("controller/api/v1alpha1", []string{"sigs.k8s.io/controller-runtime/pkg/scheme"}, nil)},
		{"controller-api-types-pure", pkg("controller/api/v1alpha1", []string{m("policy")}, nil)},
		{"controller-api-types-pure", pkg("controller/api/v1alpha1", []string{"k8s.io/api/core/v1"}, nil)},
		{"mcp-sdk-in-mcp", pkg("server", []string{"github.com/modelcontextprotocol/go-sdk/mcp"}, nil)},
		{"airlock-links-no-servers", pkg("cmd/airlock", []string{m("server")}, []string{m("server")})},
		{"airlock-links-no-servers", pkg("cmd/airlock", []string{m("internal/cli")}, []string{m("internal/cli"), m("mcp")})},
		{"airlock-links-no-servers", pkg("cmd/airlock", nil, []string{m("export/k8s")})},
		{"airlock-links-no-servers", pkg("cmd/airlock", nil, []string{m("controller")})},
		{"airlock-links-no-servers", pkg("cmd/airlock", nil, []string{m("controller/api/v1alpha1")})},
		{"airlock-links-no-servers", pkg("cmd/airlock", nil, []string{"k8s.io/apimachinery/pkg/runtime"})},
		{"airlock-links-no-servers", pkg("cmd/airlock", nil, []string{"sigs.k8s.io/controller-runtime/pkg/manager"})},
		{"airlock-links-no-servers", pkg("cmd/airlock", nil, []string{"github.com/modelcontextprotocol/go-sdk/jsonrpc"})},
		{"airlock-links-no-servers", pkg("cmd/airlock", nil, []string{"github.com/google/jsonschema-go/jsonschema"})},
		{"airlock-links-no-servers", pkg("cmd/airlock", nil, []string{"github.com/prometheus/client_golang/prometheus"})},
		{"init-links-no-parser", pkg("cmd/airlock-init", nil, []string{m("internal/enforce/nsinit"), "go.yaml.in/yaml/v3"})},
		{"init-links-no-parser", pkg("cmd/airlock-init", nil, []string{"regexp"})},
		{"init-links-no-parser", pkg("cmd/airlock-init", nil, []string{"regexp/syntax"})},
		{"init-links-no-parser", pkg("cmd/airlock-init", nil, []string{m("policy")})},
		{"init-links-no-parser", pkg("cmd/airlock-init", nil, []string{m("policy/hostspec")})},
		{"init-links-no-parser", pkg("cmd/airlock-init", nil, []string{m("plan")})},
		{"no-test-code-in-production", pkg("sandbox", nil, []string{"testing"})},
		{"no-test-code-in-production", pkg("cmd/airlock", nil, []string{m("internal/airtest")})},
		{"no-test-code-in-production", pkg("server", nil, []string{m("egress/egresstest")})},
	}
	caught := map[string]bool{}
	for _, tt := range tests {
		t.Run(tt.rule+"/"+rel(tt.pkg.ImportPath), func(t *testing.T) {
			i := slices.IndexFunc(depRules, func(r depRule) bool { return r.name == tt.rule })
			if i < 0 {
				t.Fatalf("no rule %q", tt.rule)
			}
			caught[tt.rule] = true
			if got := depRules[i].check(graph{pkgs: []*listedPackage{tt.pkg}, std: std}); len(got) == 0 {
				t.Errorf("rule %s accepts %s importing %v (deps %v)", tt.rule, rel(tt.pkg.ImportPath), tt.pkg.Imports, tt.pkg.Deps)
			}
		})
	}
	for _, r := range depRules {
		if !caught[r.name] {
			t.Errorf("rule %s has no case above that breaks it", r.name)
		}
		if r.why == "" {
			t.Errorf("rule %s says not why", r.name)
		}
	}
	// And the allowed shapes pass.
	ok := []*listedPackage{
		pkg("policy", []string{"fmt", "go.yaml.in/yaml/v3", m("policy/hostspec")}, []string{"fmt", "os", "syscall", "go.yaml.in/yaml/v3", m("policy/hostspec")}),
		pkg("plan", []string{"sort", m("policy"), m("internal/wire"), m("plan/spec")}, []string{"go.yaml.in/yaml/v3", m("policy"), m("internal/wire"), m("plan/spec")}),
		pkg("plan/spec", []string{"fmt", m("internal/wire"), m("policy/downgrade")},
			[]string{"fmt", m("internal/wire"), m("policy/budget"), m("policy/downgrade"), m("policy/protected")}),
		// The init links the plan's data and the enforcement code, and the
		// policy's small leaves (pathspec is not the parser).
		pkg("cmd/airlock-init", []string{m("internal/enforce/nsinit")},
			[]string{m("internal/enforce/nsinit"), m("plan/spec"), m("policy/budget"), m("policy/downgrade"), m("policy/pathspec"), "net", "net/netip", "encoding/json"}),
		pkg("api", []string{"encoding/json", "io", "time"}, []string{"encoding/json", "io", "time"}),
		pkg("internal/enforce/nsinit", nil, []string{m("internal/enforce/mount"), m("plan/spec")}),
		pkg("export/k8s", []string{"k8s.io/api/core/v1", m("export/oci")}, []string{m("plan"), m("export/oci")}),
		// A front end may reach the enforcement code through sandbox.
		pkg("server", []string{m("api"), m("sandbox")}, []string{m("api"), m("sandbox"), m("internal/enforce/cgroup")}),
		pkg("mcp", []string{"github.com/modelcontextprotocol/go-sdk/mcp", m("api")}, []string{m("api"), m("internal/enforce/nsinit")}),
		pkg("client", []string{m("api"), "net/http"}, []string{m("api"), "net/http", "crypto/tls"}),
		pkg("internal/airtest", nil, []string{"testing"}),
		// The test kit starts a real API server and drives it with client-go.
		pkg("internal/k8stest", []string{"k8s.io/client-go/kubernetes", m("internal/airtest")}, []string{"testing", "k8s.io/client-go/rest", m("internal/airtest")}),
		// airlock links the OCI export and the sandbox; airlock-server links everything.
		pkg("cmd/airlock", []string{m("internal/cli"), m("export/oci")}, []string{m("internal/cli"), m("export/oci"), m("sandbox"), "net/http"}),
		pkg("cmd/airlock-server", []string{m("server"), m("mcp"), m("export/k8s")},
			[]string{m("server"), m("mcp"), m("export/k8s"), "k8s.io/api/core/v1", "github.com/prometheus/client_golang/prometheus"}),
		pkg("cmd/airlock-controller", []string{m("controller"), "k8s.io/client-go/tools/clientcmd", "sigs.k8s.io/controller-runtime"},
			[]string{m("controller"), m("export/k8s"), "k8s.io/client-go/rest", "sigs.k8s.io/controller-runtime/pkg/manager", "github.com/prometheus/client_golang/prometheus"}),
		// The controller links controller-runtime and client-go; its API
		// types only apimachinery and the wire types.
		pkg("controller", []string{"sigs.k8s.io/controller-runtime", m("export/k8s"), m("controller/api/v1alpha1")},
			[]string{"sigs.k8s.io/controller-runtime/pkg/client", "k8s.io/client-go/rest", m("export/k8s"), m("policy")}),
		pkg("controller/api/v1alpha1", []string{"k8s.io/apimachinery/pkg/runtime", m("api"), "embed"}, []string{"k8s.io/apimachinery/pkg/runtime", m("api")}),
	}
	for _, r := range depRules {
		if got := r.check(graph{pkgs: ok, std: std}); len(got) > 0 {
			t.Errorf("rule %s rejects an allowed module: %v", r.name, got)
		}
	}
}

// planEditsAllowed are the calls of plan's With* functions that
// production code outside plan/ makes, by file, and why.
var planEditsAllowed = map[string]string{
	"export/oci/oci.go": "WithoutTransparentEgressCopy", // an exported sandbox has no connect broker: a copy, the caller's plan is left as it is
	"export/k8s/k8s.go": "WithoutTransparentEgressCopy", // as export/oci
}

// TestNoPlanEditsOutsidePlan: a plan is final once compiled for its
// backend (plan.Target): production code outside plan/ calls none of
// plan's With* functions, which change a plan, but the exports' copies
// (planEditsAllowed).
func TestNoPlanEditsOutsidePlan(t *testing.T) {
	fset := token.NewFileSet()
	for _, path := range goSourceFiles(t) {
		slash := filepath.ToSlash(path)
		if strings.HasSuffix(path, "_test.go") || strings.HasPrefix(slash, "plan/") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution|parser.ParseComments)
		if err != nil {
			t.Errorf("parse %s: %v", path, err)
			continue
		}
		if buildIgnored(f) {
			continue
		}
		name := "" // what the file calls package plan
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == module+"/plan" {
				name = "plan"
				if imp.Name != nil {
					name = imp.Name.Name
				}
			}
		}
		if name == "" {
			continue
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == name && strings.HasPrefix(sel.Sel.Name, "With") && planEditsAllowed[slash] != sel.Sel.Name {
				t.Errorf("%s: plan.%s changes a compiled plan outside package plan: make it a step of plan.Compile for the backend's plan.Target (plan/target.go)", fset.Position(sel.Pos()), sel.Sel.Name)
			}
			return true
		})
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

// TestStaticBinary checks that airlock, airlock-init, airlock-server and
// airlock-controller build without cgo into binaries that need no dynamic
// loader and no shared library.
func TestStaticBinary(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skipf("the ELF check runs on linux; GOOS is %s", runtime.GOOS)
	}
	dir := t.TempDir()
	// A first build with empty caches (a new user) takes minutes here.
	ctx, cancel := contextWithTimeout(t, 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool(t), "build", "-o", dir, "./cmd/...")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("CGO_ENABLED=0 go build -o DIR ./cmd/...: %v\n%s", err, out)
	}
	for _, name := range []string{"airlock", "airlock-init", "airlock-server", "airlock-controller"} {
		t.Run(name, func(t *testing.T) {
			f, err := elf.Open(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			for _, prog := range f.Progs {
				if prog.Type == elf.PT_INTERP {
					t.Errorf("%s has a PT_INTERP program header: it needs a dynamic loader", name)
				}
			}
			libs, err := f.ImportedLibraries()
			if err != nil {
				t.Fatalf("read DT_NEEDED: %v", err)
			}
			if len(libs) > 0 {
				t.Errorf("%s needs shared libraries (DT_NEEDED) %v; it must be static", name, libs)
			}
		})
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
