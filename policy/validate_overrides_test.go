package policy_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
)

func TestWithAdds(t *testing.T) {
	p := mustParse(t, "version: 1\nfs_read: [/data]\nenv: [LANG]\n")
	before, _ := p.MarshalJSON()
	q, err := p.With(policy.Overrides{
		FSRead:         []string{"in"},
		FSWrite:        []string{"/out"},
		AllowedTools:   []string{"python3"},
		Env:            []string{"TZ=UTC"},
		AllowDowngrade: []string{"landlock"},
	}, "/cwd")
	if err != nil {
		t.Fatalf("With = %v", err)
	}
	want := mustParse(t, "version: 1\nfs_read: [/data, /cwd/in]\nfs_write: [/out]\nallowed_tools: [python3]\nenv: [LANG, TZ=UTC]\nallow_downgrade: [landlock]\n")
	if !policy.Equal(q, want) {
		t.Errorf("With = %s, want %s", q.Summary(), want.Summary())
	}
	if after, _ := p.MarshalJSON(); string(before) != string(after) {
		t.Errorf("With changed the original:\nbefore %s\nafter  %s", before, after)
	}
	if q.Source() != p.Source() {
		t.Errorf("With Source() = %q, want %q", q.Source(), p.Source())
	}
}

// TestWithBudget covers the rule that flags never loosen a policy file.
func TestWithBudget(t *testing.T) {
	file := mustParse(t, "version: 1\nbudget:\n  max_wall: 30s\n  max_memory: 1GiB\n")
	tests := []struct {
		name    string
		o       budget.Limits
		want    budget.Limits // compared field by field where non-zero
		wantErr string
	}{
		{"tighten-explicit", budget.Limits{Wall: 10 * time.Second}, budget.Limits{Wall: 10 * time.Second}, ""},
		{"same-as-explicit", budget.Limits{Memory: 1 << 30}, budget.Limits{Memory: 1 << 30}, ""},
		{"raise-default", budget.Limits{CPU: time.Hour, Ops: 5000}, budget.Limits{CPU: time.Hour, Ops: 5000}, ""},
		{"lower-default", budget.Limits{Pids: 8}, budget.Limits{Pids: 8}, ""},
		{"loosen-wall", budget.Limits{Wall: time.Minute}, budget.Limits{}, "--max-wall 1m would loosen the policy file's max_wall 30s: edit the policy file instead"},
		{"loosen-memory", budget.Limits{Memory: 2 << 30}, budget.Limits{}, "--max-memory 2GiB would loosen the policy file's max_memory 1GiB"},
		{"negative", budget.Limits{Ops: -1}, budget.Limits{}, "--max-ops -1 must be positive"},
		{"above-bound", budget.Limits{OutputBytes: 2 << 30}, budget.Limits{}, "--max-output 2GiB is above the largest allowed max_output_bytes 1GiB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, err := file.With(policy.Overrides{Budget: tt.o}, "")
			if tt.wantErr != "" {
				var pe *policy.ParseError
				if !errors.As(err, &pe) || !strings.HasPrefix(pe.Msg, tt.wantErr) {
					t.Fatalf("With(%+v) = %v, want %q", tt.o, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("With(%+v) = %v", tt.o, err)
			}
			got, base := q.Budget(), file.Budget()
			if tt.want.Wall != 0 && got.Wall != tt.want.Wall || tt.want.Memory != 0 && got.Memory != tt.want.Memory ||
				tt.want.CPU != 0 && got.CPU != tt.want.CPU || tt.want.Ops != 0 && got.Ops != tt.want.Ops ||
				tt.want.Pids != 0 && got.Pids != tt.want.Pids {
				t.Errorf("With(%+v).Budget() = %+v, want %+v", tt.o, got, tt.want)
			}
			if got.Scratch != base.Scratch {
				t.Errorf("With(%+v) changed max_scratch %d to %d", tt.o, base.Scratch, got.Scratch)
			}
		})
	}
	if file.Budget().Wall != 30*time.Second {
		t.Errorf("With changed the original's budget: %+v", file.Budget())
	}
}

// TestWithTightenedStaysTight checks that a budget set by a flag is explicit
// for the next With, and that the default-only policy accepts any bound.
func TestWithTightenedStaysTight(t *testing.T) {
	q, err := policy.Default().With(policy.Overrides{Budget: budget.Limits{Wall: 10 * time.Second}}, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.With(policy.Overrides{Budget: budget.Limits{Wall: 20 * time.Second}}, ""); err == nil {
		t.Errorf("With(--max-wall 20s) after --max-wall 10s = nil, want a loosen error")
	}
}

func TestWithErrors(t *testing.T) {
	p := mustParse(t, "version: 1\nenv: [LANG]\n")
	tests := []struct {
		name string
		o    policy.Overrides
		base string
		want string
	}{
		{"fs-read-relative", policy.Overrides{FSRead: []string{"x"}}, "", `--fs-read "x": relative path with no base folder`},
		{"fs-write-root", policy.Overrides{FSWrite: []string{"/"}}, "", `--fs-write "/": / would grant the whole host`},
		{"fs-read-proc", policy.Overrides{FSRead: []string{"../proc"}}, "/", `--fs-read "../proc": the sandbox mounts its own /proc`},
		{"tool", policy.Overrides{AllowedTools: []string{"a/b"}}, "", `--tool "a/b": is neither a tool name`},
		{"env-dup-of-file", policy.Overrides{Env: []string{"LANG=C"}}, "", `--env "LANG=C": LANG is already granted: keep one`},
		{"env-proxy", policy.Overrides{Env: []string{"ALL_PROXY=x"}}, "", `--env "ALL_PROXY=x": airlock sets ALL_PROXY itself`},
		{"downgrade", policy.Overrides{AllowDowngrade: []string{"max_mem"}}, "", `--allow-downgrade "max_mem": is not a known downgrade: did you mean "max_memory"`},
		{"base-relative", policy.Overrides{}, "rel", `base folder "rel" is not an absolute path`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, err := p.With(tt.o, tt.base)
			var pe *policy.ParseError
			if !errors.As(err, &pe) || !strings.HasPrefix(pe.Msg, tt.want) || q != nil {
				t.Errorf("With(%+v, %q) = %v, want %q", tt.o, tt.base, err, tt.want)
			}
		})
	}
}

func TestWithHost(t *testing.T) {
	q, err := policy.Default().With(policy.Overrides{NetHosts: []string{"api.github.com"}}, "")
	if err != nil {
		t.Fatalf("With(--net-host api.github.com) = %v", err)
	}
	if err := q.CheckHost("api.github.com", 443); err != nil {
		t.Errorf("CheckHost(api.github.com, 443) = %v, want nil", err)
	}
	if _, err := policy.Default().With(policy.Overrides{NetHosts: []string{"*.com"}}, ""); err == nil {
		t.Errorf("With(--net-host *.com) = nil, want an error")
	}
}
