package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/guard"
	"github.com/airlock-sandbox/airlock/plan"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
)

// Session is a long-lived sandbox: one policy, one sandbox kept alive
// between execs, one budget. Each Exec runs a command inside it with the
// same restrictions; background processes survive between execs and die
// with the session. max_ops counts execs, file operations (Guard) and egress
// requests; max_wall and max_output_bytes apply to each exec; the session
// lives for Config.SessionLifetime, which Extend moves. It is safe for concurrent use.
type Session struct {
	id      string
	b       *box
	created time.Time

	guardMu sync.Mutex
	guard   *guard.Guard // guarded by guardMu; set once the sandbox is ready
}

// NewSession starts a sandbox that stays up until Close, the end of its
// lifetime (Config.SessionLifetime, moved by Extend), or ctx ends. It returns once the sandbox is fully restricted
// and ready for Exec.
func NewSession(ctx context.Context, cfg Config) (*Session, error) {
	if ctx == nil {
		panic("sandbox: nil context")
	}
	if cfg.Policy == nil {
		return nil, errNoPolicy
	}
	c, err := cfg.compileRun(plan.Request{Session: true})
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	be, err := backendFor(cfg, c.pl)
	if err != nil {
		return nil, err
	}
	created := time.Now()
	b, err := startBox(ctx, cfg, c, be)
	if err != nil {
		return nil, fmt.Errorf("sandbox: session: %w", err)
	}
	s := &Session{id: b.id, b: b, created: created}
	// The file API resolves beneath the grant roots as the sandbox sees
	// them (opened by the init before it ran anything): what the sandbox
	// does to the paths above a grant cannot change what the grant means.
	// The guard speaks the sandbox's paths: placed grants at their places.
	workspace := "/"
	if w := b.view.FSWrite(); len(w) > 0 {
		workspace = w[0]
	}
	// The file API's denials are answered to its caller (a 403, a tool
	// error) and audited; they are not the command's, so they stay out of
	// the session's recorder, which fills the next exec's report.
	fileSink := runSink{run: b.id, next: audit.Tee{cfg.Audit}}
	gc := guard.Config{Policy: b.view, Clock: cfg.Clock, Meter: b.meter, Audit: fileSink, Cwd: workspace, Roots: b.stage.rootFDs()}
	if b.sandboxID != 0 {
		gid := b.sandboxGID
		if gid == 0 {
			gid = b.sandboxID
		}
		gc.As = asSandbox(b.sandboxID, gid)
	}
	g, err := guard.New(gc)
	if err != nil {
		b.close()
		return nil, fmt.Errorf("sandbox: file access: %w", err)
	}
	s.guardMu.Lock()
	s.guard = g
	s.guardMu.Unlock()
	b.setGuard(g)
	return s, nil
}

func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand does not fail on Linux
	return hex.EncodeToString(b[:])
}

// Exec runs one command inside the session and returns its report. The
// error is non-nil only when the session has ended (ErrSessionClosed) or
// ctx is nil; refusals, budget halts and failures are in the Report.
func (s *Session) Exec(ctx context.Context, req ExecRequest) (*Report, error) {
	if ctx == nil {
		panic("sandbox: nil context")
	}
	b := s.b
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, ErrSessionClosed
	}
	b.execs++
	b.mu.Unlock()
	start := time.Now()
	opsBefore, _ := b.meter.Usage()
	rep := s.exec(ctx, req)
	// Everything denied since the previous exec's report, including what
	// background processes provoked between execs; concurrent execs split
	// the denials between them, each reported once. Records arrive
	// asynchronously: a denial in an exec's last instant may appear in the
	// next exec's report.
	b.fs.emit(b, false)
	setDenials(rep, b.rec.Take())
	setEgressErrors(rep, b.egr.Take())
	rep.DurationMS = time.Since(start).Milliseconds()
	// The exec's own usage: the ops charged while it ran (its own and its
	// background's); CPU and peak memory are its process tree's (wait4),
	// or the sandbox's since the exec began when the sandbox ended under it.
	opsAfter, _ := b.meter.Usage()
	rep.Usage.Ops = opsAfter - opsBefore
	rep.Usage.WriteBytes, _ = b.stage.usage()
	select {
	case <-b.done:
		rep.Usage.WriteBytes = b.finalState().usage.WriteBytes
	default:
	}
	return rep, nil
}

// exec checks and resolves req, then runs it in the sandbox.
func (s *Session) exec(ctx context.Context, req ExecRequest) *Report {
	b := s.b
	refuse := func(code int, err error) *Report {
		rep := refusal(b.sink, b.cfg.Policy, code, err)
		rep.Enforcement, rep.RunID = b.enf, b.id
		return rep
	}
	if err := b.meter.ChargeOp(); err != nil {
		var ex *budget.ExhaustedError
		if !errors.As(err, &ex) {
			return refuse(125, err)
		}
		rep := &Report{Denials: []Denial{}, Enforcement: b.enf, RunID: b.id}
		haltReport(rep, b.sink, b.cfg.Policy, ex.Limit, "the session's "+string(ex.Limit)+" is exhausted", "")
		return rep
	}
	argv0, err := resolveTool(b.pl, req.Args)
	if err != nil {
		return refuse(127, err)
	}
	env, err := plan.ExecEnv(b.pl, req.Env)
	if err != nil {
		return refuse(125, err)
	}
	cwd := req.Dir
	if cwd != "" {
		if !strings.HasPrefix(cwd, "/") {
			return refuse(125, fmt.Errorf("exec dir %q: use an absolute path inside the sandbox", cwd))
		}
		if cwd, err = plan.Workdir(b.view, cwd); err != nil {
			return refuse(125, err)
		}
		if b.pl.NoNamespaces && !b.view.CanRead(cwd) {
			cwd = plan.InScratch(cwd, b.pl.Scratch) // /tmp is the scratch folder there
		}
	}
	return b.exec(ctx, execSpec{argv: append([]string{argv0}, req.Args[1:]...), env: env, cwd: cwd,
		stdin: req.Stdin, stdout: req.Stdout, stderr: req.Stderr, pty: req.PTY, wall: req.Timeout})
}

// ID returns the session's random identifier.
func (s *Session) ID() string { return s.id }

// Policy returns the session's policy.
func (s *Session) Policy() *policy.Policy { return s.b.cfg.Policy }

// Guard returns the in-process guard for file operations on the session's
// grants, as the sandbox sees them (staged writes included). It shares the
// session's budget and audit sink, and refuses every operation once the
// session has ended.
func (s *Session) Guard() *guard.Guard {
	s.guardMu.Lock()
	defer s.guardMu.Unlock()
	return s.guard
}

// Extend moves the session's end d past its current end (past now, if
// that has passed), never beyond SessionMaxLifetime from its start; it
// returns the end in force. Calls add up: two of 30 minutes add an hour.
// It fails once the session has ended. The HTTP API's extend, MCP's
// extend_session and the clients mean the same.
func (s *Session) Extend(d time.Duration) (time.Time, error) {
	b := s.b
	if d <= 0 {
		return b.meter.Deadline(), fmt.Errorf("sandbox: extend by %v: give a positive duration", d)
	}
	_, maxLifetime := b.cfg.sessionLifetimes()
	select {
	case <-b.done:
		return b.meter.Deadline(), ErrSessionClosed
	default:
	}
	end, err := b.meter.ExtendBy(d, s.created.Add(maxLifetime))
	if err != nil {
		return end, ErrSessionClosed
	}
	select {
	case b.extended <- struct{}{}:
	default: // a reset is already pending; it reads the new deadline
	}
	return end, nil
}

// Done is closed when the session has ended.
func (s *Session) Done() <-chan struct{} { return s.b.done }

// Info describes the session.
func (s *Session) Info() SessionInfo {
	b := s.b
	b.mu.Lock()
	execs := b.execs
	b.mu.Unlock()
	_, maxLifetime := b.cfg.sessionLifetimes()
	info := SessionInfo{ID: s.id, Created: s.created, Deadline: b.meter.Deadline(), MaxDeadline: s.created.Add(maxLifetime), ExecWall: b.pl.Limits.Wall.String(), Execs: execs}
	if w := b.view.FSWrite(); len(w) > 0 {
		info.Workspace = w[0]
	}
	info.Usage.Ops, info.Usage.OutputBytes = b.meter.Usage()
	info.Usage.WriteBytes, _ = b.stage.usage() // staged, reaching the host when the session ends
	info.PendingDenials, _ = denialsFrom(b.rec.Pending())
	info.DenialCounts = countsFrom(b.rec.Totals())
	if u, ok := b.lim.usage(); ok {
		info.Usage.CPUMS, info.Usage.MaxMemoryBytes = u.CPUMS, u.MaxMemoryBytes
	}
	return info
}

// Writes returns what the copy back of the session's staged fs_write grants
// did, once the session has ended (nil before, or when it has none).
func (s *Session) Writes() *Writes {
	select {
	case <-s.b.done:
		return s.b.finalState().writes
	default:
		return nil
	}
}

// Close ends the session and everything running in it, then copies its
// staged writes to the host (see Writes). It is idempotent.
func (s *Session) Close() error {
	s.b.close()
	return nil
}
