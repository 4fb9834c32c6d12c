package cgroup

import (
	"errors"
	"math"
	"reflect"
	"testing"
)

// Hosts as Detect reports them, for the pure plan tests.
var (
	hybridHost = Host{
		Version: Hybrid,
		Controllers: map[string]string{
			Memory: "/cg/memory", Pids: "/cg/pids", CPU: "/cg/cpu", CPUAcct: "/cg/cpuacct", Freezer: "/cg/freezer",
		},
		Unified: "/cg/unified",
		Self: map[string]string{
			"/cg/memory": "/cg/memory/api/x", "/cg/pids": "/cg/pids", "/cg/cpu": "/cg/cpu",
			"/cg/cpuacct": "/cg/cpuacct", "/cg/freezer": "/cg/freezer", "/cg/unified": "/cg/unified",
		},
		KillFile: true,
	}
	v2Host = Host{
		Version:     V2,
		Controllers: map[string]string{Memory: "/cg", Pids: "/cg", CPU: "/cg"},
		Unified:     "/cg",
		Self:        map[string]string{"/cg": "/cg/user.slice/sup"},
		KillFile:    true,
	}
	v1Host = Host{
		Version:     V1,
		Controllers: map[string]string{Memory: "/cg/memory", Pids: "/cg/pids", CPU: "/cg/cpu,cpuacct", CPUAcct: "/cg/cpu,cpuacct", Freezer: "/cg/freezer"},
		Self: map[string]string{
			"/cg/memory": "/cg/memory", "/cg/pids": "/cg/pids", "/cg/cpu,cpuacct": "/cg/cpu,cpuacct", "/cg/freezer": "/cg/freezer",
		},
	}
)

func TestNewPlan(t *testing.T) {
	const n = "airlock-1-2-0123456789abcdef"
	all := Config{Name: n, MemoryBytes: 64 << 20, Pids: 16, CPUQuota: 0.5}
	tests := []struct {
		name string
		host Host
		cfg  Config
		want Plan
	}{
		{"hybrid-all-limits", hybridHost, all, Plan{
			Name: n,
			Dirs: []Dir{
				{Path: "/cg/unified/" + n, Parent: "/cg/unified", V2: true},
				{Path: "/cg/memory/api/x/" + n, Parent: "/cg/memory/api/x", Controllers: []string{Memory}},
				{Path: "/cg/pids/" + n, Parent: "/cg/pids", Controllers: []string{Pids}},
				{Path: "/cg/cpu/" + n, Parent: "/cg/cpu", Controllers: []string{CPU}},
			},
			Limits: []Write{
				{Path: "/cg/memory/api/x/" + n + "/memory.oom_control", Value: "0"},
				{Path: "/cg/memory/api/x/" + n + "/memory.limit_in_bytes", Value: "67108864"},
				{Path: "/cg/memory/api/x/" + n + "/memory.memsw.limit_in_bytes", Value: "67108864", Swap: SwapMemsw,
					IfMissing: &Write{Path: "/cg/memory/api/x/" + n + "/memory.swappiness", Value: "0", Swap: SwapSwappiness}},
				{Path: "/cg/pids/" + n + "/pids.max", Value: "16"},
				{Path: "/cg/cpu/" + n + "/cpu.cfs_period_us", Value: "100000"},
				{Path: "/cg/cpu/" + n + "/cpu.cfs_quota_us", Value: "50000"},
			},
		}},
		// No cpu group without a quota: CPU time comes from cgroup2's cpu.stat.
		{"hybrid-no-limits-still-accounts", hybridHost, Config{Name: n}, Plan{
			Name: n,
			Dirs: []Dir{
				{Path: "/cg/unified/" + n, Parent: "/cg/unified", V2: true},
				{Path: "/cg/memory/api/x/" + n, Parent: "/cg/memory/api/x", Controllers: []string{Memory}},
				{Path: "/cg/pids/" + n, Parent: "/cg/pids", Controllers: []string{Pids}},
			},
		}},
		{"v2-all-limits", v2Host, all, Plan{
			Name: n,
			Enable: []Write{
				{Path: "/cg/user.slice/sup/cgroup.subtree_control", Value: "+memory"},
				{Path: "/cg/user.slice/sup/cgroup.subtree_control", Value: "+pids"},
				{Path: "/cg/user.slice/sup/cgroup.subtree_control", Value: "+cpu"},
			},
			Dirs: []Dir{{Path: "/cg/user.slice/sup/" + n, Parent: "/cg/user.slice/sup", V2: true, Controllers: []string{Memory, Pids, CPU}}},
			Limits: []Write{
				{Path: "/cg/user.slice/sup/" + n + "/memory.max", Value: "67108864"},
				{Path: "/cg/user.slice/sup/" + n + "/memory.swap.max", Value: "0", Swap: SwapMax},
				{Path: "/cg/user.slice/sup/" + n + "/pids.max", Value: "16"},
				{Path: "/cg/user.slice/sup/" + n + "/cpu.max", Value: "50000 100000"},
			},
		}},
		{"v2-pids-only-accounting-optional", v2Host, Config{Name: n, Pids: 8}, Plan{
			Name: n,
			Enable: []Write{
				{Path: "/cg/user.slice/sup/cgroup.subtree_control", Value: "+memory", Optional: true},
				{Path: "/cg/user.slice/sup/cgroup.subtree_control", Value: "+pids"},
			},
			Dirs:   []Dir{{Path: "/cg/user.slice/sup/" + n, Parent: "/cg/user.slice/sup", V2: true, Controllers: []string{Memory, Pids}}},
			Limits: []Write{{Path: "/cg/user.slice/sup/" + n + "/pids.max", Value: "8"}},
		}},
		{"v1-comounted-cpu-freezer", v1Host, Config{Name: n, CPUQuota: 1.5}, Plan{
			Name: n,
			Dirs: []Dir{
				{Path: "/cg/memory/" + n, Parent: "/cg/memory", Controllers: []string{Memory}},
				{Path: "/cg/pids/" + n, Parent: "/cg/pids", Controllers: []string{Pids}},
				{Path: "/cg/cpu,cpuacct/" + n, Parent: "/cg/cpu,cpuacct", Controllers: []string{CPU, CPUAcct}},
				{Path: "/cg/freezer/" + n, Parent: "/cg/freezer", Controllers: []string{Freezer}},
			},
			Limits: []Write{
				{Path: "/cg/cpu,cpuacct/" + n + "/cpu.cfs_period_us", Value: "100000"},
				{Path: "/cg/cpu,cpuacct/" + n + "/cpu.cfs_quota_us", Value: "150000"},
			},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := NewPlan(tt.host, tt.cfg)
			if err != nil {
				t.Fatalf("NewPlan(%s, %+v) error: %v", tt.host.Version, tt.cfg, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("NewPlan(%s, %+v) =\n%+v\nwant\n%+v", tt.host.Version, tt.cfg, got, tt.want)
			}
		})
	}
}

func TestNewPlanNoController(t *testing.T) {
	const n = "airlock-1-2-0123456789abcdef"
	noMem := hybridHost
	noMem.Controllers = map[string]string{Pids: "/cg/pids", CPU: "/cg/cpu"}
	tests := []struct {
		name string
		host Host
		cfg  Config
		want string // controller named in the error
	}{
		{"memory-absent", noMem, Config{Name: n, MemoryBytes: 1 << 20}, Memory},
		{"zero-host-pids", Host{}, Config{Name: n, Pids: 4}, Pids},
		{"zero-host-cpu", Host{}, Config{Name: n, CPUQuota: 1}, CPU},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewPlan(tt.host, tt.cfg)
			var ce *ControllerError
			if !errors.Is(err, ErrNoController) || !errors.As(err, &ce) || ce.Controller != tt.want {
				t.Fatalf("NewPlan(%+v) = %v, want a *ControllerError for %s", tt.cfg, err, tt.want)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	ok := "airlock-1-2-0123456789abcdef"
	tests := []struct {
		name  string
		cfg   Config
		valid bool
	}{
		{"ok", Config{Name: ok}, true},
		{"ok-limits", Config{Name: ok, MemoryBytes: 1, Pids: 1, CPUQuota: 0.01}, true},
		{"empty-name", Config{}, false},
		{"prefix-only", Config{Name: "airlock-"}, false},
		{"foreign-name", Config{Name: "user.slice"}, false},
		{"slash", Config{Name: "airlock-a/../../x"}, false},
		{"dotdot", Config{Name: "airlock-.."}, true}, // a plain name: dots are ordinary characters here
		{"space", Config{Name: "airlock-a b"}, false},
		{"negative-memory", Config{Name: ok, MemoryBytes: -1}, false},
		{"negative-pids", Config{Name: ok, Pids: -1}, false},
		{"negative-cpu", Config{Name: ok, CPUQuota: -0.5}, false},
		{"nan-cpu", Config{Name: ok, CPUQuota: math.NaN()}, false},
		{"inf-cpu", Config{Name: ok, CPUQuota: math.Inf(1)}, false},
		{"tiny-cpu", Config{Name: ok, CPUQuota: 0.001}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.cfg.validate(); (err == nil) != tt.valid {
				t.Errorf("validate(%+v) = %v, want valid=%v", tt.cfg, err, tt.valid)
			}
		})
	}
}
