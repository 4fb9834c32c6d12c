package sandbox_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// Advice is the operator's and must be right (issue 12 §5): a failed exec
// names the real cause, and an exec that did not fail is not an
// allowed_tools denial.

// suggestionsOf returns the text of a report's operator suggestions.
func suggestionsOf(rep *sandbox.Report) []string {
	var out []string
	if rep.Operator != nil {
		for _, o := range rep.Operator.Suggestions {
			out = append(out, o.Suggestion)
		}
	}
	return out
}

// TestExecFailureNamesInterpreter: an allowed script whose #! interpreter
// is not allowed fails with ENOENT; the report names the interpreter, and
// the suggestion, applied, lets it run.
func TestExecFailureNamesInterpreter(t *testing.T) {
	requireSandbox(t)
	airtest.RequireBinary(t, "/usr/bin/python3")
	dir := t.TempDir()
	script := filepath.Join(dir, "hello.py")
	if err := os.WriteFile(script, []byte("#!/usr/bin/python3\nprint('hello')\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	spec := policy.Spec{AllowedTools: []string{script}}
	s := newSession(t, spec)
	rep := execIn(t, s, sandbox.ExecRequest{Args: []string{script}})
	wantExit(t, rep, 127)
	if !strings.Contains(rep.Error, `interpreter "/usr/bin/python3"`) {
		t.Errorf("error = %q, want it to name the #! interpreter", rep.Error)
	}
	got := suggestionsOf(rep)
	if len(got) != 1 || got[0] != `add "/usr/bin/python3" to allowed_tools` {
		t.Fatalf("suggestions = %q, want the interpreter, not the script", got)
	}
	for _, d := range rep.Denials {
		if strings.Contains(d.Hint, "add ") {
			t.Errorf("the agent's hint widens the policy: %q", d.Hint)
		}
	}
	sg, err := policy.ParseSuggestion(got[0])
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Policy().Apply(sg)
	if err != nil {
		t.Fatal(err)
	}
	spec.AllowedTools = p.AllowedTools()
	rep = execIn(t, newSession(t, spec), sandbox.ExecRequest{Args: []string{script}})
	wantExit(t, rep, 0)
	if rep.Stdout != "hello\n" {
		t.Errorf("with %q applied: stdout %q", got[0], rep.Stdout)
	}
}

// TestExecEndedIsNotADenial: an exec that the session's end cut short did
// not fail to start; before, it was reported as an allowed_tools denial
// with the advice to allow the tool that had just run.
func TestExecEndedIsNotADenial(t *testing.T) {
	requireSandbox(t)
	s := newSession(t, policy.Spec{AllowedTools: []string{"sh"}})
	pr, pw := io.Pipe()
	done := make(chan *sandbox.Report, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		rep, _ := s.Exec(ctx, sandbox.ExecRequest{Args: []string{"sh", "-c", "echo started; exec sleep 30"}, Stdout: pw})
		pw.Close()
		done <- rep
	}()
	buf := make([]byte, 8)
	if _, err := io.ReadFull(pr, buf); err != nil || string(buf) != "started\n" {
		t.Fatalf("the exec did not start: %q, %v", buf, err)
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }() // drains until the exec ends; its error is the pipe closing
	s.Close()
	var rep *sandbox.Report
	select {
	case rep = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("the exec did not end with the session")
	}
	if rep == nil {
		t.Fatal("Exec of a started command returned no report")
	}
	for _, d := range rep.Denials {
		if d.Rule == "allowed_tools" {
			t.Errorf("an exec of the allowed sh cut short by the session's end is reported as %+v", d)
		}
	}
	if got := suggestionsOf(rep); len(got) > 0 {
		t.Errorf("suggestions = %q, want none", got)
	}
}

// TestExecTimeoutIsNotBudgetAdvice: an exec its own timeout ended gets no
// advice to raise the policy's max_wall, which was not the limit; one the
// session's deadline ended does.
func TestExecTimeoutIsNotBudgetAdvice(t *testing.T) {
	requireSandbox(t)
	s := newSession(t, policy.Spec{AllowedTools: []string{"sh"}})
	rep := execIn(t, s, sandbox.ExecRequest{Args: []string{"sh", "-c", "while :; do :; done"}, Timeout: 300 * time.Millisecond})
	wantHalt(t, rep, budget.MaxWall)
	if got := suggestionsOf(rep); len(got) > 0 {
		t.Errorf("an exec halted by its own timeout suggests %q", got)
	}
	short := newSession(t, policy.Spec{AllowedTools: []string{"sh"}, Budget: budget.Limits{Wall: 2 * time.Second}})
	rep = execIn(t, short, sandbox.ExecRequest{Args: []string{"sh", "-c", "while :; do :; done"}})
	if rep.HaltedBy != nil && *rep.HaltedBy == "max_wall" {
		if got := suggestionsOf(rep); len(got) != 1 || got[0] != `raise max_wall to "4s"` {
			t.Errorf("an exec halted by the session's max_wall suggests %q, want raise max_wall to \"4s\"", got)
		}
	}
}

// TestSessionBinShIsTheAllowedSh: the sandbox's /bin -> usr/bin symlink
// makes /bin/sh the allowed /usr/bin/sh, so an exec by that name runs
// instead of being refused with advice to allow what is allowed.
func TestSessionBinShIsTheAllowedSh(t *testing.T) {
	requireSandbox(t)
	if l, err := os.Readlink("/bin"); err != nil || strings.TrimPrefix(l, "/") != "usr/bin" {
		t.Skip("/bin is not a symlink to usr/bin on this host")
	}
	s := newSession(t, policy.Spec{AllowedTools: []string{"sh"}})
	rep := execIn(t, s, sandbox.ExecRequest{Args: []string{"/bin/sh", "-c", "echo hi"}})
	wantExit(t, rep, 0)
	if rep.Stdout != "hi\n" || len(rep.Denials) != 0 {
		t.Errorf("exec /bin/sh = stdout %q, denials %+v", rep.Stdout, rep.Denials)
	}
	// A tool that is not allowed is still refused, by either name.
	for _, name := range []string{"/bin/cat", "/usr/bin/cat", "cat"} {
		wantExit(t, execIn(t, s, sandbox.ExecRequest{Args: []string{name, "/etc/hostname"}}), 127)
	}
}

// TestBudgetRefusalAdvisesNothing: a program that uses up max_ops through
// the egress proxy reads the proxy's refusals, and its exec report lists
// the budget denials; neither tells it to raise its own budget (that is
// the operator's advice: the report's operator field, stripped from what
// agents get, and the audit log).
func TestBudgetRefusalAdvisesNothing(t *testing.T) {
	requireSandbox(t)
	airtest.RequireBinary(t, "/usr/bin/python3")
	s := newSession(t, policy.Spec{NetHosts: []string{"allowed.test"}, AllowedTools: []string{"python3"},
		Budget: budget.Limits{Wall: 20 * time.Second, Ops: 4}})
	code := `import os, socket
host, port = os.environ["HTTP_PROXY"].rsplit("/", 1)[1].split(":")
for i in range(8):
    try:
        c = socket.create_connection((host, int(port)), timeout=5)
        c.sendall(b"GET http://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
        print(c.recv(4096).decode(errors="replace"))
        c.close()
    except OSError as e:
        print("error", e)
`
	rep := execIn(t, s, sandbox.ExecRequest{Args: []string{"python3", "-c", code}})
	if rep.HaltedBy == nil || *rep.HaltedBy != string(budget.MaxOps) {
		t.Fatalf("halted_by = %v, want max_ops; stdout:\n%s", rep.HaltedBy, rep.Stdout)
	}
	seen := map[string]string{"stdout (the proxy's refusals)": rep.Stdout, "error": rep.Error}
	for i, d := range rep.Denials {
		seen["denial "+strconv.Itoa(i)+" message"] = d.Message
		seen["denial "+strconv.Itoa(i)+" hint"] = d.Hint
	}
	for what, text := range seen {
		if widening.MatchString(text) {
			t.Errorf("%s tells the program to widen its budget: %q", what, text)
		}
	}
}

// widening matches advice that widens a policy.
var widening = regexp.MustCompile(`(?i)\braise\b|\bto allow more\b|\badd "`)
