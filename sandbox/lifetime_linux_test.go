package sandbox_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// lifetimeSession starts a session with the given lifetimes.
func lifetimeSession(t *testing.T, spec policy.Spec, lifetime, maxLifetime time.Duration) *sandbox.Session {
	t.Helper()
	if os.Geteuid() != 0 {
		spec.AllowDowngrade = append(spec.AllowDowngrade, "max_memory", "max_pids", "max_cpu")
	}
	p, err := policy.New(spec)
	if err != nil {
		t.Fatal(err)
	}
	s, err := sandbox.NewSession(context.Background(), sandbox.Config{Policy: p, SessionLifetime: lifetime, SessionMaxLifetime: maxLifetime})
	if err != nil {
		t.Fatalf("NewSession: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestSessionOutlivesMaxWall: max_wall bounds each exec, not the session
// (before, a session died max_wall after it started, 30 s by default, and
// every later call said max_wall exhausted): with max_wall 1s a session
// runs an exec 2.5 s after its start, an exec longer than max_wall is
// killed at max_wall (a longer timeout is capped) and the session goes on.
func TestSessionOutlivesMaxWall(t *testing.T) {
	requireSandbox(t)
	s := lifetimeSession(t, policy.Spec{AllowedTools: []string{"sh", "sleep"}, Budget: budget.Limits{Wall: time.Second}}, time.Minute, 0)
	time.Sleep(2500 * time.Millisecond)
	wantExit(t, execIn(t, s, sandbox.ExecRequest{Args: []string{"sh", "-c", "echo alive"}}), 0)
	start := time.Now()
	rep := execIn(t, s, sandbox.ExecRequest{Args: []string{"sleep", "30"}, Timeout: time.Minute})
	wantHalt(t, rep, budget.MaxWall)
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("a 30 s sleep with max_wall 1s ran %v", d)
	}
	wantExit(t, execIn(t, s, sandbox.ExecRequest{Args: []string{"sh", "-c", "echo still"}}), 0)
	if info := s.Info(); info.ExecWall != "1s" || !info.Deadline.After(time.Now().Add(50*time.Second)) {
		t.Errorf("info: exec_wall %q, deadline %v; want 1s and about a minute from the start", info.ExecWall, info.Deadline)
	}
}

// TestSessionLifetimeAndExtend: a session ends at its lifetime, killed
// with everything in it, and Extend moves that end, never beyond the
// maximum lifetime from its start.
func TestSessionLifetimeAndExtend(t *testing.T) {
	requireSandbox(t)
	spec := policy.Spec{AllowedTools: []string{"sh"}, Budget: budget.Limits{Wall: 10 * time.Second}}
	short := lifetimeSession(t, spec, 2*time.Second, 0)
	rep := execIn(t, short, sandbox.ExecRequest{Args: []string{"sh", "-c", "while :; do :; done"}})
	if rep.HaltedBy == nil || *rep.HaltedBy != string(budget.SessionLifetime) {
		t.Errorf("an exec running when the lifetime ended: halted_by %v, exit %d, error %q; want session_lifetime", rep.HaltedBy, rep.ExitCode, rep.Error)
	}
	select {
	case <-short.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("a session with a 2 s lifetime was still up after 30 s")
	}
	if _, err := short.Exec(context.Background(), sandbox.ExecRequest{Args: []string{"sh", "-c", "true"}}); !errors.Is(err, sandbox.ErrSessionClosed) {
		t.Errorf("exec after the lifetime: %v, want ErrSessionClosed", err)
	}
	if _, err := short.Extend(time.Hour); !errors.Is(err, sandbox.ErrSessionClosed) {
		t.Errorf("extend after the lifetime: %v, want ErrSessionClosed", err)
	}

	s := lifetimeSession(t, spec, 2*time.Second, 6*time.Second)
	end, err := s.Extend(time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if max := s.Info().MaxDeadline; !end.Equal(max) || end.After(time.Now().Add(6*time.Second)) {
		t.Errorf("extend by an hour gave %v, want the maximum lifetime's end %v", end, max)
	}
	time.Sleep(3 * time.Second) // past the original lifetime
	wantExit(t, execIn(t, s, sandbox.ExecRequest{Args: []string{"sh", "-c", "echo extended"}}), 0)
	select {
	case <-s.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("a session was still up 30 s after its maximum lifetime")
	}
}

// TestSessionCloseDuringExec: an exec still running when its session is
// closed is halted with session_closed and keeps its output so far
// (before: exit 125, "the sandbox ended during the exec: signal: killed").
func TestSessionCloseDuringExec(t *testing.T) {
	requireSandbox(t)
	s := lifetimeSession(t, policy.Spec{AllowedTools: []string{"sh", "sleep"}}, time.Minute, 0)
	time.AfterFunc(time.Second, func() { s.Close() })
	rep := execIn(t, s, sandbox.ExecRequest{Args: []string{"sh", "-c", "echo started; sleep 20"}})
	wantHalt(t, rep, budget.SessionClosed)
	if rep.Stdout != "started\n" {
		t.Errorf("stdout = %q, want the output so far", rep.Stdout)
	}
	if _, err := s.Exec(context.Background(), sandbox.ExecRequest{Args: []string{"sh", "-c", "true"}}); !errors.Is(err, sandbox.ErrSessionClosed) {
		t.Errorf("exec after Close: %v, want ErrSessionClosed", err)
	}
}
