package mcp

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
)

// requireSandbox skips unless this host can run the sandbox at all.
func requireSandbox(t *testing.T) {
	t.Helper()
	airtest.RequireUserNS(t)
	airtest.RequireLandlockABI(t, 4)
}

// realServer serves spec with the real sandbox and returns a connected
// client and the audit recorder.
func realServer(t *testing.T, spec policy.Spec) (*Server, *audit.Recorder) {
	t.Helper()
	requireSandbox(t)
	if spec.Budget.Wall == 0 {
		spec.Budget.Wall = 60 * time.Second
	}
	if os.Geteuid() != 0 {
		spec.AllowDowngrade = append(spec.AllowDowngrade, "max_memory", "max_pids", "max_cpu")
	}
	rec := &audit.Recorder{}
	return newServer(t, Config{Policy: mustPolicy(t, spec), Audit: rec}, nil), rec
}

func TestSandboxWriteRunRead(t *testing.T) {
	ws := t.TempDir()
	s, _ := realServer(t, policy.Spec{FSWrite: []string{ws}, AllowedTools: []string{"python3"}})
	cs, _ := connect(t, s)

	var w WriteFileOutput
	if res := call(t, cs, ToolWriteFile, map[string]any{"path": "in.csv", "content": "a\n1\n2\n3\n"}, &w); res.IsError || w.Bytes != 8 {
		t.Fatalf("write_file = %q %+v", text(res), w)
	}
	code := `import sys
total = sum(int(x) for x in open("in.csv").read().split()[1:])
open("result.txt", "w").write(str(total))
print("sum", total, "stdin", sys.stdin.read())`
	var run RunOutput
	res := call(t, cs, ToolRun, map[string]any{"code": code, "language": "python", "stdin": "hello"}, &run)
	if res.IsError || run.ExitCode != 0 || run.Stdout != "sum 6 stdin hello\n" {
		t.Fatalf("run = isError %v, exit %d, stdout %q, stderr %q, error %q", res.IsError, run.ExitCode, run.Stdout, run.Stderr, run.Error)
	}
	if !run.Enforcement.Namespaces || !run.Enforcement.Seccomp {
		t.Errorf("report enforcement = %+v, want namespaces and seccomp", run.Enforcement)
	}
	var r ReadFileOutput
	if res := call(t, cs, ToolReadFile, map[string]any{"path": filepath.Join(ws, "result.txt")}, &r); res.IsError || r.Content != "6" {
		t.Fatalf("read_file result.txt = %q %+v", text(res), r)
	}
	var l ListFilesOutput
	call(t, cs, ToolListFiles, nil, &l)
	var names []string
	for _, e := range l.Entries {
		names = append(names, e.Name)
	}
	if strings.Join(names, ",") != "in.csv,result.txt" {
		t.Errorf("workspace holds %v, want in.csv and result.txt (no code file left)", names)
	}

	var info SessionInfoOutput
	call(t, cs, ToolSessionInfo, nil, &info)
	if !info.Started || info.Usage == nil || info.Usage.Execs != 1 || info.Usage.Ops < 4 || info.Usage.SecondsLeft <= 0 {
		t.Errorf("session_info after a run = started %v usage %+v", info.Started, info.Usage)
	}
}

func TestSandboxDenials(t *testing.T) {
	ws := t.TempDir()
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret.txt"), []byte("TOP-SECRET"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "secret.txt"), filepath.Join(ws, "link")); err != nil {
		t.Fatal(err)
	}
	s, rec := realServer(t, policy.Spec{FSWrite: []string{ws}, AllowedTools: []string{"sh"}})
	cs, _ := connect(t, s)
	tests := []struct {
		name   string
		tool   string
		args   map[string]any
		rule   string
		target string // "" to skip
	}{
		{"dotdot", ToolReadFile, map[string]any{"path": "../etc/passwd"}, "fs_read", ""},
		{"absolute-outside", ToolReadFile, map[string]any{"path": "/etc/passwd"}, "fs_read", "/etc/passwd"},
		{"other-tempdir", ToolReadFile, map[string]any{"path": filepath.Join(outside, "secret.txt")}, "fs_read", filepath.Join(outside, "secret.txt")},
		{"symlink-out", ToolReadFile, map[string]any{"path": "link"}, "fs_read", ""},
		{"write-outside", ToolWriteFile, map[string]any{"path": "/etc/cron.d/x", "content": "x"}, "fs_write", "/etc/cron.d/x"},
		{"list-root", ToolListFiles, map[string]any{"path": "/root"}, "fs_read", "/root"},
		{"tool", ToolRun, map[string]any{"command": []string{"cat", "/etc/shadow"}}, "allowed_tools", "cat"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out struct {
				Denied *api.Denial `json:"denied"`
			}
			res := call(t, cs, tt.tool, tt.args, &out)
			if !res.IsError || out.Denied == nil {
				t.Fatalf("%s(%v) = isError %v %q, want a structured denial", tt.tool, tt.args, res.IsError, text(res))
			}
			if out.Denied.Rule != tt.rule || (tt.target != "" && out.Denied.Target != tt.target) || out.Denied.Message == "" {
				t.Errorf("%s(%v) denial = %+v, want rule %s target %q", tt.tool, tt.args, *out.Denied, tt.rule, tt.target)
			}
			if tt.name == "symlink-out" && out.Denied.Hint == "" {
				t.Errorf("symlink escape has no hint: %+v", *out.Denied)
			}
			if strings.Contains(text(res), "add ") {
				t.Errorf("%s(%v) tells the agent how to widen its policy: %q", tt.tool, tt.args, text(res))
			}
			if strings.Contains(text(res), "TOP-SECRET") {
				t.Errorf("%s(%v) leaked the secret: %q", tt.tool, tt.args, text(res))
			}
		})
	}

	// Inside the sandbox the same files do not exist.
	var run RunOutput
	res := call(t, cs, ToolRun, map[string]any{"code": "cat " + filepath.Join(outside, "secret.txt") + " /etc/shadow; cat link", "language": "sh"}, &run)
	if !res.IsError || strings.Contains(run.Stdout, "TOP-SECRET") {
		t.Errorf("sh reading outside files = exit %d stdout %q", run.ExitCode, run.Stdout)
	}
	denied := 0
	for _, e := range rec.Events() {
		if e.Kind == audit.Deny {
			denied++
		}
	}
	if denied < len(tests) {
		t.Errorf("audit recorded %d denials, want at least %d", denied, len(tests))
	}
}

func TestSandboxTimeout(t *testing.T) {
	s, _ := realServer(t, policy.Spec{AllowedTools: []string{"sh"}, Budget: budget.Limits{Wall: 60 * time.Second}})
	cs, _ := connect(t, s)
	var run RunOutput
	res := call(t, cs, ToolRun, map[string]any{"command": []string{"sh", "-c", "while :; do :; done"}, "timeout_seconds": 1}, &run)
	if !res.IsError || run.HaltedBy == nil || *run.HaltedBy != "max_wall" {
		t.Fatalf("run past timeout = isError %v halted_by %v exit %d: %q", res.IsError, run.HaltedBy, run.ExitCode, text(res))
	}
	if !strings.Contains(text(res), "halted by max_wall") {
		t.Errorf("text does not say halted by max_wall: %q", text(res))
	}
	// The session goes on after a timed-out exec.
	res = call(t, cs, ToolRun, map[string]any{"code": "echo still here", "language": "sh"}, &run)
	if res.IsError || run.Stdout != "still here\n" {
		t.Errorf("run after timeout = %q", text(res))
	}
}
