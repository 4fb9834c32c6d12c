package mcp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/guard"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
)

// fakeSession stands in for a sandbox.Session in tests of the protocol
// plumbing only: its guard is the real one (on the real filesystem), its
// Exec records the request and answers with a canned report. What the
// kernel enforces is tested against the real sandbox in
// sandbox_linux_test.go.
type fakeSession struct {
	g  *guard.Guard
	ws string

	mu     sync.Mutex
	reqs   []api.ExecRequest // guarded by mu
	code   []string          // content of the code file, if any; guarded by mu
	closed bool              // guarded by mu
	done   chan struct{}     // closed by Close
	rep    api.Report        // what Exec returns; guarded by mu
	err    error             // what Exec returns; guarded by mu
	// run, when set, is what Exec does before it answers (with req's
	// writers), outside mu.
	run      func(req api.ExecRequest)
	deadline time.Time // guarded by mu: an hour after the start, then what Extend moved
}

func (f *fakeSession) Extend(d time.Duration) (time.Time, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return time.Time{}, api.ErrSessionClosed
	}
	from := f.deadline
	if now := time.Now(); from.Before(now) {
		from = now
	}
	f.deadline = from.Add(d)
	return f.deadline, nil
}

func (f *fakeSession) ID() string          { return "fake" }
func (f *fakeSession) Guard() *guard.Guard { return f.g }
func (f *fakeSession) Info() api.SessionInfo {
	f.mu.Lock()
	defer f.mu.Unlock()
	return api.SessionInfo{ID: "fake", Workspace: f.ws, Deadline: f.deadline}
}

func (f *fakeSession) Exec(ctx context.Context, req api.ExecRequest) (*api.Report, error) {
	if f.run != nil {
		f.run(req)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reqs = append(f.reqs, req)
	if last := req.Args[len(req.Args)-1]; strings.HasPrefix(filepath.Base(last), ".airlock-run-") {
		data, _ := os.ReadFile(last) // a missing file shows up as "" in the test
		f.code = append(f.code, string(data))
	}
	if f.err != nil {
		return nil, f.err
	}
	rep := f.rep
	return &rep, nil
}

func (f *fakeSession) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.closed {
		close(f.done)
	}
	f.closed = true
	return nil
}

// fakes returns a session factory that records the fakes it made.
type fakes struct {
	mu   sync.Mutex
	made []*fakeSession // guarded by mu
	rep  api.Report
	err  error
	run  func(req api.ExecRequest) // each fake's run
}

func (fs *fakes) new(ctx context.Context, p *policy.Policy) (Session, error) {
	ws := ""
	if w := p.FSWrite(); len(w) > 0 {
		ws = w[0]
	}
	g, err := guard.New(guard.Config{Policy: p, Cwd: ws})
	if err != nil {
		return nil, err
	}
	f := &fakeSession{g: g, ws: ws, rep: fs.rep, err: fs.err, run: fs.run, done: make(chan struct{}), deadline: time.Now().Add(time.Hour)}
	fs.mu.Lock()
	fs.made = append(fs.made, f)
	fs.mu.Unlock()
	return f, nil
}

func (fs *fakes) all() []*fakeSession {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return slices.Clone(fs.made)
}

func TestListTools(t *testing.T) {
	p := mustPolicy(t, policy.Spec{NetHosts: []string{"api.example.com"}, AllowedTools: []string{"python3"}})
	cs, _ := connect(t, newServer(t, Config{Policy: p}, (&fakes{}).new))
	res, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	desc := map[string]string{}
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		desc[tool.Name] = tool.Description
		if tool.OutputSchema == nil {
			t.Errorf("tool %s has no output schema", tool.Name)
		}
	}
	slices.Sort(names)
	want := []string{"extend_session", "list_files", "read_file", "run", "session_info", "write_file"}
	if !slices.Equal(names, want) {
		t.Fatalf("tools = %v, want %v", names, want)
	}
	for _, sub := range []string{"only to api.example.com", "only python3", "(python)"} {
		if !strings.Contains(desc["run"], sub) {
			t.Errorf("run description lacks %q:\n%s", sub, desc["run"])
		}
	}
	if !strings.Contains(desc["write_file"], "nothing under this policy") {
		t.Errorf("write_file description does not say nothing is writable:\n%s", desc["write_file"])
	}
}

func TestSessionInfoReflectsPolicy(t *testing.T) {
	dir := t.TempDir()
	ro, rw := filepath.Join(dir, "data"), filepath.Join(dir, "out")
	for _, d := range []string{ro, rw} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	p := mustPolicy(t, policy.Spec{
		FSRead: []string{ro}, FSWrite: []string{rw}, NetHosts: []string{"pypi.org:443"},
		AllowedTools: []string{"python3", "sh"}, Env: []string{"TOKEN=secret", "LANG"},
		Budget: budget.Limits{Wall: 90 * time.Second, Ops: 7},
	})
	fk := &fakes{}
	s := newServer(t, Config{Policy: p}, fk.new)
	cs, _ := connect(t, s)

	var info SessionInfoOutput
	res := call(t, cs, ToolSessionInfo, nil, &info)
	if res.IsError {
		t.Fatalf("session_info: %s", text(res))
	}
	if info.Started || info.Usage != nil || len(fk.all()) != 0 {
		t.Errorf("session_info started a sandbox: %+v", info)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"fs_read", info.FSRead, []string{ro}},
		{"fs_write", info.FSWrite, []string{rw}},
		{"net_hosts", info.NetHosts, []string{"pypi.org:443"}},
		{"allowed_tools", info.AllowedTools, []string{"python3", "sh"}},
		{"languages", info.Languages, []string{"python", "sh"}},
		{"env-names-only", info.Env, []string{"LANG", "TOKEN"}},
		{"max_wall", info.Budget.MaxWall, "1m30s"},
		{"max_ops", info.Budget.MaxOps, int64(7)},
		{"max_output_bytes", info.Budget.MaxOutputBytes, "1MiB"},
		{"workspace", info.Workspace, rw},
	}
	for _, c := range checks {
		if !equalJSON(c.got, c.want) {
			t.Errorf("session_info %s = %v, want %v", c.name, c.got, c.want)
		}
	}

	// After a tool call the session has started and counts usage.
	call(t, cs, ToolListFiles, nil, nil)
	call(t, cs, ToolSessionInfo, nil, &info)
	if !info.Started || info.Usage == nil || info.Usage.Ops != 1 || info.Usage.OpsLeft != 6 {
		t.Errorf("after list_files: started=%v usage=%+v, want started, 1 op, 6 left", info.Started, info.Usage)
	}
}

// equalJSON compares values the way they look in JSON, so that a nil and
// an empty slice differ only if their JSON does.
func equalJSON(a, b any) bool {
	switch a := a.(type) {
	case []string:
		bs, ok := b.([]string)
		if !ok {
			return false
		}
		sa, sb := slices.Clone(a), slices.Clone(bs)
		slices.Sort(sa)
		slices.Sort(sb)
		return slices.Equal(sa, sb)
	}
	return a == b
}

func TestRunInvalidArguments(t *testing.T) {
	p := mustPolicy(t, policy.Spec{AllowedTools: []string{"python3", "sh"}})
	fk := &fakes{}
	cs, _ := connect(t, newServer(t, Config{Policy: p}, fk.new))
	tests := []struct {
		name string
		args map[string]any
		want string // in the error text
	}{
		{"nothing", map[string]any{}, "give command"},
		{"both", map[string]any{"command": []string{"sh"}, "code": "1", "language": "python"}, "not both"},
		{"code-without-language", map[string]any{"code": "print(1)"}, "needs language: one of python, sh, bash"},
		{"unknown-language", map[string]any{"code": "1", "language": "cobol"}, `language "cobol" is not supported`},
		{"empty-argv0", map[string]any{"command": []string{""}}, "command[0] is empty"},
		{"negative-timeout", map[string]any{"command": []string{"sh"}, "timeout_seconds": -1}, "timeout_seconds -1 is out of range"},
		{"command-not-a-list", map[string]any{"command": "ls -l"}, "command"},
		{"unknown-field", map[string]any{"cmd": []string{"ls"}}, "cmd"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := call(t, cs, ToolRun, tt.args, nil)
			if !res.IsError || !strings.Contains(text(res), tt.want) {
				t.Errorf("run(%v) = isError %v %q, want an error containing %q", tt.args, res.IsError, text(res), tt.want)
			}
		})
	}
	if n := len(fk.all()); n != 0 {
		t.Errorf("invalid calls started %d sandboxes, want 0", n)
	}
}

func TestRunDeniedTool(t *testing.T) {
	for _, advice := range []bool{false, true} {
		t.Run(fmt.Sprintf("AgentAdvice=%v", advice), func(t *testing.T) { testRunDeniedTool(t, advice) })
	}
}

// testRunDeniedTool: a refused command is a structured denial; the policy
// change that would allow it reaches the agent only with AgentAdvice.
func testRunDeniedTool(t *testing.T, advice bool) {
	p := mustPolicy(t, policy.Spec{AllowedTools: []string{"sh", "/usr/bin/cat"}})
	fk := &fakes{}
	cs, _ := connect(t, newServer(t, Config{Policy: p, AgentAdvice: advice}, fk.new))
	tests := []struct {
		name   string
		args   map[string]any
		target string
	}{
		{"command", map[string]any{"command": []string{"curl", "http://evil.example"}}, "curl"},
		{"absolute-path", map[string]any{"command": []string{"/usr/bin/python3"}}, "/usr/bin/python3"},
		{"interpreter", map[string]any{"code": "print(1)", "language": "python"}, "python3"},
		{"bash-is-not-sh", map[string]any{"code": "echo", "language": "bash"}, "bash"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out RunOutput
			res := call(t, cs, ToolRun, tt.args, &out)
			if !res.IsError || out.Denied == nil {
				t.Fatalf("run(%v) = isError %v %q, want a structured denial", tt.args, res.IsError, text(res))
			}
			d := out.Denied
			if d.Target != tt.target || d.Rule != "allowed_tools" || d.Layer != "exec" || !strings.Contains(d.Message, "allowed: /usr/bin/cat, sh") {
				t.Errorf("run(%v) denial = %+v", tt.args, *d)
			}
			want := `add "` + tt.target + `" to allowed_tools`
			switch {
			case advice && (out.Operator == nil || len(out.Operator.Suggestions) != 1 || out.Operator.Suggestions[0].Suggestion != want || !strings.Contains(text(res), want)):
				t.Errorf("run(%v) with AgentAdvice: operator %+v, text %q; want the suggestion %s", tt.args, out.Operator, text(res), want)
			case !advice && (out.Operator != nil || strings.Contains(text(res), "add ")):
				t.Errorf("run(%v) tells the agent how to widen its policy: operator %+v, text %q", tt.args, out.Operator, text(res))
			}
			if out.ExitCode != 127 || len(out.Denials) != 1 {
				t.Errorf("run(%v) report = exit %d, %d denials; want 127 and the denial", tt.args, out.ExitCode, len(out.Denials))
			}
		})
	}
	if n := len(fk.all()); n != 0 {
		t.Errorf("denied runs started %d sandboxes, want 0", n)
	}
}

func TestRunRequest(t *testing.T) {
	ws := t.TempDir()
	fk := &fakes{rep: api.Report{ExitCode: 3, Stdout: "out\n", Stderr: "err\n"}}
	p := mustPolicy(t, policy.Spec{FSWrite: []string{ws}, AllowedTools: []string{"/usr/bin/python3", "sh"}})
	s := newServer(t, Config{Policy: p, Dir: "/tmp"}, fk.new)
	cs, closeAndWait := connect(t, s)

	var out RunOutput
	res := call(t, cs, ToolRun, map[string]any{"code": "print('hi')", "language": "Python", "stdin": "x", "timeout_seconds": 1.5}, &out)
	if !res.IsError || out.ExitCode != 3 || out.Stdout != "out\n" {
		t.Errorf("run = isError %v, %+v; want isError and the fake's report", res.IsError, out.Report)
	}
	for _, sub := range []string{"exit code 3", "--- stdout ---\nout", "--- stderr ---\nerr"} {
		if !strings.Contains(text(res), sub) {
			t.Errorf("run text lacks %q:\n%s", sub, text(res))
		}
	}
	call(t, cs, ToolRun, map[string]any{"code": "echo hi", "language": "sh"}, &out) // the fake's report again; what counts is the request below

	made := fk.all()
	if len(made) != 1 {
		t.Fatalf("two runs made %d sandboxes, want 1", len(made))
	}
	f := made[0]
	f.mu.Lock()
	reqs, code := f.reqs, f.code
	f.mu.Unlock()
	if len(reqs) != 2 {
		t.Fatalf("Exec called %d times, want 2", len(reqs))
	}
	py := reqs[0]
	if len(py.Args) != 2 || py.Args[0] != "/usr/bin/python3" || filepath.Dir(py.Args[1]) != ws || py.Dir != "/tmp" || py.Timeout != 1500*time.Millisecond || py.Stdin == nil {
		t.Errorf("python exec = %+v", py)
	}
	if len(code) != 1 || code[0] != "print('hi')" {
		t.Errorf("code file held %q, want the code", code)
	}
	if _, err := os.Stat(py.Args[1]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("code file %s left behind: %v", py.Args[1], err)
	}
	if got := reqs[1].Args; !slices.Equal(got, []string{"sh", "-c", "echo hi"}) || reqs[1].Stdin != nil {
		t.Errorf("sh exec args = %q, stdin %v", got, reqs[1].Stdin)
	}

	// The sandbox closes when the client goes.
	closeAndWait()
	select {
	case <-f.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the sandbox was not closed after the client left")
	}
}

func TestRunExecErrors(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"session-ended", fmt.Errorf("%w: deadline", api.ErrSessionClosed), "the session has ended"},
		{"internal", errors.New("clone: /secret/host/path: EPERM"), "internal error in airlock"},
		{"budget", &budget.ExhaustedError{Limit: budget.MaxOps}, "denied exec sh (max_ops): max_ops exhausted"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustPolicy(t, policy.Spec{AllowedTools: []string{"sh"}})
			cs, _ := connect(t, newServer(t, Config{Policy: p}, (&fakes{err: tt.err}).new))
			res := call(t, cs, ToolRun, map[string]any{"command": []string{"sh"}}, nil)
			if !res.IsError || !strings.Contains(text(res), tt.want) || strings.Contains(text(res), "/secret") {
				t.Errorf("run with Exec error %v = isError %v %q, want %q", tt.err, res.IsError, text(res), tt.want)
			}
		})
	}
}

func TestSandboxStartFailure(t *testing.T) {
	p := mustPolicy(t, policy.Spec{AllowedTools: []string{"sh"}})
	fail := func(context.Context, *policy.Policy) (Session, error) {
		return nil, errors.New("mount /secret/host/path: EPERM")
	}
	cs, _ := connect(t, newServer(t, Config{Policy: p}, fail))
	res := call(t, cs, ToolRun, map[string]any{"command": []string{"sh"}}, nil)
	if !res.IsError || !strings.Contains(text(res), "could not start") || strings.Contains(text(res), "/secret") {
		t.Errorf("run = isError %v %q, want a public start failure", res.IsError, text(res))
	}
}

func TestMaxSessions(t *testing.T) {
	p := mustPolicy(t, policy.Spec{AllowedTools: []string{"sh"}})
	fk := &fakes{}
	s := newServer(t, Config{Policy: p, MaxSessions: 1}, fk.new)
	a, closeA := connect(t, s)
	b, _ := connect(t, s)
	if res := call(t, a, ToolListFiles, map[string]any{"path": "/"}, nil); strings.Contains(text(res), "too many") {
		t.Fatalf("first session refused: %s", text(res))
	}
	if res := call(t, b, ToolListFiles, map[string]any{"path": "/"}, nil); !res.IsError || !strings.Contains(text(res), "too many sandbox sessions") {
		t.Fatalf("second session = %q, want too many sessions", text(res))
	}
	closeA()
	select {
	case <-fk.all()[0].done:
	case <-time.After(30 * time.Second):
		t.Fatal("the first sandbox was not closed after its client left")
	}
	if res := call(t, b, ToolListFiles, map[string]any{"path": "/"}, nil); strings.Contains(text(res), "too many") {
		t.Fatalf("after the first left, second session still refused: %s", text(res))
	}
}

// TestSessionEndedIsStructured: once the sandbox session has ended, every
// tool answers the same way: a structured budget denial naming why it
// ended (session_lifetime, or session_closed when nothing says more) with
// the hint to start a new MCP session (before: run answered with text
// only, and the file tools with a budget denial that had no hint).
func TestSessionEndedIsStructured(t *testing.T) {
	ws := t.TempDir()
	p := mustPolicy(t, policy.Spec{FSWrite: []string{ws}, AllowedTools: []string{"sh"}})
	fk := &fakes{err: fmt.Errorf("%w: closed", api.ErrSessionClosed)}
	cs, _ := connect(t, newServer(t, Config{Policy: p}, fk.new))
	check := func(tool string, args map[string]any, rule string) {
		t.Helper()
		var out struct {
			Denied *api.Denial `json:"denied"`
		}
		res := call(t, cs, tool, args, &out)
		if !res.IsError || out.Denied == nil || out.Denied.Layer != audit.LayerBudget || out.Denied.Rule != rule || !strings.Contains(out.Denied.Hint, "new MCP session") {
			t.Errorf("%s after the session ended: isError %v, denied %+v, text %q; want a budget denial %s with the hint", tool, res.IsError, out.Denied, text(res), rule)
		}
	}
	check(ToolRun, map[string]any{"command": []string{"sh"}}, string(budget.SessionClosed))
	fk.all()[0].g.Meter().Halt(budget.SessionLifetime)
	check(ToolRun, map[string]any{"command": []string{"sh"}}, string(budget.SessionLifetime))
	check(ToolReadFile, map[string]any{"path": "x"}, string(budget.SessionLifetime))
	check(ToolWriteFile, map[string]any{"path": "x", "content": "y"}, string(budget.SessionLifetime))
}
