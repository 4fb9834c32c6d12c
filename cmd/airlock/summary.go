package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/internal/termtext"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// ANSI SGR sequences for the summary; used only on a terminal.
const (
	sgrRed    = "\x1b[1;31m"
	sgrYellow = "\x1b[1;33m"
	sgrCyan   = "\x1b[36m"
	sgrReset  = "\x1b[0m"
)

// maxSummaryDenials bounds the denial lines of one summary: the sandbox
// decides how many operations it tries, and the terminal is the
// operator's. The report (--json) and the audit log keep them all.
const maxSummaryDenials = 100

// summary is what `airlock run` without --json prints on stderr after the
// command's own output: one line per denial with its hint and the
// operator's suggestion (the policy change that would allow it), the halt
// and its reason, accepted downgrades, and airlock's own error. Every
// field in it is escaped and bounded with termtext.Field: targets, names
// and messages come from the sandbox (a host name it asked the proxy for,
// a file it made) and must not steer the operator's terminal.
type summary struct {
	rep   *sandbox.Report
	halt  *audit.Event // the Halt event, for its message; nil when none was seen
	color bool
}

// write prints s on w.
func (s summary) write(w io.Writer) {
	paint := func(sgr, text string) string {
		if !s.color {
			return text
		}
		return sgr + text + sgrReset
	}
	f := termtext.Field
	rep := s.rep
	// The policy changes that would allow each denial: the operator's
	// advice, which the terminal is for.
	type key struct{ layer, op, target, rule string }
	advice := map[key]string{}
	if rep.Operator != nil {
		for _, o := range rep.Operator.Suggestions {
			advice[key{o.Layer, o.Op, o.Target, o.Rule}] = o.Suggestion
		}
	}
	for i, d := range rep.Denials {
		if i == maxSummaryDenials {
			fmt.Fprintf(w, "airlock: %d more denials not shown: --json or --audit FILE lists every one\n", len(rep.Denials)-i)
			break
		}
		line := fmt.Sprintf("airlock: %s %s %s (%s): %s", paint(sgrRed, "denied"), f(d.Op), f(d.Target), f(d.Rule), f(d.Message))
		if d.Count > 1 {
			line = fmt.Sprintf("airlock: %s %d times: %s %s (%s): %s", paint(sgrRed, "denied"), d.Count, f(d.Op), f(d.Target), f(d.Rule), f(d.Message))
		}
		if d.Hint != "" {
			line += "; " + f(d.Hint)
		}
		if a := advice[key{d.Layer, d.Op, d.Target, d.Rule}]; a != "" {
			line += "; to allow it: " + paint(sgrCyan, f(a))
		}
		fmt.Fprintln(w, line)
	}
	if n := rep.DenialCounts.Dropped; n > 0 {
		fmt.Fprintf(w, "airlock: %s %d more times, not itemized (%d denials in all)\n", paint(sgrRed, "denied"), n, rep.DenialCounts.Total)
	}
	// Granted destinations that could not be reached: not denials, but
	// the reason a program saw only "502 Bad Gateway".
	var itemized int64
	for _, e := range rep.EgressErrors {
		times := ""
		if e.Count > 1 {
			times = fmt.Sprintf(", %d times", e.Count)
		}
		fmt.Fprintf(w, "airlock: %s %s (%s%s): %s\n", paint(sgrYellow, "unreachable"), f(e.Target), f(e.Op), times, f(e.Message))
		itemized += e.Count
	}
	if n := rep.EgressErrorsTotal - itemized; n > 0 {
		fmt.Fprintf(w, "airlock: %s %d more times, not itemized\n", paint(sgrYellow, "unreachable"), n)
	}
	if rep.HaltedBy != nil {
		line := fmt.Sprintf("airlock: %s by %s after %d ms (exit %d)", paint(sgrYellow, "halted"), f(*rep.HaltedBy), rep.DurationMS, rep.ExitCode)
		if s.halt != nil && s.halt.Message != "" {
			line += ": " + f(s.halt.Message)
		}
		if s.halt != nil && s.halt.Hint != "" {
			line += "; " + f(s.halt.Hint)
		}
		if s.halt != nil && s.halt.Suggestion != "" {
			line += "; if the work needs more: " + paint(sgrCyan, f(s.halt.Suggestion))
		}
		fmt.Fprintln(w, line)
	}
	if rep.Signal != nil {
		fmt.Fprintf(w, "airlock: the command died of signal %d (exit %d)\n", *rep.Signal, rep.ExitCode)
	}
	if len(rep.Enforcement.Downgrades) > 0 {
		fmt.Fprintf(w, "airlock: %s: ran without %s, as allow_downgrade accepts\n",
			paint(sgrYellow, "downgraded"), f(strings.Join(rep.Enforcement.Downgrades, ", ")))
	}
	if rep.Error != "" {
		fmt.Fprintf(w, "airlock: %s: %s (exit %d)\n", paint(sgrRed, "error"), f(rep.Error), rep.ExitCode)
	}
}

// haltSink keeps the last Halt event it receives and drops every other
// event (the --audit file keeps those).
type haltSink struct {
	mu   sync.Mutex
	last *audit.Event // guarded by mu
}

// Emit keeps e if it is a Halt.
func (h *haltSink) Emit(e audit.Event) {
	if e.Kind != audit.Halt {
		return
	}
	h.mu.Lock()
	h.last = &e
	h.mu.Unlock()
}

// event returns the last Halt event, or nil.
func (h *haltSink) event() *audit.Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.last
}

// colorFor reports whether the summary written to w may use colour: w is
// a terminal (the fd answers a termios query) and NO_COLOR is unset or
// empty (https://no-color.org).
func colorFor(w io.Writer, getenv func(string) string) bool {
	if getenv("NO_COLOR") != "" {
		return false
	}
	f, ok := w.(*os.File)
	return ok && isTerminal(int(f.Fd()))
}
