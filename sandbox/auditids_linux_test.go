package sandbox_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// TestAuditRunIDsAndExit: every audit event of a run carries its run id,
// the report names it, and the run ends with an exit event (before: no
// exit event and no id, so one audit file could not tell runs apart); a
// session's events carry the session's id and each exec ends with an exit
// event of its own.
func TestAuditRunIDsAndExit(t *testing.T) {
	requireSandbox(t)
	p, err := policy.New(policy.Spec{AllowedTools: []string{"sh", "cat"}, AllowDowngrade: rootlessDowngrades()})
	if err != nil {
		t.Fatal(err)
	}
	rec := &audit.Recorder{}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := (&sandbox.Cmd{Config: sandbox.Config{Policy: p, Audit: rec}, Args: []string{"/bin/sh", "-c", "exit 3"}, CommandIsGranted: true}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.RunID == "" || rep.ExitCode != 3 {
		t.Fatalf("report run_id %q, exit %d", rep.RunID, rep.ExitCode)
	}
	var exits int
	for _, e := range rec.Events() {
		if e.Run != rep.RunID {
			t.Errorf("event %+v does not carry run %s", e, rep.RunID)
		}
		if e.Kind == audit.Exit {
			exits++
			if !strings.Contains(e.Message, "exit 3") || e.Target != "/usr/bin/sh" && e.Target != "/bin/sh" {
				t.Errorf("exit event %+v", e)
			}
		}
	}
	if exits != 1 {
		t.Errorf("%d exit events for one run, want 1", exits)
	}

	srec := &audit.Recorder{}
	sp, err := policy.New(policy.Spec{AllowedTools: []string{"sh"}, AllowDowngrade: rootlessDowngrades()})
	if err != nil {
		t.Fatal(err)
	}
	s, err := sandbox.NewSession(ctx, sandbox.Config{Policy: sp, Audit: srec})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, script := range []string{"true", "cat /etc/shadow"} {
		if _, err := s.Exec(ctx, sandbox.ExecRequest{Args: []string{"sh", "-c", script}}); err != nil {
			t.Fatal(err)
		}
	}
	// A refused exec's report names its session too.
	if rep, err := s.Exec(ctx, sandbox.ExecRequest{Args: []string{"ls"}}); err != nil || rep.RunID != s.ID() {
		t.Errorf("refused exec: run_id %q (err %v), want the session's id %s", rep.RunID, err, s.ID())
	}
	execs := map[string]bool{}
	for _, e := range srec.Events() {
		if e.Run != s.ID() {
			t.Errorf("session event %+v does not carry the session's id %s", e, s.ID())
		}
		if e.Kind == audit.Exit {
			execs[e.Exec] = true
		}
	}
	if len(execs) != 2 || execs[""] {
		t.Errorf("exit events name execs %v, want two distinct ids", execs)
	}
}

// TestFileAPIDenialsStayOutOfExecReports: a file-API refusal is answered
// to its caller and audited, not reported again as a denial of the next,
// unrelated exec (before: two refused downloads of ../../etc/passwd were
// in the denials of a later `true`).
func TestFileAPIDenialsStayOutOfExecReports(t *testing.T) {
	requireSandbox(t)
	ws := t.TempDir()
	rec := &audit.Recorder{}
	p, err := policy.New(policy.Spec{FSWrite: []string{ws}, AllowedTools: []string{"sh"}, AllowDowngrade: rootlessDowngrades()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := sandbox.NewSession(ctx, sandbox.Config{Policy: p, Audit: rec})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Guard().Read(ws + "/../../etc/passwd"); err == nil {
		t.Fatal("the guard read a file outside the grants")
	}
	rep, err := s.Exec(ctx, sandbox.ExecRequest{Args: []string{"sh", "-c", "true"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Denials) != 0 || rep.DenialCounts.Total != 0 {
		t.Errorf("exec report carries the file API's denial: %+v", rep.Denials)
	}
	audited := false
	for _, e := range rec.Events() {
		audited = audited || e.Kind == audit.Deny && strings.Contains(e.Target, "passwd") && e.Run == s.ID()
	}
	if !audited {
		t.Errorf("the file API's denial is not in the audit log with the session's id")
	}
}
