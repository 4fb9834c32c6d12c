//go:build linux

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/internal/denial"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/sandbox"
)

func ptr[T any](v T) *T { return &v }

// operatorOf is a report's Operator with suggestions os, their changes
// parsed from their text.
func operatorOf(sugg ...sandbox.OperatorSuggestion) *sandbox.Operator {
	for i := range sugg {
		s, err := policy.ParseSuggestion(sugg[i].Suggestion)
		if err != nil {
			panic(err)
		}
		sugg[i].Changes = denial.Suggestion(sandbox.Denial{}, s).Changes
	}
	return &sandbox.Operator{Suggestions: sugg}
}

// sampleReports are the reports the golden tests print.
func sampleReports() []struct {
	name string
	rep  *sandbox.Report
	halt *audit.Event
} {
	enf := sandbox.Enforcement{Namespaces: true, Landlock: 7, Seccomp: true, Cgroup: "hybrid", FSDenials: "reported"}
	return []struct {
		name string
		rep  *sandbox.Report
		halt *audit.Event
	}{
		{"clean-exit", &sandbox.Report{ExitCode: 0, DurationMS: 12, Stdout: "hello\n", Denials: []sandbox.Denial{},
			Usage: sandbox.Usage{CPUMS: 3, OutputBytes: 6, Ops: 1}, Enforcement: enf}, nil},
		{"csv-injection", &sandbox.Report{ExitCode: 124, HaltedBy: ptr("max_wall"), DurationMS: 5003,
			Stdout: "trend: written\ncredentials: FileNotFoundError\n", Stderr: "",
			Usage: sandbox.Usage{CPUMS: 4950, Ops: 1, OutputBytes: 48},
			Denials: []sandbox.Denial{
				{Layer: "fs", Op: "open", Target: "/tmp/home/.aws/credentials", Rule: "fs_read", Message: "path is outside fs_read", Count: 1},
				{Layer: "net", Op: "connect", Target: "127.0.0.1:40123", Rule: "net_hosts", Message: "127.0.0.1 is not in net_hosts", Count: 1},
			},
			DenialCounts: sandbox.DenialCounts{Total: 2, ByLayer: map[string]int64{"fs": 1, "net": 1}},
			Enforcement:  enf,
			Operator: operatorOf(
				sandbox.OperatorSuggestion{Layer: "fs", Op: "open", Target: "/tmp/home/.aws/credentials", Rule: "fs_read", Suggestion: `add "/tmp/home/.aws/credentials" to fs_read`},
				sandbox.OperatorSuggestion{Layer: "net", Op: "connect", Target: "127.0.0.1:40123", Rule: "net_hosts", Suggestion: `add "127.0.0.1:40123" to net_hosts`},
				sandbox.OperatorSuggestion{Layer: "budget", Rule: "max_wall", Suggestion: `raise max_wall to "10s"`})},
			&audit.Event{Kind: audit.Halt, Layer: audit.LayerBudget, Rule: "max_wall", Message: "the run passed max_wall and was killed with everything it started", Suggestion: `raise max_wall to "10s"`}},
		{"signal-downgraded", &sandbox.Report{ExitCode: 137, Signal: ptr(9), DurationMS: 80, Denials: []sandbox.Denial{},
			Enforcement: sandbox.Enforcement{Namespaces: true, Seccomp: true, Downgrades: []string{"landlock", "max_memory", "max_pids"}, FSDenials: "not reported: no Landlock"}}, nil},
		{"refused", &sandbox.Report{ExitCode: 125, DurationMS: 1, Denials: []sandbox.Denial{},
			Error: "cgroup limits for max_memory cannot be enforced here: cgroup: memory controller unavailable: not mounted (run as root, delegate a cgroup v2 subtree, or add \"max_memory\" to allow_downgrade)"}, nil},
		{"tool-denied", &sandbox.Report{ExitCode: 127, DurationMS: 2,
			Denials:      []sandbox.Denial{{Layer: "exec", Op: "exec", Target: "curl", Rule: "allowed_tools", Message: "policy: allowed_tools not granted for curl", Count: 1}},
			DenialCounts: sandbox.DenialCounts{Total: 1, ByLayer: map[string]int64{"exec": 1}},
			Error:        "policy: allowed_tools not granted for curl",
			Operator:     operatorOf(sandbox.OperatorSuggestion{Layer: "exec", Op: "exec", Target: "curl", Rule: "allowed_tools", Suggestion: `add "curl" to allowed_tools`})}, nil},
		{"hint", &sandbox.Report{ExitCode: 1, DurationMS: 2,
			Denials: []sandbox.Denial{{Layer: "fs", Op: "read", Target: "/data/link", Rule: "fs_read", Message: "resolves outside the grant through a symlink",
				Hint: "use the path the symlink points to", Count: 1}},
			DenialCounts: sandbox.DenialCounts{Total: 1, ByLayer: map[string]int64{"fs": 1}}}, nil},
		{"unreachable", &sandbox.Report{ExitCode: 1, DurationMS: 30, Denials: []sandbox.Denial{},
			Stderr: "urllib.error.HTTPError: HTTP Error 502: Bad Gateway\n",
			EgressErrors: []sandbox.EgressError{
				{Op: "resolve_failed", Target: "pypi.example:443", Message: "egress: resolve pypi.example: lookup pypi.example: no such host", Count: 3},
				{Op: "dial_failed", Target: "api.example:443", Message: "dial tcp 203.0.113.7:443: connect: connection refused", Count: 1},
			},
			EgressErrorsTotal: 6, Enforcement: enf}, nil},
		{"denial-flood", &sandbox.Report{ExitCode: 124, HaltedBy: ptr("max_ops"), DurationMS: 40,
			Usage: sandbox.Usage{CPUMS: 30, Ops: 10},
			Denials: []sandbox.Denial{
				{Layer: "net", Op: "connect", Target: "evil.example:443", Rule: "net_hosts", Message: "evil.example is not in net_hosts", Count: 4000},
				{Layer: "net", Op: "connect", Target: "x1.example:443", Rule: "net_hosts", Message: "x1.example is not in net_hosts", Count: 1},
			},
			DenialCounts: sandbox.DenialCounts{Total: 5000, ByLayer: map[string]int64{"net": 5000}, Dropped: 999},
			Enforcement:  enf,
			Operator: operatorOf(
				sandbox.OperatorSuggestion{Layer: "net", Op: "connect", Target: "evil.example:443", Rule: "net_hosts", Suggestion: `add "evil.example:443" to net_hosts`},
				sandbox.OperatorSuggestion{Layer: "net", Op: "connect", Target: "x1.example:443", Rule: "net_hosts", Suggestion: `add "x1.example:443" to net_hosts`},
				sandbox.OperatorSuggestion{Layer: "budget", Rule: "max_ops", Suggestion: `raise max_ops to "20"`})},
			&audit.Event{Kind: audit.Halt, Layer: audit.LayerBudget, Rule: "max_ops", Message: "the run used max_ops boundary crossings", Suggestion: `raise max_ops to "20"`}},
	}
}

// TestSummaryGolden pins the stderr summary, plain and in colour, and the
// --json report of the same runs.
func TestSummaryGolden(t *testing.T) {
	for _, tt := range sampleReports() {
		t.Run(tt.name, func(t *testing.T) {
			for _, color := range []bool{false, true} {
				var b bytes.Buffer
				summary{rep: tt.rep, halt: tt.halt, color: color}.write(&b)
				name := "summary-" + tt.name + ".txt"
				if color {
					name = "summary-" + tt.name + ".color.txt"
				}
				airtest.Golden(t, name, b.Bytes())
				if !color && strings.Contains(b.String(), "\x1b[") {
					t.Errorf("plain summary of %s contains an escape sequence: %q", tt.name, b.String())
				}
			}
			js, err := json.MarshalIndent(tt.rep, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			airtest.Golden(t, "report-"+tt.name+".json", append(js, '\n'))
		})
	}
}

// TestColorFor checks when the summary uses colour.
func TestColorFor(t *testing.T) {
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	pty, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal to test with: %v", err)
	}
	defer pty.Close()
	env := func(noColor string) func(string) string {
		return func(k string) string {
			if k == "NO_COLOR" {
				return noColor
			}
			return ""
		}
	}
	tests := []struct {
		name    string
		w       any
		noColor string
		want    bool
	}{
		{"terminal", pty, "", true},
		{"terminal-NO_COLOR", pty, "1", false},
		{"dev-null", devnull, "", false},
		{"buffer", &bytes.Buffer{}, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := tt.w.(interface{ Write([]byte) (int, error) })
			if got := colorFor(w, env(tt.noColor)); got != tt.want {
				t.Errorf("colorFor(%s, NO_COLOR=%q) = %v, want %v", tt.name, tt.noColor, got, tt.want)
			}
		})
	}
}

// TestRunAuditFlag runs a command whose egress is denied and checks that
// --audit wrote every event as one JSON object per line, and that the
// stderr summary names the denial and its suggestion.
func TestRunAuditFlag(t *testing.T) {
	airtest.RequireUserNS(t)
	airtest.RequireLandlockABI(t, 4)
	airtest.RequireBinary(t, "/usr/bin/python3")
	dir := t.TempDir()
	log := filepath.Join(dir, "audit.jsonl")
	// The proxy denies denied.example:9, a host not in net_hosts (127.0.0.1
	// would be the sandbox's own loopback, reached directly).
	script := `import urllib.request
try:
    urllib.request.urlopen("http://denied.example:9/x", timeout=5)
except Exception as e:
    print("blocked:", e)
`
	r := airlock(t, dir, "run", "--audit", log, "--net-host", "pypi.org:443", "--max-wall", "20s", "--", "python3", "-c", script)
	if r.code != 0 {
		t.Fatalf("airlock run: exit %d, want 0\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	if !regexp.MustCompile(`(?m)^airlock: denied \w+ denied\.example:9 \(net_hosts\): .*; to allow it: add "denied\.example:9" to net_hosts$`).MatchString(r.stderr) {
		t.Errorf("stderr summary lacks the denial and its suggestion:\n%s", r.stderr)
	}
	if strings.Contains(r.stderr, "\x1b[") {
		t.Errorf("stderr is not a terminal but the summary is coloured: %q", r.stderr)
	}
	fi, err := os.Stat(log)
	if err != nil {
		t.Fatalf("--audit %s: %v", log, err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Errorf("--audit file mode = %v, want 0600", perm)
	}
	f, err := os.Open(log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var events []audit.Event
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e audit.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("--audit line %q is not an audit event: %v", sc.Text(), err)
		}
		events = append(events, e)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	var denied bool
	for _, e := range events {
		if e.Kind == audit.Deny && e.Layer == audit.LayerNet && e.Target == "denied.example:9" && e.Rule == "net_hosts" {
			denied = true
		}
	}
	if !denied {
		t.Errorf("--audit log has no net_hosts denial of denied.example:9; events: %+v", events)
	}

	t.Run("unwritable", func(t *testing.T) {
		r := airlock(t, dir, "run", "--audit", filepath.Join(dir, "missing", "audit.jsonl"), "--", "/bin/true")
		if r.code != 125 || !strings.Contains(r.stderr, "--audit") || !strings.Contains(r.stderr, "nothing was started") {
			t.Errorf("airlock run --audit missing/audit.jsonl: exit %d, stderr %q; want 125 naming --audit", r.code, r.stderr)
		}
	})
}
