package sandbox_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// TestSupervisorSignals: SIGINT, SIGTERM or SIGHUP to `airlock run` tears
// the sandbox down like a blown budget: exit 130, 143 or 129, a report that
// says halted_by "interrupted" with what ran (its output, the writes it
// made, copied back), and nothing left: no process, mount, cgroup or
// temporary folder.
func TestSupervisorSignals(t *testing.T) {
	requireSandbox(t)
	bin := filepath.Join(t.TempDir(), "airlock")
	goBuild(t, "../cmd/airlock", bin)
	goBuild(t, "../cmd/airlock-init", filepath.Join(filepath.Dir(bin), "airlock-init"))
	runTmp := t.TempDir()
	mountsBefore := mountinfo(t)
	cgroupDirs := ownCgroupDirs(t)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			var r [8]byte
			_, _ = rand.Read(r[:])
			mark := "airlock-sigtest-" + hex.EncodeToString(r[:])
			ws := t.TempDir()
			// The children ignore the signal themselves: only the teardown ends them.
			script := `echo started; echo before > ` + ws + `/before.txt; trap "" HUP INT TERM; (trap "" HUP INT TERM; while :; do :; done) & sleep 1000`
			args := []string{"run", "--json", "--fs-write", ws, "--tool", "sleep", "--env", "AIRLOCK_SIGTEST=" + mark, "--max-wall", "60s"}
			if os.Geteuid() != 0 {
				args = append(args, "--allow-downgrade", "max_memory", "--allow-downgrade", "max_pids", "--allow-downgrade", "max_cpu")
			}
			cmd := exec.Command(bin, append(args, "--", "/bin/sh", "-c", script, mark)...)
			cmd.Env = append(os.Environ(), "TMPDIR="+runTmp)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			cmd.WaitDelay = 10 * time.Second
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			start, _ := procStartTime(cmd.Process.Pid)
			// Wait until the sandboxed tree is running.
			deadline := time.Now().Add(20 * time.Second)
			for len(marked(t, mark)) < 3 {
				if time.Now().After(deadline) {
					_ = cmd.Process.Kill()
					t.Fatalf("the sandbox did not start within 20s\nstderr: %s", stderr.String())
				}
				time.Sleep(10 * time.Millisecond)
			}
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			err := cmd.Wait()
			if code := cmd.ProcessState.ExitCode(); code != 128+int(sig) {
				t.Fatalf("exit code = %d (%v), want %d\nstderr: %s", code, err, 128+int(sig), stderr.String())
			}
			var rep sandbox.Report
			if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
				t.Fatalf("report: %v\n%s", err, stdout.String())
			}
			if rep.HaltedBy == nil || *rep.HaltedBy != string(budget.Interrupted) || rep.ExitCode != 128+int(sig) {
				t.Fatalf("report halted_by %v, exit %d; want interrupted, %d", rep.HaltedBy, rep.ExitCode, 128+int(sig))
			}
			if !strings.Contains(rep.Stdout, "started") || !strings.Contains(rep.Error, "airlock received SIG") {
				t.Errorf("report stdout %q, error %q; want what ran and the signal named", rep.Stdout, rep.Error)
			}
			if b, err := os.ReadFile(filepath.Join(ws, "before.txt")); err != nil || string(b) != "before\n" {
				t.Errorf("the write made before the signal did not reach the host: %q, %v", b, err)
			}
			if alive := survivors(t, mark, time.Now().Add(10*time.Second)); len(alive) > 0 {
				t.Fatalf("processes survived:\n%s", strings.Join(alive, "\n"))
			}
			if left := groupsOf(t, cgroupDirs, map[owner]bool{{cmd.Process.Pid, start}: true}); len(left) > 0 {
				t.Errorf("cgroups left: %v", left)
			}
		})
	}
	if got := added(mountsBefore, mountinfo(t)); len(got) > 0 {
		t.Errorf("the host mount table gained entries:\n%s", strings.Join(got, "\n"))
	}
	if entries, _ := os.ReadDir(runTmp); len(entries) > 0 {
		t.Errorf("the runs' TMPDIR is not empty: %v", entries)
	}
}

// TestCancelledContext: a library caller's cancelled context halts the run
// and the report says so, with what ran.
func TestCancelledContext(t *testing.T) {
	requireSandbox(t)
	spec := policy.Spec{AllowedTools: []string{"sleep"}, Budget: budget.Limits{Wall: 30 * time.Second}}
	if os.Geteuid() != 0 {
		spec.AllowDowngrade = []string{"max_memory", "max_pids", "max_cpu"}
	}
	p, err := policy.New(spec)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var out lineWatch
	out.seen = make(chan struct{})
	cmd := &sandbox.Cmd{Config: sandbox.Config{Policy: p}, Args: []string{"/bin/sh", "-c", "echo started; sleep 1000"}, CommandIsGranted: true, Stdout: &out}
	go func() {
		<-out.seen
		cancel()
	}()
	rep, err := cmd.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.HaltedBy == nil || *rep.HaltedBy != string(budget.Interrupted) || rep.ExitCode != 124 || !strings.Contains(rep.Stdout, "started") {
		t.Fatalf("report: halted_by %v, exit %d, stdout %q, error %q; want interrupted, 124, the output so far", rep.HaltedBy, rep.ExitCode, rep.Stdout, rep.Error)
	}
	if !strings.Contains(rep.Error, "context canceled") {
		t.Errorf("report error %q does not say the context was cancelled", rep.Error)
	}
}

// lineWatch closes seen at the first write.
type lineWatch struct {
	seen chan struct{}
	done bool
}

func (l *lineWatch) Write(p []byte) (int, error) {
	if !l.done {
		l.done = true
		close(l.seen)
	}
	return len(p), nil
}
