package policy_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
)

func mustSpec(t testing.TB, s policy.Spec) *policy.Policy {
	t.Helper()
	p, err := policy.New(s)
	if err != nil {
		t.Fatalf("policy.New(%+v): %v", s, err)
	}
	return p
}

func add(key, val string) policy.Change {
	return policy.Change{Action: policy.ActionAdd, Key: key, Value: val}
}

func remove(key, val string) policy.Change {
	return policy.Change{Action: policy.ActionRemove, Key: key, Value: val}
}

func raise(key, val string) policy.Change {
	return policy.Change{Action: policy.ActionRaise, Key: key, Value: val}
}

func TestSuggestionText(t *testing.T) {
	tests := []struct {
		name string
		s    policy.Suggestion
		text string
	}{
		{"add", policy.Suggestion{Changes: []policy.Change{add("net_hosts", "evil.test:8000")}}, `add "evil.test:8000" to net_hosts`},
		{"remove", policy.Suggestion{Changes: []policy.Change{remove("fs_deny", "/w/secret")}}, `remove "/w/secret" from fs_deny`},
		{"raise", policy.Suggestion{Changes: []policy.Change{raise("max_wall", "1m")}}, `raise max_wall to "1m"`},
		{"two", policy.Suggestion{Changes: []policy.Change{add("fs_write", "/w/sub"), add("fs_unprotect", "/w/sub/.envrc")}},
			`add "/w/sub" to fs_write and add "/w/sub/.envrc" to fs_unprotect`},
		{"quotes-and-and", policy.Suggestion{Changes: []policy.Change{add("fs_read", `/a" and add "/ to fs_read`)}}, `add "/a\" and add \"/ to fs_read" to fs_read`},
		{"unicode", policy.Suggestion{Changes: []policy.Change{add("fs_read", "/données")}}, `add "/données" to fs_read`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.s.String(); got != tt.text {
				t.Errorf("String() = %q, want %q", got, tt.text)
			}
			got, err := policy.ParseSuggestion(tt.text)
			if err != nil || !reflect.DeepEqual(got, tt.s) {
				t.Errorf("ParseSuggestion(%q) = %+v, %v, want %+v", tt.text, got, err, tt.s)
			}
		})
	}
}

func TestParseSuggestionErrors(t *testing.T) {
	for _, text := range []string{
		"",
		"add",
		`add "/x"`,
		`add "/x" to`,
		`add "/x" to fs_reed`,
		`add "/x" to budget`,
		`add /x to fs_read`,
		`add '/x' to fs_read`,
		"add `/x` to fs_read",
		`add "/x" into fs_read`,
		`add  "/x" to fs_read`,
		`add "/x" to fs_read `,
		`add "/x" to fs_read and`,
		`add "/x" to fs_read or add "/y" to fs_read`,
		`add "/x" to fs_read; add "/y" to fs_read`,
		`remove "/x" to fs_deny`,
		`raise max_wall "1m"`,
		`raise max_wall to 1m`,
		`raise max_wall to "1 minute"`,
		`raise max_ops to "1e3"`,
		`raise fs_read to "1m"`,
		`grant "/x" to fs_read`,
		`add "/x" to fs_read if it should run`,
		`raise max_wall in the policy's budget if the work needs more`,
	} {
		if s, err := policy.ParseSuggestion(text); err == nil {
			t.Errorf("ParseSuggestion(%q) = %+v, want an error", text, s)
		}
	}
}

func TestApply(t *testing.T) {
	base := mustSpec(t, policy.Spec{FSRead: []string{"/data"}, FSWrite: []string{"/w"}, FSDeny: []string{"/w/secret"},
		NetHosts: []string{"api.test"}, AllowedTools: []string{"sh"}, Env: []string{"LANG=C"},
		Budget: budget.Limits{Wall: 10 * time.Second}})
	tests := []struct {
		name    string
		changes []policy.Change
		check   func(*policy.Policy) bool
		wantErr string
	}{
		{"add-read", []policy.Change{add("fs_read", "/etc/ssl/x")}, func(p *policy.Policy) bool { return p.CanRead("/etc/ssl/x") }, ""},
		{"remove-deny", []policy.Change{remove("fs_deny", "/w/secret")}, func(p *policy.Policy) bool { return p.CanRead("/w/secret") }, ""},
		{"raise-wall", []policy.Change{raise("max_wall", "20s")}, func(p *policy.Policy) bool { return p.Budget().Wall == 20*time.Second }, ""},
		{"keeps-the-rest", []policy.Change{add("allowed_tools", "cat")}, func(p *policy.Policy) bool {
			return p.AllowsTool("sh") && p.AllowsTool("cat") && p.AllowsHost("api.test", 443) && p.Budget().Wall == 10*time.Second && len(p.Env()) == 1
		}, ""},
		{"add-root", []policy.Change{add("fs_read", "/")}, nil, "/ would grant the whole host"},
		{"add-proc", []policy.Change{add("fs_read", "/proc/1")}, nil, "its own /proc"},
		{"remove-missing", []policy.Change{remove("fs_deny", "/w/other")}, nil, "holds no"},
		{"lower-budget", []policy.Change{raise("max_wall", "5s")}, nil, "already"},
		{"bad-key", []policy.Change{add("fs_reed", "/x")}, nil, "not a policy list"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			np, err := base.Apply(policy.Suggestion{Changes: tt.changes})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Apply(%v) = %v, want an error containing %q", tt.changes, err, tt.wantErr)
				}
				return
			}
			if err != nil || !tt.check(np) {
				t.Fatalf("Apply(%v) = %v, %v; the change did not take", tt.changes, np.Summary(), err)
			}
		})
	}
	if !base.AllowsTool("sh") || base.AllowsTool("cat") || base.CanRead("/w/secret") {
		t.Errorf("Apply changed the policy it was called on")
	}
}

// applies checks that s is the want text, that it parses back to s, and
// that applied to p it gives a valid policy for which ok holds.
func applies(t *testing.T, p *policy.Policy, s policy.Suggestion, want string, ok func(*policy.Policy) bool) {
	t.Helper()
	if got := s.String(); got != want {
		t.Fatalf("suggestion = %q, want %q", got, want)
	}
	if want == "" {
		return
	}
	back, err := policy.ParseSuggestion(s.String())
	if err != nil || !reflect.DeepEqual(back, s) {
		t.Fatalf("ParseSuggestion(%q) = %+v, %v", s, back, err)
	}
	np, err := p.Apply(back)
	if err != nil {
		t.Fatalf("Apply(%q) = %v", s, err)
	}
	if !ok(np) {
		t.Fatalf("Apply(%q) does not allow the operation", s)
	}
}

func TestSuggestRead(t *testing.T) {
	p := mustSpec(t, policy.Spec{FSRead: []string{"/data/public"}, FSWrite: []string{"/w"}, FSDeny: []string{"/w/secret"}})
	tests := []struct {
		name, path, want string
	}{
		{"outside", "/root/.aws/credentials", `add "/root/.aws/credentials" to fs_read`},
		{"parent-of-grant", "/data", `add "/data" to fs_read`},
		{"denied", "/w/secret/key", `remove "/w/secret" from fs_deny`},
		{"root", "/", ""},
		{"proc", "/proc/1/environ", ""},
		{"sys", "/sys/kernel", ""},
		{"relative", "data/x", ""},
		{"tilde", "~/.aws", ""},
		{"granted-already", "/data/public/x", ""}, // refused while resolving: a hint's job
		{"control-char", "/data/x\x1b[2J", ""},
		{"too-long", "/" + strings.Repeat("a", policy.MaxSuggestionLen), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			applies(t, p, p.SuggestRead(tt.path), tt.want, func(np *policy.Policy) bool { return np.CanRead(tt.path) })
		})
	}
}

func TestSuggestWrite(t *testing.T) {
	p := mustSpec(t, policy.Spec{FSRead: []string{"/data"}, FSWrite: []string{"/w"}, FSDeny: []string{"/w/secret"}, FSProtect: []string{"/w/keep"}})
	tests := []struct {
		name, path, root, want string
	}{
		{"outside", "/data/out.csv", "", `add "/data/out.csv" to fs_write`},
		{"new-file-existing-folder", "/data/new/deeper/f", "/data", `add "/data" to fs_write`},
		{"builtin-protected", "/w/.envrc", "", `add "/w/.envrc" to fs_unprotect`},
		{"builtin-protected-inside", "/w/.git/hooks/post-checkout", "", `add "/w/.git/hooks" to fs_unprotect`},
		{"fs-protect", "/w/keep/x", "", `remove "/w/keep" from fs_protect`},
		{"fs-deny", "/w/secret/x", "", `remove "/w/secret" from fs_deny`},
		{"new-grant-protects-it", "/home/u/.bashrc", "/home/u", `add "/home/u" to fs_write and add "/home/u/.bashrc" to fs_unprotect`},
		{"root-outside-path-ignored", "/data/x", "/elsewhere", `add "/data/x" to fs_write`},
		{"root", "/", "", ""},
		{"proc", "/proc/self/mem", "", ""},
		{"granted-already", "/w/x", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			applies(t, p, p.SuggestWrite(tt.path, tt.root), tt.want, func(np *policy.Policy) bool { return np.CanWrite(tt.path) })
		})
	}
	// Suggest follows the DenyError the checks return.
	err := p.CheckWrite("/", "/w/.envrc")
	de, ok := err.(*policy.DenyError)
	if !ok || !de.Protected {
		t.Fatalf("CheckWrite(/w/.envrc) = %v, want a protected DenyError", err)
	}
	if got := p.Suggest(de).String(); got != `add "/w/.envrc" to fs_unprotect` {
		t.Errorf("Suggest(protected write) = %q, want fs_unprotect, never fs_write", got)
	}
}

func TestSuggestWriteBack(t *testing.T) {
	p := mustSpec(t, policy.Spec{FSWrite: []string{"/w"}, FSProtect: []string{"/w/keep"}})
	tests := []struct {
		name, path, want string
	}{
		{"top-envrc", "/w/.envrc", `add "/w/.envrc" to fs_unprotect`},
		{"top-hooks", "/w/.git/hooks/post-checkout", `add "/w/.git/hooks" to fs_unprotect`},
		{"nested-envrc", "/w/sub/.envrc", `add "/w/sub" to fs_write and add "/w/sub/.envrc" to fs_unprotect`},
		{"nested-hooks", "/w/a/b/.git/hooks/x", `add "/w/a/b" to fs_write and add "/w/a/b/.git/hooks" to fs_unprotect`},
		{"fs-protect", "/w/keep/x", `remove "/w/keep" from fs_protect`},
		{"bare-repo-hooks", "/w/r.git/hooks/x", ""}, // no built-in entry covers it at the top of a grant
		{"plain-file", "/w/notes.txt", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			applies(t, p, p.SuggestWriteBack(tt.path), tt.want, func(np *policy.Policy) bool { return np.WriteBackRefusal(tt.path) == "" })
		})
	}
}

func TestSuggestHost(t *testing.T) {
	p := mustSpec(t, policy.Spec{NetHosts: []string{"api.test"}})
	tests := []struct {
		name, target, want string
	}{
		{"name", "evil.test:8000", `add "evil.test:8000" to net_hosts`},
		{"ip", "10.0.0.5:443", `add "10.0.0.5:443" to net_hosts`},
		{"ipv6", "[::1]:80", `add "[::1]:80" to net_hosts`},
		{"other-port", "api.test:8443", `add "api.test:8443" to net_hosts`},
		{"no-port", "evil.test", ""},
		{"port-zero", "evil.test:0", ""},
		{"bad-name", "evil..test:80", ""},
		{"url", "http://evil.test/x", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			applies(t, p, p.SuggestHost(tt.target), tt.want, func(np *policy.Policy) bool {
				for _, h := range np.NetHosts() {
					if h.String() == tt.target || h.String()+":80" == tt.target {
						return true
					}
				}
				return false
			})
		})
	}
	de := p.CheckHost("evil.test", 8000).(*policy.DenyError)
	if got := p.Suggest(de).String(); got != `add "evil.test:8000" to net_hosts` {
		t.Errorf("Suggest(CheckHost denial) = %q", got)
	}
}

func TestSuggestTools(t *testing.T) {
	p := mustSpec(t, policy.Spec{AllowedTools: []string{"sh"}})
	tests := []struct {
		name  string
		tools []string
		want  string
	}{
		{"bare", []string{"curl"}, `add "curl" to allowed_tools`},
		{"path", []string{"/usr/bin/python3"}, `add "/usr/bin/python3" to allowed_tools`},
		{"two-one-allowed", []string{"sh", "/usr/bin/env", "python3"}, `add "/usr/bin/env" to allowed_tools and add "python3" to allowed_tools`},
		{"duplicates", []string{"curl", "curl"}, `add "curl" to allowed_tools`},
		{"allowed", []string{"sh"}, ""},
		{"relative-path", []string{"./run.sh"}, ""},
		{"proc", []string{"/proc/self/exe"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			applies(t, p, p.SuggestTools(tt.tools...), tt.want, func(np *policy.Policy) bool {
				for _, n := range tt.tools {
					if !np.AllowsTool(n) {
						return false
					}
				}
				return true
			})
		})
	}
	if got := p.SuggestTool("curl").String(); got != `add "curl" to allowed_tools` {
		t.Errorf("SuggestTool(curl) = %q", got)
	}
}

func TestSuggestBudget(t *testing.T) {
	p := mustSpec(t, policy.Spec{Budget: budget.Limits{Wall: 300 * time.Millisecond, Ops: policy.MaxOpsBound, Memory: 64 << 20, Write: 64 << 20}})
	tests := []struct {
		name string
		l    budget.Limit
		want string
	}{
		{"wall", budget.MaxWall, `raise max_wall to "600ms"`},
		{"output", budget.MaxOutputBytes, `raise max_output_bytes to "2MiB"`},
		{"pids", budget.MaxPids, `raise max_pids to "128"`},
		{"at-bound", budget.MaxOps, ""},
		{"write-needs-memory", budget.MaxWrite, `raise max_write to "128MiB" and raise max_memory to "128MiB"`},
		{"not-a-budget", budget.Limit("max_coffee"), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old := p.Budget()
			applies(t, p, p.SuggestBudget(tt.l), tt.want, func(np *policy.Policy) bool { return np.Budget() != old })
		})
	}
	// Near the bound the doubled value is capped, not refused.
	q := mustSpec(t, policy.Spec{Budget: budget.Limits{Wall: 20 * time.Hour}})
	if got := q.SuggestBudget(budget.MaxWall).String(); got != `raise max_wall to "24h"` {
		t.Errorf("SuggestBudget(max_wall 20h) = %q, want the bound", got)
	}
}

// FuzzParseSuggestion checks that ParseSuggestion never panics and that
// what it accepts renders back to the same text. Seeds are in
// testdata/fuzz/FuzzParseSuggestion.
func FuzzParseSuggestion(f *testing.F) {
	f.Add(`add "/w/sub" to fs_write and add "/w/sub/.envrc" to fs_unprotect`)
	f.Add(`raise max_wall to "1m"`)
	f.Add(`remove "/w/secret" from fs_deny`)
	f.Fuzz(func(t *testing.T, text string) {
		s, err := policy.ParseSuggestion(text)
		if err != nil {
			return
		}
		if s.IsZero() {
			t.Fatalf("ParseSuggestion(%q) accepted nothing", text)
		}
		if got := s.String(); got != text {
			back, err := policy.ParseSuggestion(got)
			if err != nil || !reflect.DeepEqual(back, s) {
				t.Fatalf("ParseSuggestion(%q).String() = %q does not parse back: %v", text, got, err)
			}
		}
		_, _ = policy.Default().Apply(s) // must not panic on any parsed suggestion
	})
}
