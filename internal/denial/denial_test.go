package denial_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/internal/denial"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
)

func mustPolicy(t *testing.T, spec policy.Spec) *policy.Policy {
	t.Helper()
	p, err := policy.New(spec)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestOf(t *testing.T) {
	p := mustPolicy(t, policy.Spec{FSRead: []string{"/data"}, AllowedTools: []string{"sh"}})
	tests := []struct {
		name    string
		err     error
		want    api.Denial
		wantFix string
	}{
		{"fs-read", &policy.DenyError{Cap: policy.FSRead, Op: "read", Subject: "/etc/passwd", Reason: "path is outside fs_read"},
			api.Denial{Layer: "fs", Op: "read", Target: "/etc/passwd", Rule: "fs_read", Message: "path is outside fs_read"}, `add "/etc/passwd" to fs_read`},
		{"wrapped-with-hint", fmt.Errorf("read_file: %w", &policy.DenyError{Cap: policy.FSRead, Op: "read", Subject: "/data/link", Reason: "a symlink leads out of the grants", Hint: "use the real path instead of the symlink"}),
			api.Denial{Layer: "fs", Op: "read", Target: "/data/link", Rule: "fs_read", Message: "a symlink leads out of the grants", Hint: "use the real path instead of the symlink"}, ""},
		{"no-op-no-reason", &policy.DenyError{Cap: policy.FSWrite, Subject: "/data/x"},
			api.Denial{Layer: "fs", Op: "write", Target: "/data/x", Rule: "fs_write", Message: "policy: fs_write not granted for /data/x"}, `add "/data/x" to fs_write`},
		{"net", &policy.DenyError{Cap: policy.NetHosts, Op: "connect", Subject: "evil.example:443", Reason: "evil.example is not in net_hosts"},
			api.Denial{Layer: "net", Op: "connect", Target: "evil.example:443", Rule: "net_hosts", Message: "evil.example is not in net_hosts"}, `add "evil.example:443" to net_hosts`},
		{"tool", &policy.DenyError{Cap: policy.AllowedTools, Op: "exec", Subject: "curl", Reason: "curl is not in allowed_tools"},
			api.Denial{Layer: "exec", Op: "exec", Target: "curl", Rule: "allowed_tools", Message: "curl is not in allowed_tools"}, `add "curl" to allowed_tools`},
		{"other-capability", &policy.DenyError{Cap: policy.Env, Op: "setenv", Subject: "LD_PRELOAD", Reason: "protected"},
			api.Denial{Layer: "kernel", Op: "setenv", Target: "LD_PRELOAD", Rule: "env", Message: "protected"}, ""},
		{"budget", fmt.Errorf("write: %w", &budget.ExhaustedError{Limit: budget.MaxOps}),
			api.Denial{Layer: "budget", Op: "write", Target: "out.txt", Rule: "max_ops", Message: "max_ops exhausted"}, `raise max_ops to "2000"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, ok := denial.Of(tt.err, "write", "out.txt", p)
			if !ok {
				t.Fatalf("Of(%v) = not a refusal", tt.err)
			}
			if r.Denial != tt.want {
				t.Errorf("Of(%v).Denial = %+v, want %+v", tt.err, r.Denial, tt.want)
			}
			if got := r.Fix.String(); got != tt.wantFix {
				t.Errorf("Of(%v).Fix = %q, want %q", tt.err, got, tt.wantFix)
			}
		})
	}
	for _, err := range []error{nil, errors.New("EPERM"), fmt.Errorf("x: %w", policy.ErrDenied)} {
		if r, ok := denial.Of(err, "read", "x", p); ok {
			t.Errorf("Of(%v) = %+v, want no refusal", err, r)
		}
	}
}

// TestDenialNeverCarriesTheFix: what anyone may see names no policy
// change, even for a refusal whose fix is known; only Operator has it.
func TestDenialNeverCarriesTheFix(t *testing.T) {
	p := mustPolicy(t, policy.Spec{})
	for _, err := range []error{
		&policy.DenyError{Cap: policy.NetHosts, Op: "connect", Subject: "evil.example:443", Reason: "evil.example is not in net_hosts"},
		&budget.ExhaustedError{Limit: budget.MaxWall},
	} {
		r, ok := denial.Of(err, "read", "/x", p)
		if !ok || r.Fix.IsZero() {
			t.Fatalf("Of(%v) = %+v, %v: want a refusal with a fix", err, r, ok)
		}
		data, _ := json.Marshal(r.Denial)
		for _, w := range []string{"add ", "raise ", r.Fix.String()} {
			if strings.Contains(string(data), w) {
				t.Errorf("the denial of %v says %q, which widens the policy: %s", err, w, data)
			}
		}
		op := r.Operator()
		if op == nil || len(op.Suggestions) != 1 || op.Suggestions[0].Suggestion != r.Fix.String() || len(op.Suggestions[0].Changes) == 0 {
			t.Errorf("Operator() = %+v, want the fix %q", op, r.Fix)
		}
	}
	if op := (denial.Refusal{Denial: api.Denial{Layer: "fs"}}).Operator(); op != nil {
		t.Errorf("Operator() without a fix = %+v, want nil", op)
	}
}

func TestEventRoundTrip(t *testing.T) {
	p := mustPolicy(t, policy.Spec{})
	r, _ := denial.Of(&policy.DenyError{Cap: policy.FSRead, Op: "open", Subject: "/etc/shadow", Reason: "path is outside fs_read", Hint: "h"}, "", "", p)
	now := time.Unix(1700000000, 0)
	e := r.Event(now)
	if e.Kind != audit.Deny || !e.Time.Equal(now) || e.Suggestion != `add "/etc/shadow" to fs_read` {
		t.Errorf("Event = %+v", e)
	}
	back := denial.FromEvent(e)
	if back.Denial != r.Denial || back.Fix.String() != r.Fix.String() {
		t.Errorf("FromEvent(Event(r)) = %+v, want %+v", back, r)
	}
	// A suggestion the denial log cut no longer parses: no fix, rather
	// than one that would not work.
	e.Suggestion = `add "/etc/sha…[+12 bytes]`
	if got := denial.FromEvent(e); !got.Fix.IsZero() || got.Denial != r.Denial {
		t.Errorf("FromEvent(cut suggestion) = %+v, want the denial without a fix", got)
	}
}
