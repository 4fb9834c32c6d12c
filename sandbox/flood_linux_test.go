package sandbox_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// socksDenials is a python3 program that sends SOCKS5 connects to names
// net_hosts does not grant: argv[1] of them to repeat.example, then 5 to
// distinct names, then forever more when argv[2] is "forever".
const socksDenials = `import socket, struct, sys
def ask(host):
    try:
        s = socket.create_connection(("127.0.0.1", 1080), timeout=5)
        s.sendall(b"\x05\x01\x00")
        if s.recv(2) == b"\x05\x00":
            s.sendall(b"\x05\x01\x00\x03" + bytes([len(host)]) + host + struct.pack(">H", 443))
            s.recv(10)
        s.close()
    except OSError:
        pass
for i in range(int(sys.argv[1])):
    ask(b"repeat.example")
for i in range(5):
    ask(b"distinct-%d.example" % i)
while sys.argv[2] == "forever":
    ask(b"repeat.example")
`

func floodSpec(ops int64) policy.Spec {
	return policy.Spec{NetHosts: []string{"granted.example:443"}, AllowedTools: []string{"sh", "python3"},
		Budget: budget.Limits{Ops: ops, CPU: time.Minute}}
}

// TestSessionReportsBackgroundDenials: denials that a background process
// provokes between execs are in the session info and in the next exec's
// report (deduplicated, counted), and only there: the recorder is trimmed
// at each report.
func TestSessionReportsBackgroundDenials(t *testing.T) {
	requireSandbox(t)
	airtest.RequireBinary(t, "/usr/bin/python3")
	s := newSession(t, floodSpec(100000))
	rep := execIn(t, s, sandbox.ExecRequest{Args: []string{"sh", "-c", `python3 -c "$0" 30 once >/dev/null 2>&1 &`, socksDenials}})
	wantExit(t, rep, 0)

	// 35 denials arrive in the background; the session info shows them.
	deadline := time.Now().Add(20 * time.Second)
	for s.Info().DenialCounts.Total < 35 {
		if time.Now().After(deadline) {
			t.Fatalf("session info after 20s: %+v; want 35 denials from the background process", s.Info())
		}
		<-time.After(10 * time.Millisecond) // polling a counter the proxy bumps
	}
	info := s.Info()
	if len(info.PendingDenials) != 6 || info.PendingDenials[0].Target != "repeat.example:443" || info.PendingDenials[0].Count != 30 {
		t.Errorf("pending denials = %+v, want repeat.example ×30 and 5 distinct", info.PendingDenials)
	}

	rep = execIn(t, s, sandbox.ExecRequest{Args: []string{"sh", "-c", "true"}})
	wantExit(t, rep, 0)
	if len(rep.Denials) != 6 || rep.Denials[0].Count != 30 || rep.DenialCounts.Total != 35 || rep.DenialCounts.ByLayer["net"] != 35 {
		t.Errorf("next exec: denials %+v, counts %+v; want the background's 35 denials as repeat.example ×30 and 5 distinct", rep.Denials, rep.DenialCounts)
	}
	rep = execIn(t, s, sandbox.ExecRequest{Args: []string{"sh", "-c", "true"}})
	if len(rep.Denials) != 0 || rep.DenialCounts.Total != 0 {
		t.Errorf("the exec after that: denials %+v, counts %+v; want none (each denial is reported once)", rep.Denials, rep.DenialCounts)
	}
	info = s.Info()
	if len(info.PendingDenials) != 0 || info.DenialCounts.Total != 35 {
		t.Errorf("session info = pending %+v, counts %+v; want nothing pending and 35 in all", info.PendingDenials, info.DenialCounts)
	}
}

// TestSessionEndsWhenOpsRunOut: a flood of denials spends the session's
// max_ops; the exec running it is halted by max_ops and the session ends,
// whether the flood runs in the exec or in the background.
func TestSessionEndsWhenOpsRunOut(t *testing.T) {
	requireSandbox(t)
	airtest.RequireBinary(t, "/usr/bin/python3")
	t.Run("exec", func(t *testing.T) {
		s := newSession(t, floodSpec(50))
		rep := execIn(t, s, sandbox.ExecRequest{Timeout: 20 * time.Second, Args: []string{"python3", "-c", socksDenials, "0", "forever"}})
		if rep.HaltedBy == nil || *rep.HaltedBy != string(budget.MaxOps) || rep.ExitCode != 124 {
			t.Errorf("flooding exec: exit %d, halted_by %v, %d ms; want 124, max_ops", rep.ExitCode, deref(rep.HaltedBy), rep.DurationMS)
		}
		if rep.Usage.Ops > 50 || rep.DenialCounts.Total == 0 {
			t.Errorf("flooding exec: ops %d, denial_counts %+v; want at most 50 ops and the denials counted", rep.Usage.Ops, rep.DenialCounts)
		}
		waitEnded(t, s)
	})
	t.Run("background", func(t *testing.T) {
		s := newSession(t, floodSpec(50))
		rep := execIn(t, s, sandbox.ExecRequest{Args: []string{"sh", "-c", `python3 -c "$0" 0 forever >/dev/null 2>&1 &`, socksDenials}})
		wantExit(t, rep, 0)
		waitEnded(t, s)
	})
}

func waitEnded(t *testing.T, s *sandbox.Session) {
	t.Helper()
	select {
	case <-s.Done():
	case <-time.After(20 * time.Second):
		t.Fatalf("session still live 20s into a flood past max_ops: %+v", s.Info())
	}
	_, err := s.Exec(context.Background(), sandbox.ExecRequest{Args: []string{"sh", "-c", "true"}})
	if !errors.Is(err, sandbox.ErrSessionClosed) {
		t.Errorf("Exec after the session's ops ran out = %v, want ErrSessionClosed", err)
	}
}

func deref(s *string) string {
	if s == nil {
		return "null"
	}
	return *s
}
