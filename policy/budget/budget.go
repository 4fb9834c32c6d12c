// Package budget tracks a run's limits: wall-clock deadline, output bytes,
// op count, memory, CPU, pids and scratch disk. Time comes from an injected
// Clock so deadlines are testable without sleeping. Once any limit is blown
// the Meter is halted and refuses every later operation: a blown budget is a
// hard stop, never a warning. It imports only the standard library.
package budget

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// Limit names one budget. Its string is the policy-file key and the
// report's halted_by value.
type Limit string

// The budgets. The strings are the keys under "budget:" in a policy file.
const (
	MaxWall        Limit = "max_wall"
	MaxOutputBytes Limit = "max_output_bytes"
	MaxOps         Limit = "max_ops"
	MaxMemory      Limit = "max_memory"
	MaxCPU         Limit = "max_cpu"
	MaxPids        Limit = "max_pids"
	MaxScratch     Limit = "max_scratch"
	MaxWrite       Limit = "max_write"
	// Interrupted is not a budget: it halts a run its caller stopped (a
	// cancelled context, SIGINT or SIGTERM to airlock run), so that the
	// run ends the way a blown budget ends it, and the report says so.
	Interrupted Limit = "interrupted"
	// SessionLifetime is not a policy budget either: it ends a session at
	// the lifetime its operator gave it (sandbox.Config.SessionLifetime),
	// which Extend can move. max_wall then bounds each exec.
	SessionLifetime Limit = "session_lifetime"
	// SessionClosed is not a budget: it ends the execs still running when
	// their session is closed (Session.Close; over the API, DELETE or the
	// server's shutdown; the idle timeout spares a session while it execs).
	SessionClosed Limit = "session_closed"
)

// Defaults applied when a policy leaves a budget out.
const (
	DefaultWall        = 30 * time.Second
	DefaultOutputBytes = 1 << 20
	DefaultOps         = 1000
	DefaultMemory      = 512 << 20
	DefaultCPU         = 30 * time.Second
	DefaultPids        = 64
	DefaultScratch     = 64 << 20
	// DefaultWrite is the max_write of a policy that sets neither max_write
	// nor max_memory. A policy that sets only max_memory gets half of it,
	// at most DefaultWrite: staged writes are held in memory (see Write).
	DefaultWrite = 256 << 20
)

// Limits is a complete budget. Every field is positive once a policy has
// been validated; a zero field in a hand-built Limits means "use the default".
type Limits struct {
	Wall        time.Duration // max_wall: deadline from start
	OutputBytes int64         // max_output_bytes: stdout+stderr captured
	Ops         int64         // max_ops: boundary crossings
	Memory      int64         // max_memory, bytes
	CPU         time.Duration // max_cpu: CPU time of the whole tree
	Pids        int64         // max_pids: tasks at once
	Scratch     int64         // max_scratch: size of the /tmp tmpfs, bytes
	// Write is max_write: the bytes a run may add to its fs_write grants.
	// Writes are staged in a tmpfs of this size and copied back when the
	// run ends, so they also count against Memory while the run lasts.
	Write int64
}

// WithDefaults returns l with every zero field set to its default.
func (l Limits) WithDefaults() Limits {
	if l.Wall == 0 {
		l.Wall = DefaultWall
	}
	if l.OutputBytes == 0 {
		l.OutputBytes = DefaultOutputBytes
	}
	if l.Ops == 0 {
		l.Ops = DefaultOps
	}
	if l.Memory == 0 {
		l.Memory = DefaultMemory
	}
	if l.CPU == 0 {
		l.CPU = DefaultCPU
	}
	if l.Pids == 0 {
		l.Pids = DefaultPids
	}
	if l.Scratch == 0 {
		l.Scratch = DefaultScratch
	}
	if l.Write == 0 {
		l.Write = max(min(DefaultWrite, l.Memory/2), 1)
	}
	return l
}

// Clock tells the time. Production code passes SystemClock; tests pass a fake.
type Clock interface {
	Now() time.Time
}

// SystemClock is the real clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// ErrExhausted is matched (errors.Is) by every *ExhaustedError.
var ErrExhausted = errors.New("budget: exhausted")

// ExhaustedError says which budget was blown.
type ExhaustedError struct {
	Limit Limit
}

func (e *ExhaustedError) Error() string {
	// No advice to raise it: this text reaches the sandboxed program (the
	// proxy's refusal, a report's denial). Raising a budget widens the
	// policy, which is the operator's call (policy.SuggestBudget).
	return "budget: " + string(e.Limit) + " exhausted; the run is halted"
}

// Is reports whether target is ErrExhausted.
func (e *ExhaustedError) Is(target error) bool { return target == ErrExhausted }

// Meter enforces the counted budgets (ops, output bytes, deadline) of one run
// or session. It is safe for concurrent use. Once halted it stays halted,
// and Done is closed so that the supervisor can stop the run.
type Meter struct {
	limits Limits
	clock  Clock
	done   chan struct{} // closed by the first halt
	// wallLimit is what a passed deadline halts with: MaxWall, or
	// SessionLifetime for a session's meter (NewSessionMeter).
	wallLimit Limit

	mu       sync.Mutex
	deadline time.Time // guarded by mu
	ops      int64     // guarded by mu
	output   int64     // guarded by mu
	halted   Limit     // guarded by mu; "" while running
}

// NewMeter starts a meter whose deadline is clock.Now()+limits.Wall. Zero
// fields of limits take their defaults. A nil clock is SystemClock.
func NewMeter(limits Limits, clock Clock) *Meter {
	if clock == nil {
		clock = SystemClock{}
	}
	limits = limits.WithDefaults()
	return &Meter{limits: limits, clock: clock, deadline: clock.Now().Add(limits.Wall), done: make(chan struct{}), wallLimit: MaxWall}
}

// NewSessionMeter is NewMeter for a session: its deadline is
// clock.Now()+lifetime rather than max_wall (which bounds each exec), and
// passing it halts with SessionLifetime. Extend moves it.
func NewSessionMeter(limits Limits, lifetime time.Duration, clock Clock) *Meter {
	m := NewMeter(limits, clock)
	m.deadline = m.clock.Now().Add(lifetime)
	m.wallLimit = SessionLifetime
	return m
}

// Extend moves the deadline to to, when that is later; it never brings
// it closer. It returns the deadline in force, or an *ExhaustedError when
// the meter has already halted (a passed deadline included).
func (m *Meter) Extend(to time.Time) (time.Time, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.checkLocked(); err != nil {
		return m.deadline, err
	}
	if to.After(m.deadline) {
		m.deadline = to
	}
	return m.deadline, nil
}

// ExtendBy moves the deadline d past the deadline in force (past now,
// when that has already passed), never beyond limit, in one step: two
// calls of 30 minutes add an hour. It returns the deadline in force, or an
// *ExhaustedError when the meter has already halted.
func (m *Meter) ExtendBy(d time.Duration, limit time.Time) (time.Time, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.checkLocked(); err != nil {
		return m.deadline, err
	}
	from := m.deadline
	if now := m.clock.Now(); from.Before(now) {
		from = now
	}
	to := from.Add(d)
	if to.After(limit) {
		to = limit
	}
	if to.After(m.deadline) {
		m.deadline = to
	}
	return m.deadline, nil
}

// Limits returns the meter's limits.
func (m *Meter) Limits() Limits { return m.limits }

// Deadline returns when max_wall (a session's lifetime) runs out.
func (m *Meter) Deadline() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.deadline
}

func (m *Meter) haltLocked(l Limit) error {
	if m.halted == "" {
		m.halted = l
		close(m.done)
	}
	return &ExhaustedError{Limit: m.halted}
}

// Done returns a channel that is closed when the meter halts, whatever the
// limit: a charge refused by max_ops or max_output_bytes, Halt, or a passed
// deadline noticed by a charge, Check or HaltedBy. The meter never notices
// its deadline on its own; the supervisor runs its own timer for max_wall.
// A halted meter refuses every later op, but the ops that were refused may
// have been refused in a loop: the supervisor must end the run when Done
// is closed rather than let it go on asking.
func (m *Meter) Done() <-chan struct{} { return m.done }

// checkLocked returns the halt error if the meter is halted or the deadline passed.
func (m *Meter) checkLocked() error {
	if m.halted != "" {
		return &ExhaustedError{Limit: m.halted}
	}
	if !m.clock.Now().Before(m.deadline) {
		return m.haltLocked(m.wallLimit)
	}
	return nil
}

// Check returns nil while no budget is blown, else an *ExhaustedError.
func (m *Meter) Check() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.checkLocked()
}

// ChargeOp counts one boundary crossing before it happens. It returns an
// *ExhaustedError, and the operation must not happen, when the meter is
// halted or this op would exceed max_ops.
func (m *Meter) ChargeOp() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.checkLocked(); err != nil {
		return err
	}
	if m.ops >= m.limits.Ops {
		return m.haltLocked(MaxOps)
	}
	m.ops++
	return nil
}

// ChargeOutput asks to emit n bytes of output. It returns how many of them
// fit under max_output_bytes; when fewer than n fit (or the meter is
// halted) it also returns an *ExhaustedError and the meter halts. A
// negative n is refused with an error that is not an *ExhaustedError.
func (m *Meter) ChargeOutput(n int64) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if n < 0 {
		// A negative charge would hand back budget already spent.
		return 0, fmt.Errorf("airlock bug: budget: ChargeOutput(%d) with a negative count", n)
	}
	if err := m.checkLocked(); err != nil {
		return 0, err
	}
	room := max(m.limits.OutputBytes-m.output, 0) // a negative limit leaves no room
	if n <= room {
		m.output += n
		return n, nil
	}
	m.output += room
	return room, m.haltLocked(MaxOutputBytes)
}

// ChargeCaptured counts n bytes of output the sandbox has already written
// (read from its pipes) against max_output_bytes, and returns how many of
// them fit. Unlike ChargeOutput it counts them when the meter is halted by
// another budget: output written before a halt (a deadline, an interrupt)
// that its reader had not reached yet is still what ran, and stays within
// max_output_bytes.
func (m *Meter) ChargeCaptured(n int64) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if n < 0 {
		return 0, fmt.Errorf("airlock bug: budget: ChargeCaptured(%d) with a negative count", n)
	}
	_ = m.checkLocked() // a passed deadline halts the meter, as any charge does; the bytes still count
	room := max(m.limits.OutputBytes-m.output, 0)
	if n <= room {
		m.output += n
		return n, nil
	}
	m.output += room
	return room, m.haltLocked(MaxOutputBytes) // the first halt stays the meter's
}

// Halt stops the meter because of limit l (for example when the kernel
// reports max_memory). The first halt wins. It panics if l is empty, which
// would leave the meter running.
func (m *Meter) Halt(l Limit) {
	if l == "" {
		panic("budget: Halt with an empty Limit")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	_ = m.haltLocked(l) // the error is only the description of the halt
}

// HaltedBy returns the budget that halted the meter, or "" while running.
// It also notices a passed deadline.
func (m *Meter) HaltedBy() Limit {
	m.mu.Lock()
	defer m.mu.Unlock()
	_ = m.checkLocked() // records a passed deadline as the halt reason
	return m.halted
}

// Usage returns the ops and output bytes charged so far.
func (m *Meter) Usage() (ops, outputBytes int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ops, m.output
}
