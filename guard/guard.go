package guard

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
	"github.com/airlock-sandbox/airlock/policy/pathspec"
)

// Config describes one guard. The zero Config is invalid: New needs a Policy.
type Config struct {
	// Policy lists what may be touched. Required; New fails without it.
	Policy *policy.Policy

	// Clock times audit events and, when Meter is nil, the new meter's
	// deadline. Nil means budget.SystemClock{}.
	Clock budget.Clock

	// Meter counts ops and output bytes and holds the deadline. Sessions
	// pass one meter shared by all their guards. Nil means a new meter from
	// Policy.Budget() and Clock, whose deadline starts at New.
	Meter *budget.Meter

	// Audit receives one event per decision. Nil means audit.Discard.
	Audit audit.Sink

	// Cwd is the absolute base for relative paths. "" means "/".
	Cwd string

	// Roots are open fds of grant roots, by canonical grant path (fs_read
	// and fs_write). Every file operation resolves beneath the root fd of
	// its grant, so what a grant means is fixed when the fd is opened: a
	// renamed or replaced ancestor, or a symlink planted above the grant,
	// changes nothing. Sessions pass the roots as the sandbox sees them.
	// New duplicates them (the caller keeps its own), and fails when a
	// grant is missing. Nil Roots makes New open every grant from its host
	// path without following any symlink (and fail if that cannot be
	// done). Close releases them.
	Roots map[string]int

	// As runs each filesystem operation, for example with the sandbox's
	// file system identity, so that files the guard creates belong to the
	// sandbox and the supervisor's privileges do not apply. Nil runs them
	// as the calling process.
	As func(op func() error) error
}

// Entry is one directory entry returned by List. Symlinks are reported as
// themselves (ModeSymlink set, Dir false), never followed.
type Entry struct {
	Name string      // base name within the listed directory
	Dir  bool        // whether the entry is a directory
	Size int64       // size in bytes as reported by lstat
	Mode fs.FileMode // type and permission bits
}

// Guard checks and performs operations on behalf of an agent. It is safe
// for concurrent use. The zero Guard refuses everything; use New.
type Guard struct {
	policy     *policy.Policy
	clock      budget.Clock
	meter      *budget.Meter
	sink       audit.Sink
	cwd        string
	readRoots  []string            // fs_read and fs_write grants, longest first
	writeRoots []string            // fs_write grants, longest first
	roots      map[string]heldRoot // by grant path; released by Close
	as         func(op func() error) error

	haltReported atomic.Bool // whether the Halt event has been emitted

	closeMu sync.Mutex
	closed  bool           // guarded by closeMu
	opsWG   sync.WaitGroup // operations in flight, waited for by Close
}

// errUnconfigured is returned by every method of a Guard not made by New.
var errUnconfigured = errors.New("guard: guard was not made by guard.New: construct it with New")

// New validates cfg and returns a guard for it.
func New(cfg Config) (*Guard, error) {
	if cfg.Policy == nil {
		return nil, errors.New("guard: new: no policy: set Config.Policy")
	}
	cwd := "/"
	if cfg.Cwd != "" {
		if !strings.HasPrefix(cfg.Cwd, "/") {
			return nil, fmt.Errorf("guard: new: cwd %q is relative: give an absolute path", cfg.Cwd)
		}
		c, err := pathspec.Abs("/", cfg.Cwd)
		if err != nil {
			return nil, fmt.Errorf("guard: new: cwd %q: %w", cfg.Cwd, err)
		}
		cwd = c
	}
	g := &Guard{
		policy: cfg.Policy,
		clock:  cfg.Clock,
		meter:  cfg.Meter,
		sink:   cfg.Audit,
		cwd:    cwd,
	}
	if g.clock == nil {
		g.clock = budget.SystemClock{}
	}
	if g.meter == nil {
		g.meter = budget.NewMeter(cfg.Policy.Budget(), g.clock)
	}
	if g.sink == nil {
		g.sink = audit.Discard
	}
	g.writeRoots = longestFirst(cfg.Policy.FSWrite())
	g.readRoots = longestFirst(append(cfg.Policy.FSRead(), cfg.Policy.FSWrite()...))
	g.as = cfg.As
	if g.as == nil {
		g.as = func(op func() error) error { return op() }
	}
	roots, err := holdRoots(g.readRoots, cfg.Roots)
	if err != nil {
		return nil, fmt.Errorf("guard: new: %w", err)
	}
	g.roots = roots
	return g, nil
}

// Close releases the guard's root fds; later operations fail. It is
// idempotent.
func (g *Guard) Close() error {
	if g == nil {
		return nil
	}
	g.closeMu.Lock()
	defer g.closeMu.Unlock()
	if g.closed {
		return nil
	}
	g.closed = true
	g.opsWG.Wait()
	releaseRoots(g.roots)
	return nil
}

// longestFirst sorts roots so the most specific grant is tried first.
func longestFirst(roots []string) []string {
	slices.SortStableFunc(roots, func(a, b string) int { return len(b) - len(a) })
	return slices.Compact(roots)
}

// Meter returns the meter the guard charges, so a session can report usage
// or halt it when another layer blows a budget.
func (g *Guard) Meter() *budget.Meter { return g.meter }

// charge counts one op before anything else happens. When the budget is
// blown it records the refusal and returns the *budget.ExhaustedError.
func (g *Guard) charge(op, target string) error {
	if g == nil || g.policy == nil {
		return errUnconfigured
	}
	if err := g.meter.ChargeOp(); err != nil {
		return g.exhausted(op, target, err)
	}
	return nil
}

// exhausted records a budget refusal: the first one of this guard is the
// Halt event, every later one a Deny event. It returns err unchanged.
func (g *Guard) exhausted(op, target string, err error) error {
	rule := string(budget.MaxOps)
	var ee *budget.ExhaustedError
	if errors.As(err, &ee) {
		rule = string(ee.Limit)
	}
	kind := audit.Deny
	if g.haltReported.CompareAndSwap(false, true) {
		kind = audit.Halt
	}
	g.sink.Emit(audit.Event{
		Time:       g.clock.Now(),
		Kind:       kind,
		Layer:      audit.LayerBudget,
		Op:         op,
		Target:     target,
		Rule:       rule,
		Message:    err.Error(),
		Suggestion: g.policy.SuggestBudget(budget.Limit(rule)).String(),
	})
	return err
}

// deny records de and returns it. hint, when set, becomes de.Hint: what
// the caller can do instead within the grants (use the real path, say),
// which front ends may show the agent. The suggestion, which widens the
// policy, is the operator's and goes only to the audit event.
func (g *Guard) deny(layer string, de *policy.DenyError, hint string) error {
	if hint != "" {
		de.Hint = hint
	}
	msg := de.Reason
	if msg == "" {
		msg = de.Error()
	}
	g.sink.Emit(audit.Event{
		Time:       g.clock.Now(),
		Kind:       audit.Deny,
		Layer:      layer,
		Op:         de.Op,
		Target:     de.Subject,
		Rule:       de.Cap.String(),
		Message:    msg,
		Suggestion: g.policy.Suggest(de).String(),
		Hint:       de.Hint,
	})
	return de
}

// allow records an admitted operation. msg is empty or says how the
// operation ended when it failed for a reason other than the policy.
func (g *Guard) allow(layer, op, target string, c policy.Capability, msg string) {
	if msg == "" {
		msg = "granted by " + c.String()
	}
	g.sink.Emit(audit.Event{
		Time:    g.clock.Now(),
		Kind:    audit.Allow,
		Layer:   layer,
		Op:      op,
		Target:  target,
		Rule:    c.String(),
		Message: msg,
	})
}
