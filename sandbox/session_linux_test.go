package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
	"github.com/airlock-sandbox/airlock/sandbox"
)

func newSession(t *testing.T, spec policy.Spec) *sandbox.Session {
	t.Helper()
	if spec.Budget.Wall == 0 {
		spec.Budget.Wall = 60 * time.Second
	}
	if os.Geteuid() != 0 {
		spec.AllowDowngrade = append(spec.AllowDowngrade, "max_memory", "max_pids", "max_cpu")
	}
	p, err := policy.New(spec)
	if err != nil {
		t.Fatal(err)
	}
	s, err := sandbox.NewSession(context.Background(), sandbox.Config{Policy: p})
	if err != nil {
		t.Fatalf("NewSession: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func execIn(t *testing.T, s *sandbox.Session, req sandbox.ExecRequest) *sandbox.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rep, err := s.Exec(ctx, req)
	if err != nil {
		t.Fatalf("Exec(%v): %v", req.Args, err)
	}
	return rep
}

func TestSessionLifecycle(t *testing.T) {
	requireSandbox(t)
	tr := newTree(t)
	s := newSession(t, policy.Spec{FSWrite: []string{tr.out}, AllowedTools: []string{"python3", "sh", "cat"}})

	// Files in through the guard, code run inside, result out through the guard.
	if err := s.Guard().Write(filepath.Join(tr.out, "in.csv"), []byte("a\n1\n2\n3\n")); err != nil {
		t.Fatal(err)
	}
	rep := execIn(t, s, sandbox.ExecRequest{Args: []string{"python3", "-c",
		`open("result.txt","w").write(str(sum(int(x) for x in open("in.csv").read().split()[1:])))`}})
	wantExit(t, rep, 0)
	got, err := s.Guard().Read(filepath.Join(tr.out, "result.txt"))
	if err != nil || string(got) != "6" {
		t.Fatalf("result.txt = %q, %v; want 6", got, err)
	}

	// A background process started by one exec is there for the next.
	rep = execIn(t, s, sandbox.ExecRequest{Args: []string{"sh", "-c", "(while :; do sleep 1; done) >/dev/null 2>&1 & echo $! > /tmp/bg.pid"}})
	wantExit(t, rep, 0)
	rep = execIn(t, s, sandbox.ExecRequest{Args: []string{"sh", "-c", `kill -0 "$(cat /tmp/bg.pid)" && echo alive`}})
	wantExit(t, rep, 0)
	if !strings.Contains(rep.Stdout, "alive") {
		t.Fatalf("background process gone between execs: %q %q", rep.Stdout, rep.Stderr)
	}

	// Stdin and per-exec env.
	rep = execIn(t, s, sandbox.ExecRequest{Args: []string{"sh", "-c", `cat; echo "$GREETING"`}, Stdin: strings.NewReader("from stdin\n"), Env: []string{"GREETING=hi"}})
	wantExit(t, rep, 0)
	if rep.Stdout != "from stdin\nhi\n" {
		t.Fatalf("stdout = %q", rep.Stdout)
	}

	if info := s.Info(); info.Execs != 4 || info.Usage.Ops < 4 {
		t.Errorf("Info = %+v, want 4 execs and ops counted", info)
	}
	s.Close()
	if _, err := s.Exec(context.Background(), sandbox.ExecRequest{Args: []string{"sh", "-c", "true"}}); !errors.Is(err, sandbox.ErrSessionClosed) {
		t.Fatalf("Exec after Close: %v, want ErrSessionClosed", err)
	}
}

func TestSessionRefusals(t *testing.T) {
	requireSandbox(t)
	s := newSession(t, policy.Spec{AllowedTools: []string{"sh"}})
	tests := []struct {
		name string
		req  sandbox.ExecRequest
		code int
	}{
		{"tool-not-allowed", sandbox.ExecRequest{Args: []string{"python3", "-c", "pass"}}, 127},
		{"absolute-path-not-allowed", sandbox.ExecRequest{Args: []string{"/usr/bin/python3"}}, 127},
		{"relative-path", sandbox.ExecRequest{Args: []string{"./sh"}}, 127},
		{"env-path", sandbox.ExecRequest{Args: []string{"sh", "-c", "true"}, Env: []string{"PATH=/tmp"}}, 125},
		{"env-ld-preload", sandbox.ExecRequest{Args: []string{"sh", "-c", "true"}, Env: []string{"LD_PRELOAD=/tmp/x.so"}}, 125},
		{"dir-outside", sandbox.ExecRequest{Args: []string{"sh", "-c", "true"}, Dir: "/root"}, 125},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := execIn(t, s, tt.req)
			wantExit(t, rep, tt.code)
		})
	}
	rep := execIn(t, s, sandbox.ExecRequest{Args: []string{"python3"}})
	if len(rep.Denials) == 0 || rep.Denials[0].Rule != "allowed_tools" {
		t.Fatalf("denials = %+v, want one naming allowed_tools", rep.Denials)
	}
}

func TestSessionExecTimeoutAndOutputCap(t *testing.T) {
	requireSandbox(t)
	s := newSession(t, policy.Spec{AllowedTools: []string{"sh", "yes"}, Budget: budget.Limits{OutputBytes: 4096}})
	rep := execIn(t, s, sandbox.ExecRequest{Args: []string{"sh", "-c", "while :; do :; done"}, Timeout: time.Second})
	wantHalt(t, rep, budget.MaxWall)
	rep = execIn(t, s, sandbox.ExecRequest{Args: []string{"yes"}})
	wantHalt(t, rep, budget.MaxOutputBytes)
	if len(rep.Stdout) != 4096 {
		t.Fatalf("kept %d bytes, want 4096", len(rep.Stdout))
	}
	// The session goes on after an exec's halt.
	rep = execIn(t, s, sandbox.ExecRequest{Args: []string{"sh", "-c", "echo ok"}})
	wantExit(t, rep, 0)
}

func TestSessionMaxOps(t *testing.T) {
	requireSandbox(t)
	tr := newTree(t)
	s := newSession(t, policy.Spec{FSWrite: []string{tr.out}, AllowedTools: []string{"sh"}, Budget: budget.Limits{Ops: 3}})
	wantExit(t, execIn(t, s, sandbox.ExecRequest{Args: []string{"sh", "-c", "true"}}), 0)
	if err := s.Guard().Write(filepath.Join(tr.out, "x"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	wantExit(t, execIn(t, s, sandbox.ExecRequest{Args: []string{"sh", "-c", "true"}}), 0)
	wantHalt(t, execIn(t, s, sandbox.ExecRequest{Args: []string{"sh", "-c", "true"}}), budget.MaxOps)
	if _, err := s.Guard().Read(filepath.Join(tr.out, "x")); !errors.Is(err, budget.ErrExhausted) {
		t.Fatalf("Guard after max_ops: %v, want ErrExhausted", err)
	}
}

// TestSessionsIsolated: concurrent sessions with different grants cannot
// see each other's files or processes.
func TestSessionsIsolated(t *testing.T) {
	requireSandbox(t)
	const n = 6
	dirs := make([]string, n)
	sessions := make([]*sandbox.Session, n)
	for i := range n {
		dirs[i] = t.TempDir()
		if err := os.WriteFile(filepath.Join(dirs[i], "secret"), []byte(fmt.Sprintf("secret-%d", i)), 0o644); err != nil {
			t.Fatal(err)
		}
		sessions[i] = newSession(t, policy.Spec{FSWrite: []string{dirs[i]}, AllowedTools: []string{"sh", "cat", "ls"}})
	}
	var wg sync.WaitGroup
	errs := make(chan string, n*n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range n {
				rep, err := sessions[i].Exec(context.Background(), sandbox.ExecRequest{Args: []string{"cat", filepath.Join(dirs[j], "secret")}})
				if err != nil {
					errs <- err.Error()
					continue
				}
				if (i == j) != (rep.ExitCode == 0) {
					errs <- fmt.Sprintf("session %d reading session %d's secret: exit %d %q", i, j, rep.ExitCode, rep.Stdout)
				}
			}
			rep, err := sessions[i].Exec(context.Background(), sandbox.ExecRequest{Args: []string{"ls", "/proc"}})
			if err != nil {
				errs <- err.Error()
				return
			}
			var pids []string
			for _, f := range strings.Fields(rep.Stdout) {
				if strings.Trim(f, "0123456789") == "" {
					pids = append(pids, f)
				}
			}
			if len(pids) > 4 {
				errs <- fmt.Sprintf("session %d sees processes beyond its own: %v", i, pids)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// TestSessionExecUsage: each exec's report carries its own usage: the CPU
// time and peak memory of its process tree (wait4), its ops and output.
func TestSessionExecUsage(t *testing.T) {
	requireSandbox(t)
	airtest.RequireBinary(t, "/usr/bin/python3")
	s := newSession(t, policy.Spec{AllowedTools: []string{"python3", "sh"}, Budget: budget.Limits{CPU: 20 * time.Second}})
	rep := execIn(t, s, sandbox.ExecRequest{Args: []string{"python3", "-c", `
import time
b = bytearray(96 << 20)
for i in range(0, len(b), 4096):
    b[i] = 1
end = time.process_time() + 0.5
while time.process_time() < end:
    pass
print("done")`}})
	wantExit(t, rep, 0)
	if rep.Usage.CPUMS < 400 || rep.Usage.MaxMemoryBytes < 96<<20 || rep.Usage.Ops != 1 || rep.Usage.OutputBytes != 5 {
		t.Fatalf("usage = %+v, want >= 400 ms CPU, >= 96 MiB peak, 1 op, 5 output bytes", rep.Usage)
	}
	rep = execIn(t, s, sandbox.ExecRequest{Args: []string{"sh", "-c", "true"}})
	wantExit(t, rep, 0)
	if rep.Usage.CPUMS > 200 || rep.Usage.MaxMemoryBytes >= 96<<20 || rep.Usage.Ops != 1 {
		t.Fatalf("second exec's usage = %+v: it carries the first exec's", rep.Usage)
	}

	// An exec that uses max_cpu is halted by it, and says how much it used.
	s2 := newSession(t, policy.Spec{AllowedTools: []string{"python3"}, Budget: budget.Limits{CPU: time.Second}})
	rep = execIn(t, s2, sandbox.ExecRequest{Args: []string{"python3", "-c", "while True: pass"}})
	wantHalt(t, rep, budget.MaxCPU)
	// Its own CPU time, most of the second: not the exact limit, since
	// rusage's split of a loaded machine's time (the unprivileged run
	// enforces max_cpu with RLIMIT_CPU alone) was seen at 833 ms in CI.
	if rep.Usage.CPUMS < 500 {
		t.Fatalf("usage of the exec halted by max_cpu = %+v, want its CPU time (at least 500 ms of the 1 s)", rep.Usage)
	}
}
