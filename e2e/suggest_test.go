//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
)

// Every suggestion airlock prints must parse and, applied, allow the
// operation (issue 12 §5). Each scenario below runs a workload that is
// refused, takes the suggestions of the --json report (checking that the
// summary prints the same text), applies them to the policy with
// (*policy.Policy).Apply, runs again and checks that the operation now
// happens.

// runReport is the part of a --json report the scenarios read.
type runReport struct {
	ExitCode int     `json:"exit_code"`
	HaltedBy *string `json:"halted_by"`
	Stdout   string  `json:"stdout"`
	Stderr   string  `json:"stderr"`
	Error    string  `json:"error"`
	Denials  []struct {
		Layer, Op, Target, Rule, Message, Hint string
	} `json:"denials"`
	Operator *struct {
		Suggestions []struct {
			Layer, Op, Target, Rule string
			Suggestion              string
			Changes                 []policy.Change
		} `json:"suggestions"`
	} `json:"operator"`
}

// suggestions returns the report's suggestions, each checked to parse to
// its own changes.
func (r runReport) suggestions(t *testing.T) []policy.Suggestion {
	t.Helper()
	if r.Operator == nil {
		return nil
	}
	var out []policy.Suggestion
	for _, o := range r.Operator.Suggestions {
		s, err := policy.ParseSuggestion(o.Suggestion)
		if err != nil {
			t.Fatalf("suggestion %q does not parse: %v", o.Suggestion, err)
		}
		if !reflect.DeepEqual(s.Changes, o.Changes) {
			t.Fatalf("suggestion %q parses to %+v, but the report's changes are %+v", o.Suggestion, s.Changes, o.Changes)
		}
		out = append(out, s)
	}
	return out
}

// airlockRun runs `airlock run --policy file extra... -- argv...`, with
// --json or without, bounded in time.
func airlockRun(t *testing.T, bin, file string, json bool, extra, argv []string) (stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args := append([]string{"run", "--policy", file}, extra...)
	if json {
		args = append(args, "--json")
	}
	cmd := exec.CommandContext(ctx, bin, append(append(args, "--"), argv...)...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	_ = cmd.Run() // the exit status is the command's; the report says it
	if ctx.Err() != nil {
		t.Fatalf("airlock %q did not finish within 90s", args)
	}
	return o.String(), e.String()
}

func writePolicy(t *testing.T, p *policy.Policy) string {
	t.Helper()
	data, err := p.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "policy.json")
	if err := os.WriteFile(f, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// adviceBase makes a folder outside /tmp (which the sandbox replaces).
func adviceBase(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("/var/tmp", "l")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

type suggestScenario struct {
	name   string
	policy policy.Spec
	flags  []string // --fs-audit
	argv   []string
	// want are the suggestions the first run must print, exactly.
	want []string
	// denied reports whether the first run was refused; allowed whether
	// the run with the suggestions applied did the work.
	denied, allowed func(runReport) bool
	after           func(t *testing.T) // checks on the host after the second run
}

func TestSuggestionsApply(t *testing.T) {
	airtest.RequireRoot(t)
	airtest.RequireUserNS(t)
	airtest.RequireLandlockABI(t, 4)
	airtest.RequireBinary(t, "/usr/bin/python3")
	bin := mcpBinary(t)
	base := adviceBase(t)

	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello from the host") }))
	defer web.Close()
	// The host's loopback, by the name the sandbox reaches it with (its own
	// 127.0.0.1 is direct).
	webHP := "host.airlock.internal:" + web.URL[strings.LastIndexByte(web.URL, ':')+1:]

	data := filepath.Join(base, "data")
	if err := os.MkdirAll(filepath.Join(data, "pub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "notes.txt"), []byte("n"), 0o644); err != nil {
		t.Fatal(err)
	}
	script := func(name, text string) string {
		f := filepath.Join(base, name)
		if err := os.WriteFile(f, []byte(text), 0o755); err != nil {
			t.Fatal(err)
		}
		return f
	}
	py := script("hello.py", "#!/usr/bin/python3\nprint('hello from python')\n")
	envPy := script("hello-env.py", "#!/usr/bin/env python3\nprint('hello through env')\n")
	ws := filepath.Join(base, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	elfTool, loader := elfWithLoader(t, base)

	stdoutHas := func(s string) func(runReport) bool {
		return func(r runReport) bool { return r.ExitCode == 0 && strings.Contains(r.Stdout, s) }
	}
	exitIs := func(code int) func(runReport) bool { return func(r runReport) bool { return r.ExitCode == code } }
	fetch := `import os, urllib.request
o = urllib.request.build_opener(urllib.request.ProxyHandler({"http": os.environ["HTTP_PROXY"]}))
try:
    print(o.open("http://` + webHP + `/", timeout=20).read().decode())
except Exception as e:
    print("refused:", e)`
	scenarios := []suggestScenario{
		{name: "denied-host", policy: policy.Spec{NetHosts: []string{"allowed.test"}},
			argv:   []string{"python3", "-c", fetch},
			want:   []string{`add "` + webHP + `" to net_hosts`},
			denied: stdoutHas("refused"), allowed: stdoutHas("hello from the host")},
		{name: "denied-read-fs-audit", policy: policy.Spec{FSRead: []string{filepath.Join(data, "pub")}}, flags: []string{"--fs-audit"},
			argv: []string{"python3", "-c", "import os\nfor d in (" + fmt.Sprintf("%q", data) + ", '/'):\n    try: print(sorted(os.listdir(d)))\n    except OSError as e: print('refused', d, e)"},
			// "/" is refused too, but no policy may grant it: no suggestion.
			want:   []string{`add "` + data + `" to fs_read`},
			denied: stdoutHas("refused " + data), allowed: stdoutHas("'notes.txt'")},
		{name: "script-interpreter-missing", argv: []string{py},
			want:   []string{`add "/usr/bin/python3" to allowed_tools`},
			denied: exitIs(127), allowed: stdoutHas("hello from python")},
		{name: "env-script-program-missing", argv: []string{envPy},
			want:   []string{`add "/usr/bin/env" to allowed_tools and add "python3" to allowed_tools`},
			denied: exitIs(127), allowed: stdoutHas("hello through env")},
		{name: "elf-loader-missing", argv: []string{elfTool},
			want:   []string{`add "` + loader + `" to allowed_tools`},
			denied: exitIs(127), allowed: exitIs(0)},
		{name: "protected-write-back", policy: policy.Spec{FSWrite: []string{ws}},
			argv: []string{"python3", "-c", "import os\nos.makedirs('sub', exist_ok=True)\nopen('.envrc', 'w').write('top')\nopen('sub/.envrc', 'w').write('nested')"},
			want: []string{`add "` + filepath.Join(ws, ".envrc") + `" to fs_unprotect`,
				`add "` + filepath.Join(ws, "sub") + `" to fs_write and add "` + filepath.Join(ws, "sub", ".envrc") + `" to fs_unprotect`},
			denied: exitIs(0), allowed: exitIs(0),
			after: func(t *testing.T) {
				for _, f := range []string{".envrc", "sub/.envrc"} {
					if _, err := os.Stat(filepath.Join(ws, f)); err != nil {
						t.Errorf("with the suggestions applied, %s was still kept off the host: %v", f, err)
					}
				}
			}},
		{name: "budget-wall", policy: policy.Spec{Budget: budgetWall(time.Second)}, argv: []string{"python3", "-c", "import time; time.sleep(1.4); print('slept')"},
			want:   []string{`raise max_wall to "2s"`},
			denied: func(r runReport) bool { return r.HaltedBy != nil && *r.HaltedBy == "max_wall" }, allowed: stdoutHas("slept")},
		{name: "budget-output", policy: policy.Spec{Budget: budgetOutput(1024)}, argv: []string{"python3", "-c", "print('x' * 1500)"},
			want:   []string{`raise max_output_bytes to "2KiB"`},
			denied: func(r runReport) bool { return r.HaltedBy != nil && *r.HaltedBy == "max_output_bytes" }, allowed: stdoutHas(strings.Repeat("x", 1500))},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			p, err := policy.New(sc.policy)
			if err != nil {
				t.Fatal(err)
			}
			file := writePolicy(t, p)
			out, _ := airlockRun(t, bin, file, true, sc.flags, sc.argv)
			var rep runReport
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatalf("report is not JSON: %v\n%s", err, out)
			}
			if !sc.denied(rep) {
				t.Fatalf("the first run was not refused as expected: %s", out)
			}
			sugg := rep.suggestions(t)
			var got []string
			for _, s := range sugg {
				got = append(got, s.String())
			}
			if !reflect.DeepEqual(got, sc.want) {
				t.Fatalf("suggestions = %q, want %q\nreport: %s", got, sc.want, out)
			}
			// The operator's terminal prints the same advice.
			_, summary := airlockRun(t, bin, file, false, sc.flags, sc.argv)
			for _, s := range got {
				if !strings.Contains(summary, s) {
					t.Errorf("the summary lacks %q:\n%s", s, summary)
				}
			}
			if strings.Contains(summary, `add "/" to`) {
				t.Errorf("the summary suggests granting /:\n%s", summary)
			}
			np := p
			for _, s := range sugg {
				if np, err = np.Apply(s); err != nil {
					t.Fatalf("Apply(%q) = %v", s, err)
				}
			}
			out, _ = airlockRun(t, bin, writePolicy(t, np), true, sc.flags, sc.argv)
			var again runReport
			if err := json.Unmarshal([]byte(out), &again); err != nil {
				t.Fatalf("report is not JSON: %v\n%s", err, out)
			}
			if !sc.allowed(again) {
				t.Errorf("with %q applied the operation is still refused: %s", got, out)
			}
			if again.Operator != nil && len(again.Operator.Suggestions) > 0 {
				t.Errorf("with %q applied the run still suggests %+v", got, again.Operator.Suggestions)
			}
			if sc.after != nil {
				sc.after(t)
			}
		})
	}
}

func budgetWall(d time.Duration) budget.Limits { return budget.Limits{Wall: d} }

func budgetOutput(n int64) budget.Limits { return budget.Limits{OutputBytes: n} }

// elfWithLoader copies /usr/bin/true to dir with its PT_INTERP pointing at
// a copy of the host's dynamic loader in dir, which the sandbox does not
// have until it is allowed. It returns the tool and the loader.
func elfWithLoader(t *testing.T, dir string) (tool, loader string) {
	t.Helper()
	airtest.RequireBinary(t, "/usr/bin/true")
	f, err := elf.Open("/usr/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data, err := os.ReadFile("/usr/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	loader = filepath.Join(dir, "l")
	patched := false
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		orig := make([]byte, p.Filesz)
		if _, err := p.ReadAt(orig, 0); err != nil {
			t.Fatal(err)
		}
		real, err := filepath.EvalSymlinks(string(bytes.TrimRight(orig, "\x00")))
		if err != nil {
			t.Fatal(err)
		}
		ld, err := os.ReadFile(real)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(loader, ld, 0o755); err != nil {
			t.Fatal(err)
		}
		if uint64(len(loader)) >= p.Filesz {
			t.Skipf("loader path %s is longer than the PT_INTERP of /usr/bin/true", loader)
		}
		field := data[p.Off : p.Off+p.Filesz]
		clear(field)
		copy(field, loader)
		patched = true
	}
	if !patched {
		t.Skip("/usr/bin/true has no PT_INTERP (a static binary)")
	}
	tool = filepath.Join(dir, "true")
	if err := os.WriteFile(tool, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := exec.Command(tool).Run(); err != nil {
		t.Skipf("the patched /usr/bin/true does not run on the host: %v", err)
	}
	return tool, loader
}

// TestSuggestionsApplyServe: in `airlock serve --agent-advice`, a tool the
// session's policy lacks is refused with the suggestion that allows it,
// which works in a new session; the allowed sh runs by its /bin/sh name;
// and an exec that its own timeout ends is not advice to raise max_wall.
func TestSuggestionsApplyServe(t *testing.T) {
	airtest.RequireUserNS(t)
	airtest.RequireLandlockABI(t, 4)
	bin := mcpBinary(t)
	base := adviceBase(t)
	file := filepath.Join(base, "f.txt")
	if err := os.WriteFile(file, []byte("the content"), 0o644); err != nil {
		t.Fatal(err)
	}
	ceiling := writeCeiling(t, fmt.Sprintf("version: 1\nfs_write: [%s]\nallowed_tools: [sh, cat, sleep]\nbudget:\n  max_wall: 5m\n", base))
	p := startServe(t, bin, "--ceiling", ceiling, "--agent-advice")
	ctx := serveCtx(t)
	create := func(pol *policy.Policy) string {
		t.Helper()
		text, err := pol.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		status, body := rawAPI(t, ctx, p, "POST", "/v1/sessions", map[string]string{"policy": string(text)})
		var s struct {
			ID string `json:"id"`
		}
		if (status != 200 && status != 201) || json.Unmarshal(body, &s) != nil || s.ID == "" {
			t.Fatalf("create session = %d %s\n%s", status, body, p.logText())
		}
		return s.ID
	}
	exec := func(id string, req map[string]any) runReport {
		t.Helper()
		status, body := rawAPI(t, ctx, p, "POST", "/v1/sessions/"+id+"/exec", req)
		var out struct {
			Report runReport `json:"report"`
		}
		if status != 200 || json.Unmarshal(body, &out) != nil {
			t.Fatalf("exec %v = %d %s", req, status, body)
		}
		return out.Report
	}
	pol, err := policy.New(policy.Spec{FSWrite: []string{base}, AllowedTools: []string{"sh", "sleep"}, Budget: budget.Limits{Wall: 5 * time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	id := create(pol)

	rep := exec(id, map[string]any{"args": []string{"cat", file}})
	sugg := rep.suggestions(t)
	if rep.ExitCode != 127 || len(sugg) != 1 || sugg[0].String() != `add "cat" to allowed_tools` {
		t.Fatalf("exec cat = exit %d, suggestions %v; want 127 and add \"cat\" to allowed_tools", rep.ExitCode, sugg)
	}
	np, err := pol.Apply(sugg[0])
	if err != nil {
		t.Fatal(err)
	}
	if rep := exec(create(np), map[string]any{"args": []string{"cat", file}}); rep.ExitCode != 0 || rep.Stdout != "the content" {
		t.Errorf("with %q applied, exec cat = %+v", sugg[0], rep)
	}

	if rep := exec(id, map[string]any{"args": []string{"/bin/sh", "-c", "echo hi"}}); rep.ExitCode != 0 || rep.Stdout != "hi\n" || rep.Operator != nil {
		t.Errorf("exec /bin/sh with sh allowed = %+v; want it to run, with no advice", rep)
	}

	rep = exec(id, map[string]any{"args": []string{"sleep", "30"}, "timeout": "300ms"})
	if rep.HaltedBy == nil || *rep.HaltedBy != "max_wall" {
		t.Fatalf("exec sleep 30 with a 300ms timeout = %+v, want halted_by max_wall", rep)
	}
	if rep.Operator != nil {
		t.Errorf("an exec its own timeout ended suggests %+v; the session's max_wall was not the limit", rep.Operator.Suggestions)
	}
}
