package api_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/api"
)

func TestSummarize(t *testing.T) {
	halt := "max_wall"
	big := strings.Repeat("é\x00x", 20000) // multi-byte runes and bytes JSON escapes 6-fold
	var denials []api.Denial
	for i := range 66 {
		denials = append(denials, api.Denial{Layer: "net", Op: "connect", Target: strings.Repeat("h", 200) + string(rune('a'+i%26)), Rule: "net_hosts", Message: "not in net_hosts", Count: 1})
	}
	tests := []struct {
		name          string
		r             api.Report
		wantTruncated []string
	}{
		{"small", api.Report{ExitCode: 3, Stdout: "hi\n", Stderr: "oops\n", DenialCounts: api.DenialCounts{Total: 1}, Denials: denials[:1]}, nil},
		{"output-cut-by-run", api.Report{ExitCode: 124, HaltedBy: &halt, Stdout: "x", StdoutTruncated: true}, []string{"output"}},
		{"big-stdout", api.Report{ExitCode: 0, Stdout: big}, []string{"stdout"}},
		{"newlines", api.Report{ExitCode: 0, Stdout: strings.Repeat("row\n", 5000)}, []string{"stdout"}},
		{"big-everything", api.Report{ExitCode: 124, HaltedBy: &halt, Stdout: big, Stderr: big, Denials: denials, DenialCounts: api.DenialCounts{Total: 900}, Error: strings.Repeat("e", 9000)},
			[]string{"stdout", "stderr", "denials", "error"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := api.Summarize(&tt.r, api.MaxTerminationMessage)
			if err != nil {
				t.Fatal(err)
			}
			if len(b) > api.MaxTerminationMessage {
				t.Errorf("Summarize = %d bytes, want at most %d", len(b), api.MaxTerminationMessage)
			}
			var s api.Summary
			if err := json.Unmarshal(b, &s); err != nil {
				t.Fatalf("Summarize wrote invalid JSON: %v\n%s", err, b)
			}
			if s.ExitCode != tt.r.ExitCode || s.DenialsTotal != tt.r.DenialCounts.Total || (tt.r.HaltedBy != nil && s.HaltedBy != *tt.r.HaltedBy) {
				t.Errorf("Summarize lost the outcome: %+v", s)
			}
			if !slices.Equal(s.Truncated, tt.wantTruncated) {
				t.Errorf("Summarize truncated = %q, want %q", s.Truncated, tt.wantTruncated)
			}
			if !strings.HasSuffix(tt.r.Stdout, s.Stdout) || !strings.HasSuffix(tt.r.Stderr, s.Stderr) || !strings.HasPrefix(tt.r.Error, s.Error) {
				t.Errorf("Summarize kept output that is not the tail (or an error that is not the head)")
			}
			if slices.Contains(tt.wantTruncated, "stdout") && !slices.Contains(tt.wantTruncated, "stderr") && len(b) < api.MaxTerminationMessage-64 {
				t.Errorf("Summarize cut stdout to %d bytes of JSON, leaving room: want it to fill the bound", len(b))
			}
			if len(tt.wantTruncated) == 0 && (s.Stdout != tt.r.Stdout || len(s.Denials) != len(tt.r.Denials)) {
				t.Errorf("Summarize cut a report that fits: %+v", s)
			}
		})
	}
	if _, err := api.Summarize(&api.Report{}, 100); err == nil {
		t.Error("Summarize with a 100-byte bound succeeded, want an error")
	}
}
