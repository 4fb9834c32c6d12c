package sandbox

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/internal/denial"
	"github.com/airlock-sandbox/airlock/internal/enforce/nsinit"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
)

// execRun is the state of one exec: its own meter (max_output_bytes, and
// a deadline that never passes the box's), its report and its halt.
type execRun struct {
	b      *box
	meter  *budget.Meter
	report *Report
	start  time.Time
	whole  bool // the box's only exec (Cmd.Run)
	// atMaxWall says the exec's deadline is the policy's max_wall (a
	// session's exec that asked for no shorter timeout and starts with
	// more than max_wall left of the session).
	atMaxWall bool
	// cpuBefore is the sandbox's CPU time (cgroup) when the exec began.
	cpuBefore int64

	halted firstHalt
}

func newExecRun(b *box, wall time.Duration, whole bool) *execRun {
	if b.pl.Session && (wall <= 0 || wall > b.pl.Limits.Wall) {
		// max_wall bounds each exec of a session; a shorter timeout may
		// be asked for, never a longer one.
		wall = b.pl.Limits.Wall
	}
	atMaxWall := b.pl.Session && wall == b.pl.Limits.Wall
	left := time.Until(b.meter.Deadline())
	if wall <= 0 || wall > left {
		wall, atMaxWall = left, false
	}
	e := &execRun{b: b, start: time.Now(), whole: whole, atMaxWall: atMaxWall, cpuBefore: b.lim.cpu(), report: &Report{Denials: []Denial{}},
		meter: budget.NewMeter(budget.Limits{OutputBytes: b.pl.Limits.Output, Wall: max(wall, time.Millisecond)}, b.cfg.Clock)}
	e.report.RunID = b.id // Enforcement is the box's once it is ready: awaitExec
	return e
}

func (e *execRun) halt(l budget.Limit, msg string) { e.halted.note(e.meter, l, msg) }

func (e *execRun) haltMessage() string { return e.halted.message() }

func (e *execRun) fail(err error) {
	e.report.ExitCode = 125
	e.report.Error = err.Error()
}

// wallMessage explains a halt at the exec's deadline.
func (e *execRun) wallMessage() string {
	if e.whole {
		return "the run passed max_wall and was killed with everything it started"
	}
	if e.atMaxWall {
		return "the exec passed max_wall, the policy's limit for each exec, and was killed; the session goes on"
	}
	if e.timedOut() {
		return "the exec passed its timeout and was killed; the session goes on"
	}
	return "the session's lifetime ended during the exec, which was killed with everything in the session"
}

// timedOut reports whether the exec's own shorter timeout, not max_wall
// nor the session's end, ended it.
func (e *execRun) timedOut() bool {
	return !e.whole && !e.atMaxWall && e.b.meter.HaltedBy() == "" && e.now().Before(e.b.meter.Deadline())
}

// sessionEnded reports whether the session's lifetime, not the exec's own
// deadline, ended it.
func (e *execRun) sessionEnded() bool {
	return !e.whole && !e.atMaxWall && !e.timedOut()
}

func (e *execRun) now() time.Time {
	if e.b.cfg.Clock != nil {
		return e.b.cfg.Clock.Now() // the clock the meters' deadlines are on
	}
	return time.Now()
}

// reportHalt fills halted_by and exit 124 when a budget halted the exec.
func (e *execRun) reportHalt() bool {
	h := e.meter.HaltedBy()
	if h == "" {
		return false
	}
	hint := ""
	switch {
	case h == budget.MaxWall && e.timedOut():
		// The exec's own timeout ended it, not the policy: the caller may
		// give it a longer one.
		hint = "give the exec a longer timeout, up to the policy's max_wall"
	case h == budget.MaxWall && e.sessionEnded():
		h, hint = budget.SessionLifetime, "extend the session before its deadline (Session.Extend, POST /v1/sessions/{id}/extend, extend_session)"
	}
	haltReport(e.report, e.b.sink, e.b.cfg.Policy, h, e.haltMessage(), hint)
	return true
}

// exitStatus fills the report from the init's exit message for a command.
// When the init could not start argv0, it says why, naming the real cause
// (a missing #! interpreter or dynamic loader) and, when a policy change
// would let it start, emits the denial with that change as its suggestion.
func (e *execRun) exitStatus(m nsinit.Message, argv0 string) {
	e.report.ExitCode = m.Code
	if m.Signal != 0 {
		s := m.Signal
		e.report.Signal = &s
	}
	if m.Error == "" {
		return
	}
	e.report.Error = m.Error
	if (m.Code != 126 && m.Code != 127) || !strings.HasPrefix(m.Error, "exec "+argv0+": ") {
		return // not an exec that failed: the sandbox ended, say
	}
	d := diagnoseExec(e.b.pl, e.b.cfg.Policy, argv0)
	if d.cause != "" {
		e.report.Error = m.Error + ": " + d.cause
	}
	if !d.fix.IsZero() {
		e.b.sink.Emit(audit.Event{Time: time.Now(), Kind: audit.Deny, Layer: audit.LayerExec, Op: "exec", Target: argv0, Rule: policy.AllowedTools.String(),
			Message: d.cause, Suggestion: d.fix.String(), Hint: d.hint})
	}
}

// refusal is a report for a command that was never started (exit code),
// with the denial recorded when err is a *policy.DenyError.
func refusal(sink audit.Sink, p *policy.Policy, code int, err error) *Report {
	rep := &Report{ExitCode: code, Error: err.Error(), Denials: []Denial{}}
	if !errors.As(err, new(*policy.DenyError)) || sink == nil || p == nil {
		return rep
	}
	if r, ok := denial.Of(err, "exec", "", p); ok {
		sink.Emit(r.Event(time.Now()))
	}
	return rep
}

// capture keeps one output stream up to the exec's output cap.
type capture struct {
	e      *execRun
	tee    io.Writer
	mu     sync.Mutex
	buf    bytes.Buffer  // guarded by mu
	cut    bool          // guarded by mu
	halted chan struct{} // receives once the cap is reached
}

func newCapture(e *execRun, tee io.Writer) *capture {
	return &capture{e: e, tee: tee, halted: make(chan struct{}, 1)}
}

func (c *capture) Write(p []byte) (int, error) {
	n, err := c.e.meter.ChargeCaptured(int64(len(p)))
	c.mu.Lock()
	c.buf.Write(p[:n])
	if err != nil {
		c.cut = true
	}
	c.mu.Unlock()
	if c.tee != nil && n > 0 {
		_, _ = c.tee.Write(p[:n]) // a slow or broken terminal must not stop the capture
	}
	if err != nil {
		if errors.Is(err, budget.ErrExhausted) {
			c.e.halt(budget.MaxOutputBytes, "the output reached max_output_bytes; what came before the cap is kept")
			select {
			case c.halted <- struct{}{}:
			default:
			}
		}
		return len(p), nil // keep draining so the pipe never blocks the sandbox before it dies
	}
	return len(p), nil
}

func (c *capture) result() (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String(), c.cut
}
