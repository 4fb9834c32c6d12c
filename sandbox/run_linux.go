package sandbox

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/internal/enforce/nsinit"
	"github.com/airlock-sandbox/airlock/plan"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
)

// Init hands control to the sandbox's init when this process is the
// re-executed child; otherwise it returns at once. Call it first in main.
func Init() {
	if len(os.Args) == 0 {
		return
	}
	switch os.Args[0] {
	case nsinit.Arg0:
		nsinit.Main()
	case launcherArg0:
		launch()
	}
}

const cloneFlags = unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWNET |
	unix.CLONE_NEWIPC | unix.CLONE_NEWUTS | unix.CLONE_NEWCGROUP

// Plan compiles the plan this Cmd would run, without running anything.
func (c *Cmd) Plan() (*plan.Plan, error) {
	if c.Policy == nil {
		return nil, errors.New("sandbox: Config.Policy is nil: build one with policy.Parse, policy.New or policy.Default")
	}
	return plan.Compile(c.Policy, plan.Request{Argv: c.Args, Cwd: c.Dir, CommandIsGranted: c.CommandIsGranted}, &hostFS{})
}

// run holds the state of one Run.
type run struct {
	c      *Cmd
	meter  *budget.Meter
	rec    audit.DenialLog // the report's denials; allow events are not kept
	sink   audit.Sink
	log    *slog.Logger
	start  time.Time
	report *Report

	fs *fsDenials // nil when filesystem denials are not collected

	// pl is the compiled plan, for explaining a failed exec; nil when the
	// plan was not compiled.
	pl *plan.Plan
	// session is the session's own run when this is one of its execs, nil
	// for a run of its own.
	session *run

	mu      sync.Mutex
	haltMsg string // guarded by mu
}

// Run starts the command in a fresh sandbox, waits for it and returns the
// report. The error is non-nil only when ctx was nil-like misuse; every
// outcome of the command, including airlock refusing to start it (exit
// 125), is in the Report.
func (c *Cmd) Run(ctx context.Context) (*Report, error) {
	if ctx == nil {
		panic("sandbox: nil context")
	}
	r := &run{c: c, start: time.Now(), report: &Report{Denials: []Denial{}}}
	r.log = c.Logger
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	r.sink = audit.Tee{&r.rec, c.Audit}
	if c.Policy == nil {
		return r.refuse(125, errors.New("sandbox: Config.Policy is nil: build one with policy.Parse, policy.New or policy.Default")), nil
	}
	r.meter = budget.NewMeter(c.Policy.Budget(), c.Clock)
	pl, err := c.Plan()
	if err != nil {
		return r.refuse(planExitCode(err), err), nil
	}
	r.pl = pl
	switch c.Isolation {
	case "", IsolationNamespaces:
		r.exec(ctx, pl)
	case IsolationOCI:
		r.execOCI(ctx, pl)
	default:
		return r.refuse(125, fmt.Errorf("sandbox: isolation %q: use %q or %q", c.Isolation, IsolationNamespaces, IsolationOCI)), nil
	}
	return r.report, nil
}

func planExitCode(err error) int {
	var de *policy.DenyError
	if errors.As(err, &de) || errors.Is(err, ErrNotFound) {
		return 127
	}
	return 125
}

func (r *run) refuse(code int, err error) *Report {
	r.report.ExitCode = code
	r.report.Error = err.Error()
	var de *policy.DenyError
	if errors.As(err, &de) {
		r.sink.Emit(audit.Event{Time: time.Now(), Kind: audit.Deny, Layer: audit.LayerExec, Op: de.Op, Target: de.Subject, Rule: de.Cap.String(),
			Message: de.Error(), Suggestion: r.c.Policy.Suggest(de).String(), Hint: de.Hint})
	}
	r.finish()
	return r.report
}

func (r *run) finish() {
	r.report.DurationMS = time.Since(r.start).Milliseconds()
	setDenials(r.report, r.rec.Take())
	if r.meter != nil {
		r.report.Usage.Ops, r.report.Usage.OutputBytes = r.meter.Usage()
	}
}

// hostID picks the unprivileged host uid/gid the sandbox runs as when the
// supervisor is root: random per run, far above ordinary accounts, so two
// sandboxes never share an identity with each other or with a host user.
func hostID() int {
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand does not fail on Linux
	return 1<<30 + int(binary.LittleEndian.Uint32(b[:])%(1<<24))
}

func (r *run) exec(ctx context.Context, pl *plan.Plan) {
	defer r.finish()
	// Pdeathsig fires when the thread that started the child exits: keep it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	stdout := &capture{r: r, tee: r.c.Stdout, halted: make(chan struct{}, 1)}
	stderr := &capture{r: r, tee: r.c.Stderr, halted: make(chan struct{}, 1)}
	var stdin io.Reader = r.c.Stdin
	var initOut, initErr io.Writer = stdout, stderr
	var ptyDone <-chan struct{}
	var ptyMaster *os.File
	if r.c.PTY {
		pl.PTY = true
		master, slave, err := openPTY()
		if err != nil {
			r.fail(err)
			return
		}
		defer master.Close()
		defer slave.Close()
		stdin, initOut, initErr = slave, slave, slave
		ptyDone, ptyMaster = pumpPTY(master, r.c.Stdin, stdout), master
	}
	r.fs = startFSAudit(r)
	defer r.fs.close()
	ip, err := startInit(r, pl, stdin, initOut, initErr)
	if err != nil {
		r.fail(err)
		return
	}
	defer ip.shutdown(r)
	if c, ok := stdin.(io.Closer); ok && r.c.PTY {
		_ = c.Close() // the init holds the slave now; EOF on the master needs ours closed
	}

	timer := time.NewTimer(time.Until(r.meter.Deadline()))
	defer timer.Stop()
	var exitMsg, stageErr *nsinit.Message
	live := (<-chan nsinit.Message)(ip.msgs)
	meterDone := r.meter.Done() // a charge the sandbox provoked blew the budget
	cancelled := ctx.Done()
	for {
		select {
		case m, ok := <-live:
			if !ok {
				live = nil // the init closed its end; wait for its exit status
				continue
			}
			switch m.Type {
			case "exit":
				exitMsg = &m
			case "error":
				stageErr = &m
			case "ready":
				r.ready(m)
			}
			continue
		case <-timer.C:
			r.halt(budget.MaxWall, "the run passed max_wall and was killed with everything it started")
			ip.kill()
			continue
		case <-cancelled:
			cancelled = nil // closed for good; kill once
			r.halt(budget.Interrupted, "the caller stopped the run ("+context.Cause(ctx).Error()+"): everything it started was killed")
			ip.kill()
			continue
		case <-stdout.halted:
			ip.kill()
			continue
		case <-stderr.halted:
			ip.kill()
			continue
		case <-meterDone:
			meterDone = nil // closed for good; kill once
			r.halt("", haltReason(r.meter.HaltedBy()))
			ip.kill()
			continue
		case <-ip.exited:
		}
		break
	}
	// Drain control messages that raced with the exit: readControl closes
	// msgs when the init's end of the socket is gone.
	for m := range ip.msgs {
		switch m.Type {
		case "exit":
			exitMsg = &m
		case "error":
			stageErr = &m
		}
	}
	if ptyDone != nil {
		// Everything holding the slave is dead; read what is buffered, then stop.
		_ = ptyMaster.SetReadDeadline(time.Now().Add(drainGrace))
		<-ptyDone
	}
	r.report.Stdout, r.report.StdoutTruncated = stdout.result()
	r.report.Stderr, r.report.StderrTruncated = stderr.result()
	ps := ip.cmd.ProcessState
	r.report.Usage.CPUMS = (ps.UserTime() + ps.SystemTime()).Milliseconds()
	ip.shutdown(r)
	r.fs.emit(r, true)

	// Without a cgroup (an accepted downgrade) RLIMIT_CPU still holds; the
	// init's rusage includes every process it reaped.
	if maxCPU := r.c.Policy.Budget().CPU; r.report.Usage.CPUMS >= maxCPU.Milliseconds() ||
		(exitMsg != nil && exitMsg.Signal == int(unix.SIGXCPU)) {
		r.halt(budget.MaxCPU, "the process tree used max_cpu of CPU time")
	}
	if r.reportHalt() {
		return
	}
	switch {
	case stageErr != nil:
		r.report.ExitCode = 125
		r.report.Error = "sandbox setup failed at " + stageErr.Stage + ": " + stageErr.Error + " (nothing was started)"
	case exitMsg != nil:
		r.exitStatus(*exitMsg, pl.Argv[0])
	default:
		r.report.ExitCode = 125
		r.report.Error = "sandbox init died without reporting: " + ps.String()
	}
}

// ready records what the init enforced.
func (r *run) ready(m nsinit.Message) {
	r.report.Enforcement.Landlock = m.Landlock
	r.report.Enforcement.Namespaces = true
	r.report.Enforcement.Seccomp = true
}

// reportHalt fills halted_by and exit 124 when a budget halted the run.
func (r *run) reportHalt() bool {
	h := r.meter.HaltedBy()
	if h == "" {
		return false
	}
	s := string(h)
	r.report.HaltedBy = &s
	r.report.ExitCode = 124
	e := audit.Event{Time: time.Now(), Kind: audit.Halt, Layer: audit.LayerBudget, Rule: s, Message: r.haltMessage()}
	switch {
	case h == budget.Interrupted:
		// The caller stopped it: there is no budget to raise.
		r.report.Error = r.haltMessage()
	case r.execTimedOut(h):
		// The exec's own timeout ended it, not the policy: the caller may
		// give it a longer one.
		e.Hint = "give the exec a longer timeout, up to what is left of the session's max_wall"
	default:
		e.Suggestion = r.c.Policy.SuggestBudget(h).String()
	}
	r.sink.Emit(e)
	addSuggestion(r.report, e)
	return true
}

// execTimedOut reports whether a session's exec was halted at max_wall by
// its own timeout while the session had time left.
func (r *run) execTimedOut(h budget.Limit) bool {
	if r.session == nil || h != budget.MaxWall || r.session.meter.HaltedBy() != "" {
		return false
	}
	now := time.Now()
	if r.c.Clock != nil {
		now = r.c.Clock.Now() // the clock the meters' deadlines are on
	}
	return now.Before(r.session.meter.Deadline())
}

// exitStatus fills the report from the init's exit message for a command.
// When the init could not start argv0, it says why, naming the real cause
// (a missing #! interpreter or dynamic loader) and, when a policy change
// would let it start, emits the denial with that change as its suggestion.
func (r *run) exitStatus(m nsinit.Message, argv0 string) {
	r.report.ExitCode = m.Code
	if m.Signal != 0 {
		s := m.Signal
		r.report.Signal = &s
	}
	if m.Error == "" {
		return
	}
	r.report.Error = m.Error
	if (m.Code != 126 && m.Code != 127) || !strings.HasPrefix(m.Error, "exec "+argv0+": ") {
		return // not an exec that failed: the session ended, say
	}
	d := diagnoseExec(r.pl, r.c.Policy, argv0)
	if d.cause != "" {
		r.report.Error = m.Error + ": " + d.cause
	}
	if !d.fix.IsZero() {
		r.sink.Emit(audit.Event{Time: time.Now(), Kind: audit.Deny, Layer: audit.LayerExec, Op: "exec", Target: argv0, Rule: policy.AllowedTools.String(),
			Message: d.cause, Suggestion: d.fix.String(), Hint: d.hint})
	}
}

func (r *run) halt(l budget.Limit, msg string) {
	if l != "" {
		r.meter.Halt(l)
	}
	r.mu.Lock()
	if r.haltMsg == "" {
		r.haltMsg = msg
	}
	r.mu.Unlock()
}

// haltReason explains a halt that the meter noticed (a refused charge)
// rather than the supervisor.
func haltReason(l budget.Limit) string {
	if l == budget.MaxOps {
		return "the run reached max_ops (each connection to the egress proxy and each request it decides, granted or denied, is one op) and was killed with everything it started"
	}
	return "the run reached " + string(l) + " and was killed with everything it started"
}

func (r *run) haltMessage() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.haltMsg
}

func (r *run) fail(err error) {
	r.report.ExitCode = 125
	r.report.Error = err.Error()
}

// capture keeps one output stream up to the meter's output cap.
type capture struct {
	r      *run
	tee    io.Writer
	mu     sync.Mutex
	buf    bytes.Buffer  // guarded by mu
	cut    bool          // guarded by mu
	halted chan struct{} // receives once the cap is reached
}

func (c *capture) Write(p []byte) (int, error) {
	n, err := c.r.meter.ChargeOutput(int64(len(p)))
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
			c.r.halt(budget.MaxOutputBytes, "the output reached max_output_bytes; what came before the cap is kept")
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
