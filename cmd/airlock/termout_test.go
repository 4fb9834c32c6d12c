//go:build linux

package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/internal/termtext"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// hostile is what a sandbox, an API client or a hostile file name can put
// in a string airlock prints.
const hostile = airtest.Hostile

// TestSummaryHostileFields feeds the summary a report whose every field
// is hostile, as a sandbox that controls targets and messages could make
// it: each line stays one line with airlock's prefix, plain or coloured.
func TestSummaryHostileFields(t *testing.T) {
	rep := &sandbox.Report{ExitCode: 124, HaltedBy: ptr(hostile), DurationMS: 5,
		Denials: []sandbox.Denial{{Layer: hostile, Op: hostile, Target: hostile, Rule: hostile, Message: hostile, Hint: hostile}},
		Error:   hostile, Enforcement: sandbox.Enforcement{Downgrades: []string{hostile, hostile}},
		Operator: &sandbox.Operator{Suggestions: []sandbox.OperatorSuggestion{{Layer: hostile, Op: hostile, Target: hostile, Rule: hostile, Suggestion: hostile}}}}
	halt := &audit.Event{Kind: audit.Halt, Message: hostile, Suggestion: hostile, Hint: hostile}
	for _, color := range []bool{false, true} {
		t.Run(fmt.Sprintf("color=%v", color), func(t *testing.T) {
			var b bytes.Buffer
			summary{rep: rep, halt: halt, color: color}.write(&b)
			out := b.String()
			if color {
				for _, sgr := range []string{sgrRed, sgrYellow, sgrCyan, sgrReset} {
					out = strings.ReplaceAll(out, sgr, "")
				}
			}
			airtest.CheckNoControls(t, out)
			lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			if len(lines) != 4 {
				t.Errorf("summary has %d lines, want 4 (denial, halt, downgrade, error):\n%s", len(lines), out)
			}
			for _, l := range lines {
				if !strings.HasPrefix(l, "airlock: ") || strings.HasPrefix(l, forged) {
					t.Errorf("summary line %q does not start with airlock's own prefix", l)
				}
			}
		})
	}
}

// TestSummaryBounds: a sandbox decides how many denials and how long a
// target it makes; the summary prints at most maxSummaryDenials lines of
// bounded length and says how many it left out.
func TestSummaryBounds(t *testing.T) {
	rep := &sandbox.Report{ExitCode: 0}
	long := strings.Repeat("x", 4*termtext.FieldMax)
	for i := range 10 * maxSummaryDenials {
		rep.Denials = append(rep.Denials, sandbox.Denial{Op: "connect", Target: fmt.Sprint(i, long), Rule: "net_hosts", Message: long})
	}
	var b bytes.Buffer
	summary{rep: rep}.write(&b)
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != maxSummaryDenials+1 {
		t.Fatalf("summary of %d denials has %d lines, want %d", len(rep.Denials), len(lines), maxSummaryDenials+1)
	}
	if want := fmt.Sprintf("airlock: %d more denials not shown: --json or --audit FILE lists every one", 9*maxSummaryDenials); lines[maxSummaryDenials] != want {
		t.Errorf("last line = %q, want %q", lines[maxSummaryDenials], want)
	}
	if max := 4*(termtext.FieldMax+termtext.MarkerMax) + 100; len(lines[0]) > max {
		t.Errorf("a denial line of 4*FieldMax-byte fields is %d bytes, want at most %d", len(lines[0]), max)
	}
	if !strings.Contains(lines[0], "…[+") {
		t.Errorf("a cut field has no marker: %q", lines[0][:100])
	}
}
