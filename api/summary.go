package api

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// MaxTerminationMessage is the most a Kubernetes container's termination
// message holds (the kubelet cuts the file at 4096 bytes): the bound of
// the summary `airlock run --summary-file` writes for a Pod.
const MaxTerminationMessage = 4096

// Summary is a report cut to a size bound, for channels that carry only a
// few kilobytes: a Pod's termination message, which the airlock controller
// copies into its Sandbox's status. Every field but the output and the
// denials is the report's own, so the outcome (exit code, signal, budget
// halt, error, usage, denial counts) always fits; what was cut to fit is
// named in Truncated, so a reader never takes a cut summary for the whole
// report.
type Summary struct {
	ExitCode   int    `json:"exit_code"`
	Signal     *int   `json:"signal,omitempty"`
	HaltedBy   string `json:"halted_by,omitempty"`
	DurationMS int64  `json:"duration_ms"`
	// Error is the report's error, cut to fit (Truncated names "error").
	Error string `json:"error,omitempty"`
	Usage Usage  `json:"usage"`
	// Denials are the report's first denials, as many as fit; Total
	// counts every denial of the run.
	Denials      []Denial `json:"denials,omitempty"`
	DenialsTotal int64    `json:"denials_total"`
	// Stdout and Stderr are the last bytes of the run's output that fit
	// (the whole output is the container's log).
	Stdout  string `json:"stdout,omitempty"`
	Stderr  string `json:"stderr,omitempty"`
	Backend string `json:"backend,omitempty"`
	// Truncated names the fields cut to fit, in the order they were cut
	// ("stdout", "stderr", "denials", "error"), and "output" when the run
	// itself already cut its output at max_output_bytes. Empty means the
	// summary holds all of those fields of the report.
	Truncated []string `json:"truncated,omitempty"`
}

// Summarize returns r as a Summary whose JSON form is at most max bytes
// (at least 512), cutting first the output (keeping its tail), then the
// denials (keeping the first), then the error.
func Summarize(r *Report, max int) ([]byte, error) {
	if max < 512 {
		return nil, fmt.Errorf("api: summary bound %d is under 512 bytes: the outcome alone may not fit", max)
	}
	s := Summary{ExitCode: r.ExitCode, Signal: r.Signal, DurationMS: r.DurationMS, Error: r.Error, Usage: r.Usage,
		Denials: r.Denials, DenialsTotal: r.DenialCounts.Total, Stdout: r.Stdout, Stderr: r.Stderr, Backend: r.Enforcement.Backend}
	if r.HaltedBy != nil {
		s.HaltedBy = *r.HaltedBy
	}
	if r.StdoutTruncated || r.StderrTruncated {
		s.Truncated = append(s.Truncated, "output")
	}
	b, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	// Each step cuts a field by what is over (as JSON: escapes count),
	// plus a margin, until the whole fits.
	for len(b) > max {
		over := len(b) - max + 16
		switch {
		case s.Stdout != "":
			s.Stdout = tailFit(s.Stdout, jsonLen(s.Stdout)-over)
			s.Truncated = mark(s.Truncated, "stdout")
		case s.Stderr != "":
			s.Stderr = tailFit(s.Stderr, jsonLen(s.Stderr)-over)
			s.Truncated = mark(s.Truncated, "stderr")
		case len(s.Denials) > 0:
			s.Denials = s.Denials[:len(s.Denials)-1]
			s.Truncated = mark(s.Truncated, "denials")
		case s.Error != "":
			s.Error = head(s.Error, len(s.Error)-over-64)
			s.Truncated = mark(s.Truncated, "error")
		default:
			return nil, fmt.Errorf("airlock bug: the report's outcome alone is %d bytes, over the summary bound %d", len(b), max)
		}
		if b, err = json.Marshal(s); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// jsonLen is the length of s as a JSON string, without its quotes.
func jsonLen(s string) int {
	b, _ := json.Marshal(s) // a string always marshals
	return len(b) - 2
}

// tailFit returns the longest tail of s, starting on a rune, whose JSON
// form (quotes aside) is at most n bytes. It looks at no more of s than
// that tail.
func tailFit(s string, n int) string {
	i, size := len(s), 0
	for i > 0 {
		j := i - 1
		for j > 0 && !utf8.RuneStart(s[j]) {
			j--
		}
		if size += jsonLen(s[j:i]); size > n {
			break
		}
		i = j
	}
	return s[i:]
}

// head returns the first n bytes of s at most, ending before a rune.
func head(s string, n int) string {
	if n <= 0 {
		return ""
	}
	if n >= len(s) {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func mark(list []string, field string) []string {
	for _, f := range list {
		if f == field {
			return list
		}
	}
	return append(list, field)
}
