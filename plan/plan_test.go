package plan_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/plan"
	"github.com/airlock-sandbox/airlock/policy"
)

// fakeHost is a Debian-like merged-/usr host.
type fakeHost struct{ env map[string]string }

func (fakeHost) Lstat(p string) (bool, bool, string, error) {
	links := map[string]string{"/bin": "usr/bin", "/sbin": "usr/sbin", "/lib": "usr/lib", "/lib64": "usr/lib64", "/etc/localtime": "/usr/share/zoneinfo/Etc/UTC"}
	if l, ok := links[p]; ok {
		return true, false, l, nil
	}
	switch p {
	case "/usr/lib", "/usr/lib64", "/usr/local/lib", "/usr/share", "/etc/ssl", "/etc/alternatives":
		return true, true, "", nil
	case "/etc/ld.so.cache":
		return true, false, "", nil
	}
	return false, false, "", nil
}

func (fakeHost) LookTool(name string) (string, string, error) {
	switch name {
	case "python3", "/usr/bin/python3":
		return "/usr/bin/python3", "/usr/bin/python3.11", nil
	case "sh":
		return "/usr/bin/sh", "/usr/bin/dash", nil
	}
	return "", "", errors.New("not found")
}

func (fakeHost) Loader() []string { return []string{"/lib64/ld-linux-x86-64.so.2"} }

func (h fakeHost) Env(n string) (string, bool) { v, ok := h.env[n]; return v, ok }

func mustPolicy(t *testing.T, s policy.Spec) *policy.Policy {
	t.Helper()
	p, err := policy.New(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCompileGolden(t *testing.T) {
	p := mustPolicy(t, policy.Spec{
		FSRead: []string{"/data"}, FSWrite: []string{"/data/out"}, NetHosts: []string{"pypi.org", "*.pythonhosted.org:443"},
		AllowedTools: []string{"python3"}, Env: []string{"LANG", "MPLBACKEND=Agg", "SECRET_NOT_SET"},
	})
	pl, err := plan.Compile(p, plan.Request{Argv: []string{"sh", "-c", "python3 job.py"}, CommandIsGranted: true}, fakeHost{env: map[string]string{"LANG": "C.UTF-8", "AWS_SECRET": "x"}})
	if err != nil {
		t.Fatal(err)
	}
	js, err := json.MarshalIndent(pl, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	// The syscall profile is pinned on its own, one line a syscall
	// (syscalls.txt), and compiled in internal/enforce/seccomp's golden
	// test; plan.json shows the rest.
	var back plan.Plan
	if err := json.Unmarshal(js, &back); err != nil || !reflect.DeepEqual(&back, pl) {
		t.Fatalf("the plan does not survive JSON, which is how nsinit receives it: %v", err)
	}
	if !pl.Transparent {
		t.Error("a plan with net_hosts has no transparent egress")
	}
	plan.WithoutTransparentEgress(&back) // a copy: back shares nothing with pl
	if !reflect.DeepEqual(back.Seccomp, plan.DefaultSeccomp()) {
		t.Error("Compile did not put DefaultSeccomp in the plan, connect(2) aside")
	}
	if back.Transparent || strings.Contains(back.String(), "nameserver") {
		t.Error("WithoutTransparentEgress left transparent egress on")
	}
	rest := *pl
	rest.Seccomp = plan.Seccomp{}
	restJS, err := json.MarshalIndent(&rest, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	zeroJS, err := json.MarshalIndent(plan.Seccomp{}, "  ", "  ")
	if err != nil {
		t.Fatal(err)
	}
	zero := "\"seccomp\": " + string(zeroJS)
	if !bytes.Contains(restJS, []byte(zero)) {
		t.Fatalf("plan.json: no empty seccomp section to replace in\n%s", restJS)
	}
	restJS = bytes.Replace(restJS, []byte(zero), []byte("\"seccomp\": \"(in syscalls.txt.golden)\""), 1)
	airtest.Golden(t, "plan.json", restJS)
	airtest.Golden(t, "syscalls.txt", []byte(syscallListing(pl.Seccomp)))
	airtest.Golden(t, "explain.txt", []byte(pl.String()))
	if strings.Contains(string(js), "AWS_SECRET") {
		t.Error("a host variable that was not granted reached the plan")
	}
}

// syscallListing renders a profile one syscall a line.
func syscallListing(s plan.Seccomp) string {
	var b strings.Builder
	fmt.Fprintf(&b, "default %v\n", s.Default)
	for _, sc := range s.Syscalls {
		var rules []string
		for _, r := range sc.Rules {
			var conds []string
			for _, c := range r.Conds {
				conds = append(conds, fmt.Sprintf("arg%d&%#x==%#x", c.Arg, c.Mask, c.Value))
			}
			rule := r.Action.String()
			if len(conds) > 0 {
				rule += " if " + strings.Join(conds, " && ")
			}
			rules = append(rules, rule)
		}
		fmt.Fprintf(&b, "%-24s %-36s %s\n", sc.Name, "["+sc.Group+"]", strings.Join(rules, "; "))
	}
	for _, g := range s.Refused {
		fmt.Fprintf(&b, "refused [%s] %s\n", g.Name, strings.Join(g.Names, " "))
	}
	return b.String()
}

func TestCompileRefusals(t *testing.T) {
	p := mustPolicy(t, policy.Spec{FSWrite: []string{"/work"}})
	tests := []struct {
		name string
		req  plan.Request
	}{
		{"no-command", plan.Request{}},
		{"command-not-allowed", plan.Request{Argv: []string{"python3"}}},
		{"tool-not-found", plan.Request{Argv: []string{"nosuchtool"}, CommandIsGranted: true}},
		{"cwd-outside-grants", plan.Request{Argv: []string{"sh"}, CommandIsGranted: true, Cwd: "/root"}},
		{"cwd-workshop", plan.Request{Argv: []string{"sh"}, CommandIsGranted: true, Cwd: "/workshop"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if pl, err := plan.Compile(p, tt.req, fakeHost{}); err == nil {
				t.Fatalf("Compile(%+v) = %+v, want an error", tt.req, pl)
			}
		})
	}
}

func TestCompileNoNetworkNoProxy(t *testing.T) {
	pl, err := plan.Compile(policy.Default(), plan.Request{Argv: []string{"sh"}, CommandIsGranted: true}, fakeHost{})
	if err != nil {
		t.Fatal(err)
	}
	if pl.Proxy {
		t.Fatalf("default policy: proxy=%v, want no way out", pl.Proxy)
	}
	for _, e := range pl.Env {
		if strings.HasPrefix(strings.ToUpper(e), "HTTP_PROXY=") {
			t.Fatalf("proxy variables set without net_hosts: %s", e)
		}
	}
	for _, m := range pl.Mounts {
		if m.Target == "/usr/bin" || strings.HasPrefix(m.Source, "/root") || strings.HasPrefix(m.Source, "/home") {
			t.Fatalf("the base mounts %+v", m)
		}
		if m.Writable && m.Kind == plan.KindBind && !strings.HasPrefix(m.Target, "/dev/") {
			t.Fatalf("a writable bind without fs_write: %+v", m)
		}
	}
}

// TestLimitsAreTheBudget: the plan's Limits carry the policy's budget
// whole, so the runtime and the exports need not read the policy.
func TestLimitsAreTheBudget(t *testing.T) {
	p, err := policy.Parse([]byte("version: 1\nbudget:\n  max_memory: 256MiB\n  max_pids: 32\n  max_cpu: 7s\n  max_wall: 9s\n  max_output_bytes: 1000\n  max_ops: 12\n  max_scratch: 8MiB\n  max_write: 1MiB\nallow_downgrade: [max_pids, landlock]\n"), policy.ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pl, err := plan.Compile(p, plan.Request{Argv: []string{"sh"}, CommandIsGranted: true}, fakeHost{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := pl.Limits.Budget(), p.Budget(); got != want {
		t.Errorf("Limits.Budget() = %+v, want the policy's %+v", got, want)
	}
	if !pl.Limits.AcceptsDowngrade(policy.DowngradePids) || pl.Limits.AcceptsDowngrade(policy.DowngradeMemory) || pl.Limits.AcceptsDowngrade(policy.DowngradeLandlock) {
		t.Errorf("Limits.Downgrades = %v, want only max_pids (landlock is RequireLandlock's)", pl.Limits.Downgrades)
	}
}

// TestExplainRendersData changes one kernel-facing fact of a plan at a
// time and checks that explain shows the change: what the operator reads
// comes from the data nsinit and the exporters read, not from prose.
func TestExplainRendersData(t *testing.T) {
	base, err := plan.Compile(policy.Default(), plan.Request{Argv: []string{"sh"}, CommandIsGranted: true}, fakeHost{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		mutate func(*plan.Plan)
		want   string
	}{
		{"namespace", func(p *plan.Plan) { p.Namespaces = append(p.Namespaces, "time") }, "uts, cgroup, time"},
		{"host-id", func(p *plan.Plan) { p.IDMap.HostUID, p.IDMap.HostGID = 1234567, 7654321 }, "host uid 1234567, gid 0 host gid 7654321"},
		{"id-range", func(p *plan.Plan) { p.IDMap.RootFirst = 5000 }, "from 5000 to"},
		{"masked", func(p *plan.Plan) { p.MaskedPaths = append(p.MaskedPaths, "/proc/zz-new") }, "/proc/zz-new"},
		{"readonly", func(p *plan.Plan) { p.ReadonlyPaths = append(p.ReadonlyPaths, "/proc/zz-ro") }, "/proc/zz-ro"},
		{"capability", func(p *plan.Plan) { p.Capabilities = []string{"CAP_NET_RAW"} }, "capabilities kept: CAP_NET_RAW"},
		{"no-new-privs", func(p *plan.Plan) { p.NoNewPrivileges = false }, "no_new_privs: NOT set"},
		{"seccomp-default", func(p *plan.Plan) { p.Seccomp.Default = plan.ActENOSYS }, "any other syscall gets errno(38)"},
		{"seccomp-group", func(p *plan.Plan) {
			p.Seccomp.Syscalls = append(p.Seccomp.Syscalls, plan.Syscall{Name: "x", Group: "zz group", Rules: []plan.SyscallRule{{Action: plan.ActAllow}}})
		}, "zz group                                 1 syscalls"},
		{"seccomp-refused", func(p *plan.Plan) { p.Seccomp.Refused[0].Names = append(p.Seccomp.Refused[0].Names, "zz_refused") }, "zz_refused"},
		{"memory", func(p *plan.Plan) { p.Limits.Memory = 3 << 20 }, "max_memory        3 MiB"},
		{"pids", func(p *plan.Plan) { p.Limits.Pids = 77 }, "max_pids          77 "},
		{"cpu-downgrade", func(p *plan.Plan) { p.Limits.Downgrades = []policy.Downgrade{policy.DowngradeCPU} }, "(allow_downgrade: max_cpu)"},
		{"wall", func(p *plan.Plan) { p.Limits.Wall = 1500 * 1e6 }, "max_wall          1.5s"},
		{"device-bind", func(p *plan.Plan) { p.Mounts[firstDevice(p)].Devices = false }, "/dev/null                          rw,nosuid,nodev,noexec,recursive"},
		{"not-recursive", func(p *plan.Plan) { p.Mounts[firstDevice(p)].Recursive = false }, "/dev/null                          rw,nosuid,noexec  "},
		{"rlimit-hard", func(p *plan.Plan) { p.Rlimits[0].Hard = 9 }, "core    0/9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var cp plan.Plan
			js, err := json.Marshal(base)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(js, &cp); err != nil {
				t.Fatal(err)
			}
			if strings.Contains(cp.String(), tt.want) {
				t.Fatalf("explain already shows %q before the change", tt.want)
			}
			tt.mutate(&cp)
			if got := cp.String(); !strings.Contains(got, tt.want) {
				t.Errorf("explain after %s lacks %q:\n%s", tt.name, tt.want, got)
			}
		})
	}
}

func firstDevice(p *plan.Plan) int {
	for i, m := range p.Mounts {
		if m.Devices {
			return i
		}
	}
	panic("no device bind in the plan")
}
