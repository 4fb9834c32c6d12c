package policy_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
	"github.com/airlock-sandbox/airlock/policy/hostspec"
)

// mustParse parses a policy that the test knows to be valid.
func mustParse(t *testing.T, in string) *policy.Policy {
	t.Helper()
	p, err := policy.Parse([]byte(in), policy.ParseOptions{BaseDir: "/base"})
	if err != nil {
		t.Fatalf("Parse(%q) = %v", in, err)
	}
	return p
}

// TestDefaultDenies checks that the default policy denies every capability
// with a *DenyError naming it.
func TestDefaultDenies(t *testing.T) {
	p := policy.Default()
	tests := []struct {
		name string
		err  error
		cap  policy.Capability
	}{
		{"read", p.CheckRead("/", "/etc/passwd"), policy.FSRead},
		{"read-relative", p.CheckRead("/work", "data"), policy.FSRead},
		{"write", p.CheckWrite("/", "/tmp/x"), policy.FSWrite},
		{"host", p.CheckHost("api.github.com", 443), policy.NetHosts},
		{"host-ip", p.CheckHost("127.0.0.1", 8080), policy.NetHosts},
		{"tool", p.CheckTool("python3"), policy.AllowedTools},
		{"tool-path", p.CheckTool("/bin/sh"), policy.AllowedTools},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var de *policy.DenyError
			if !errors.As(tt.err, &de) {
				t.Fatalf("Check = %v, want a *DenyError", tt.err)
			}
			if de.Cap != tt.cap {
				t.Errorf("Check = %v with Cap %v, want Cap %v", tt.err, de.Cap, tt.cap)
			}
			if !errors.Is(tt.err, policy.ErrDenied) {
				t.Errorf("errors.Is(%v, ErrDenied) = false, want true", tt.err)
			}
		})
	}
	if got, want := p.Budget(), (budget.Limits{}).WithDefaults(); got != want {
		t.Errorf("Default().Budget() = %+v, want %+v", got, want)
	}
	if len(p.FSRead())+len(p.FSWrite())+len(p.NetHosts())+len(p.AllowedTools())+len(p.Env())+len(p.Downgrades()) != 0 {
		t.Errorf("Default() grants something: %s", p.Summary())
	}
	if !policy.Equal(p, mustParse(t, "version: 1\n")) {
		t.Errorf("Default() differs from the empty policy file")
	}
}

func TestCheckPaths(t *testing.T) {
	p := mustParse(t, "version: 1\nfs_read: [/work, /etc/ssl/certs]\nfs_write: [/work/out, /scratch]\n")
	tests := []struct {
		name      string
		path      string
		read, wrt bool
	}{
		{"read-root", "/work", true, false},
		{"read-child", "/work/a/b.csv", true, false},
		{"prefix-not-child", "/workshop", false, false},
		{"prefix-not-child-file", "/workshop/x", false, false},
		{"dotdot-escape", "/work/../etc/passwd", false, false},
		{"write-implies-read", "/scratch/x", true, true},
		{"write-child", "/work/out/r.txt", true, true},
		{"write-sibling", "/work/outside", true, false},
		{"outside", "/etc/passwd", false, false},
		{"relative", "out/x", true, true}, // against cwd /work
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := p.CheckRead("/work", tt.path); (err == nil) != tt.read {
				t.Errorf("CheckRead(/work, %q) = %v, want allowed=%v", tt.path, err, tt.read)
			}
			if err := p.CheckWrite("/work", tt.path); (err == nil) != tt.wrt {
				t.Errorf("CheckWrite(/work, %q) = %v, want allowed=%v", tt.path, err, tt.wrt)
			}
		})
	}
}

// TestReadDoesNotImplyWrite is the reverse of write-implies-read.
func TestReadDoesNotImplyWrite(t *testing.T) {
	p := mustParse(t, "version: 1\nfs_read: [/data]\n")
	err := p.CheckWrite("/", "/data/x")
	var de *policy.DenyError
	if !errors.As(err, &de) || de.Cap != policy.FSWrite {
		t.Errorf("CheckWrite(/data/x) = %v, want a fs_write *DenyError", err)
	}
}

func TestCheckTool(t *testing.T) {
	p := mustParse(t, "version: 1\nallowed_tools: [python3, /usr/bin//env]\n")
	tests := []struct {
		name string
		tool string
		want bool
	}{
		{"name", "python3", true},
		{"cleaned-path", "/usr/bin/env", true},
		{"other-name", "python", false},
		{"path-of-name", "/usr/bin/python3", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := p.CheckTool(tt.tool); (err == nil) != tt.want {
				t.Errorf("CheckTool(%q) = %v, want allowed=%v", tt.tool, err, tt.want)
			}
		})
	}
}

// TestImmutable mutates every slice an accessor returns and checks that
// the policy does not change.
func TestImmutable(t *testing.T) {
	in := "version: 1\nfs_read: [/a]\nfs_write: [/b]\nnet_hosts: [api.github.com]\nallowed_tools: [python3]\nenv: [A=1]\nallow_downgrade: [landlock]\n"
	p := mustParse(t, in)
	before, err := p.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	p.FSRead()[0] = "/"
	p.FSWrite()[0] = "/"
	p.NetHosts()[0] = hostspec.Pattern{}
	p.AllowedTools()[0] = "sh"
	p.Env()[0].Value = "2"
	p.Downgrades()[0] = policy.DowngradeCPU
	_ = append(p.FSRead()[:0], "/x") // appending to a returned slice must not reach the policy
	after, err := p.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if string(before) != string(after) {
		t.Errorf("policy changed through an accessor:\nbefore %s\nafter  %s", before, after)
	}
	if p.CanRead("/etc") || !p.AllowsTool("python3") || p.AcceptsDowngrade(policy.DowngradeCPU) {
		t.Errorf("policy decisions changed through an accessor")
	}
}

func TestParseCanonical(t *testing.T) {
	in := "version: 1\nfs_read: [/b, /a, /a/, /b//]\nallowed_tools: [z, a, z]\nenv: [ZED, A=x=y, B=]\nallow_downgrade: [max_cpu, landlock, max_cpu]\n"
	p := mustParse(t, in)
	if got, want := p.FSRead(), []string{"/a", "/b"}; !slices.Equal(got, want) {
		t.Errorf("FSRead() = %q, want %q", got, want)
	}
	if got, want := p.AllowedTools(), []string{"a", "z"}; !slices.Equal(got, want) {
		t.Errorf("AllowedTools() = %q, want %q", got, want)
	}
	wantEnv := []policy.EnvVar{{Name: "A", Value: "x=y", HasValue: true}, {Name: "B", HasValue: true}, {Name: "ZED"}}
	if got := p.Env(); len(got) != len(wantEnv) || got[0] != wantEnv[0] || got[1] != wantEnv[1] || got[2] != wantEnv[2] {
		t.Errorf("Env() = %+v, want %+v", got, wantEnv)
	}
	if got := p.Downgrades(); len(got) != 2 || got[0] != policy.DowngradeLandlock || got[1] != policy.DowngradeCPU {
		t.Errorf("Downgrades() = %q, want [landlock max_cpu]", got)
	}
}

func TestNew(t *testing.T) {
	p, err := policy.New(policy.Spec{
		FSRead:       []string{"/data"},
		FSWrite:      []string{"/out"},
		AllowedTools: []string{"python3"},
		Env:          []string{"LANG"},
		Budget:       budget.Limits{Ops: 5},
	})
	if err != nil {
		t.Fatalf("New = %v", err)
	}
	want := mustParse(t, "version: 1\nfs_read: [/data]\nfs_write: [/out]\nallowed_tools: [python3]\nenv: [LANG]\nbudget: {max_ops: 5}\n")
	if !policy.Equal(p, want) {
		t.Errorf("New = %s, want %s", p.Summary(), want.Summary())
	}
}

// TestNewErrors checks that New applies the file rules and names the field.
func TestNewErrors(t *testing.T) {
	tests := []struct {
		name string
		spec policy.Spec
		want string
	}{
		{"relative", policy.Spec{FSRead: []string{"data"}}, `fs_read "data": relative path with no base folder: use an absolute path`},
		{"tilde", policy.Spec{FSWrite: []string{"~/x"}}, `fs_write "~/x": ~ is not expanded: write the absolute path`},
		{"root", policy.Spec{FSRead: []string{"/"}}, `fs_read "/": / would grant the whole host`},
		{"sys", policy.Spec{FSRead: []string{"/sys"}}, `fs_read "/sys": the sandbox mounts its own /proc; /sys is never granted`},
		{"empty", policy.Spec{AllowedTools: []string{""}}, `allowed_tools "": is empty`},
		{"nul", policy.Spec{FSRead: []string{"/a\x00"}}, `fs_read "/a\x00": contains a NUL byte`},
		{"env-proxy", policy.Spec{Env: []string{"http_proxy"}}, `env "http_proxy": airlock sets http_proxy itself`},
		{"env-dup", policy.Spec{Env: []string{"A", "A=1"}}, `env "A=1": A is listed twice: keep one`},
		{"downgrade", policy.Spec{AllowDowngrade: []string{"seccomp"}}, `allow_downgrade "seccomp": is not a known downgrade`},
		{"negative-budget", policy.Spec{Budget: budget.Limits{Memory: -1}}, `max_memory -1B must be positive`},
		{"huge-budget", policy.Spec{Budget: budget.Limits{Pids: 1 << 40}}, `max_pids 1099511627776 is above the largest allowed max_pids 1000000`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := policy.New(tt.spec)
			var pe *policy.ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("New(%+v) = %v, %v, want a *ParseError", tt.spec, p, err)
			}
			if pe.Line != 0 || len(pe.Msg) < len(tt.want) || pe.Msg[:len(tt.want)] != tt.want {
				t.Errorf("New(%+v) = %q, want %q...", tt.spec, pe.Error(), tt.want)
			}
		})
	}
}
