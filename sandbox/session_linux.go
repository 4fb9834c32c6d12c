package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/guard"
	"github.com/airlock-sandbox/airlock/internal/enforce/nsinit"
	"github.com/airlock-sandbox/airlock/plan"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
)

// Session is a long-lived sandbox: one policy, one set of namespaces kept
// alive by its init, one budget. Each Exec runs a command inside it with the
// same restrictions; background processes survive between execs and die
// with the session. max_ops counts execs, file operations (Guard) and egress
// requests; max_wall is the session's deadline; max_output_bytes applies to
// each exec. It is safe for concurrent use.
type Session struct {
	id      string
	r       *run // session-wide state: policy, meter, audit
	pl      *plan.Plan
	ip      *initProc
	created time.Time
	done    chan struct{} // closed when the session has ended
	closeCh chan struct{} // closed by Close

	closeOnce sync.Once

	guardMu sync.Mutex
	guard   *guard.Guard // guarded by guardMu; set once the sandbox is ready

	mu      sync.Mutex
	pending map[string]chan nsinit.Message // guarded by mu: exec ID -> its messages
	closed  bool                           // guarded by mu
	execs   int                            // guarded by mu
}

// NewSession starts a sandbox that stays up until Close, its max_wall
// deadline, or ctx ends. It returns once the sandbox is fully restricted
// and ready for Exec.
func NewSession(ctx context.Context, cfg Config) (*Session, error) {
	if ctx == nil {
		panic("sandbox: nil context")
	}
	if cfg.Policy == nil {
		return nil, errors.New("sandbox: Config.Policy is nil: build one with policy.Parse, policy.New or policy.Default")
	}
	pl, err := plan.Compile(cfg.Policy, plan.Request{Session: true}, &hostFS{})
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	s := &Session{id: newID(), pl: pl, created: time.Now(), done: make(chan struct{}), closeCh: make(chan struct{}), pending: map[string]chan nsinit.Message{}}
	r := &run{c: &Cmd{Config: cfg}, start: s.created, report: &Report{Denials: []Denial{}}}
	r.log = cfg.Logger
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	r.sink = audit.Tee{&r.rec, cfg.Audit}
	r.meter = budget.NewMeter(cfg.Policy.Budget(), cfg.Clock)
	s.r = r

	r.fs = startFSAudit(r)
	started := make(chan error, 1)
	// The init's Pdeathsig is tied to the thread that started it: a locked
	// goroutine holds that thread for the session's whole life.
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		ip, err := startInit(r, pl, nil, io.Discard, io.Discard)
		if err != nil {
			r.fs.close()
			started <- err
			return
		}
		s.ip = ip
		started <- nil
		s.supervise(ctx)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	// Wait for the init to report that every restriction is in place.
	select {
	case m := <-s.readyOrExit():
		if m.Type != "ready" {
			s.Close()
			return nil, fmt.Errorf("sandbox: session setup failed at %s: %s", m.Stage, m.Error)
		}
		r.ready(m)
	case <-s.done:
		return nil, errors.New("sandbox: session init exited during setup")
	}
	// The file API resolves beneath the grant roots as the sandbox sees
	// them (opened by the init before it ran anything): what the sandbox
	// does to the paths above a grant cannot change what the grant means.
	workspace := "/"
	if w := cfg.Policy.FSWrite(); len(w) > 0 {
		workspace = w[0]
	}
	gc := guard.Config{Policy: cfg.Policy, Clock: cfg.Clock, Meter: r.meter, Audit: r.sink, Cwd: workspace, Roots: s.ip.stage.rootFDs()}
	if id := s.ip.sandboxID; id != 0 {
		gc.As = asSandbox(id)
	}
	g, err := guard.New(gc)
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("sandbox: file access: %w", err)
	}
	s.guardMu.Lock()
	s.guard = g
	s.guardMu.Unlock()
	return s, nil
}

func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand does not fail on Linux
	return hex.EncodeToString(b[:])
}

// readyOrExit receives the init's ready or setup-error message.
func (s *Session) readyOrExit() <-chan nsinit.Message {
	return s.pendingChan("")
}

func (s *Session) pendingChan(id string) chan nsinit.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, ok := s.pending[id]
	if !ok {
		ch = make(chan nsinit.Message, 4)
		s.pending[id] = ch
	}
	return ch
}

// supervise routes control messages to execs and ends the session at its
// deadline, when ctx ends, or when the init dies.
func (s *Session) supervise(ctx context.Context) {
	defer close(s.done)
	timer := time.NewTimer(time.Until(s.r.meter.Deadline()))
	defer timer.Stop()
	msgs := (<-chan nsinit.Message)(s.ip.msgs)
	for {
		select {
		case m, ok := <-msgs:
			if !ok {
				msgs = nil
				continue
			}
			id := m.ID
			if m.Type == "ready" || m.Type == "error" {
				id = ""
			}
			select {
			case s.pendingChan(id) <- m:
			default:
				s.r.log.Error("session: dropped control message", "type", m.Type, "id", m.ID)
			}
			continue
		case <-timer.C:
			s.r.halt(budget.MaxWall, "the session passed max_wall and was ended with everything running in it")
		case <-s.r.meter.Done(): // a blown budget (max_ops) ends the session
		case <-ctx.Done():
		case <-s.ip.exited:
		case <-s.closing():
		}
		break
	}
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.guardMu.Lock()
	if s.guard != nil {
		_ = s.guard.Close() // waits for file operations in flight; they end before the copy back
	}
	s.guardMu.Unlock()
	s.ip.shutdown(s.r)
	s.r.fs.emit(s.r, true) // late records reach the audit sink
	s.r.fs.close()
}

// closing is closed by Close.
func (s *Session) closing() <-chan struct{} { return s.closeCh }

// ID returns the session's random identifier.
func (s *Session) ID() string { return s.id }

// Policy returns the session's policy.
func (s *Session) Policy() *policy.Policy { return s.r.c.Policy }

// Guard returns the in-process guard for file operations on the session's
// grants, as the sandbox sees them (staged writes included). It shares the
// session's budget and audit sink, and refuses every operation once the
// session has ended.
func (s *Session) Guard() *guard.Guard {
	s.guardMu.Lock()
	defer s.guardMu.Unlock()
	return s.guard
}

// Done is closed when the session has ended.
func (s *Session) Done() <-chan struct{} { return s.done }

// Info describes the session.
func (s *Session) Info() SessionInfo {
	s.mu.Lock()
	execs := s.execs
	s.mu.Unlock()
	info := SessionInfo{ID: s.id, Created: s.created, Deadline: s.r.meter.Deadline(), Execs: execs}
	if w := s.r.c.Policy.FSWrite(); len(w) > 0 {
		info.Workspace = w[0]
	}
	info.Usage.Ops, info.Usage.OutputBytes = s.r.meter.Usage()
	info.Usage.WriteBytes, _ = s.ip.stage.usage() // staged, reaching the host when the session ends
	info.PendingDenials, _ = denialsFrom(s.r.rec.Pending())
	info.DenialCounts = countsFrom(s.r.rec.Totals())
	if g := s.ip.lim.group; g != nil {
		if u, err := g.Usage(); err == nil {
			info.Usage.CPUMS, info.Usage.MaxMemoryBytes = u.CPU.Milliseconds(), u.MemoryPeak
		}
	}
	return info
}

// Writes returns what the copy back of the session's staged fs_write grants
// did, once the session has ended (nil before, or when it has none).
func (s *Session) Writes() *Writes {
	select {
	case <-s.done:
		return s.r.report.Writes
	default:
		return nil
	}
}

// Close ends the session and everything running in it, then copies its
// staged writes to the host (see Writes). It is idempotent.
func (s *Session) Close() error {
	s.closeOnce.Do(func() { close(s.closeCh) })
	<-s.done
	return nil
}
