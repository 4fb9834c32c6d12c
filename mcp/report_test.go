package mcp

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// TestReportMatchesSandbox checks that Report carries every field of
// sandbox.Report: a report decoded and re-encoded here is the same JSON
// that `airlock run --json` prints.
func TestReportMatchesSandbox(t *testing.T) {
	sig, halted := 9, "max_wall"
	in := sandbox.Report{
		ExitCode: 124, Signal: &sig, HaltedBy: &halted, DurationMS: 7, Stdout: "o", Stderr: "e",
		StdoutTruncated: true, StderrTruncated: true,
		Usage:        sandbox.Usage{CPUMS: 1, MaxMemoryBytes: 2, Ops: 3, OutputBytes: 4},
		Denials:      []sandbox.Denial{{Layer: "net", Op: "connect", Target: "evil.example:443", Rule: "net_hosts", Message: "m", Hint: "h", Count: 7}},
		DenialCounts: sandbox.DenialCounts{Total: 9, ByLayer: map[string]int64{"net": 9}, Dropped: 2},
		Error:        "err",
		Enforcement:  sandbox.Enforcement{Namespaces: true, Landlock: 7, Seccomp: true, Cgroup: "v1", Downgrades: []string{"max_cpu"}, FSDenials: "audit"},
		Operator: &sandbox.Operator{Suggestions: []sandbox.OperatorSuggestion{{Layer: "net", Op: "connect", Target: "evil.example:443", Rule: "net_hosts",
			Suggestion: `add "evil.example:443" to net_hosts`, Changes: []policy.Change{{Action: policy.ActionAdd, Key: "net_hosts", Value: "evil.example:443"}}}}},
	}
	want, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var r Report
	if err := json.Unmarshal(want, &r); err != nil {
		t.Fatal(err)
	}
	got, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var a, b map[string]any
	if err := json.Unmarshal(want, &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(got, &b); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Errorf("Report round trip:\n got %s\nwant %s", got, want)
	}
}
