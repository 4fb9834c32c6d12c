package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/internal/enforce/nsinit"
	"github.com/airlock-sandbox/airlock/internal/image"
	"github.com/airlock-sandbox/airlock/plan"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
)

// Init hands control to the sandbox's init, or to the image unpack, when
// this process is the re-executed child; otherwise it returns at once.
// Call it first in main.
func Init() {
	initCalled.Store(true)
	if len(os.Args) > 0 && os.Args[0] == image.ChildArg0 {
		// The unpack re-executes the supervisor's own binary, which links
		// the image package anyway; airlock-init, on the path of every
		// sandbox start, does not link the tar and gzip readers.
		image.Child()
	}
	nsinit.Dispatch() // the same table as cmd/airlock-init's
}

// initCalled says Init ran in this process, so that re-executing it as
// the sandbox's init reaches the init and not the program's own main.
var initCalled atomic.Bool

// errNoInit is the refusal when the program would re-execute itself as
// the init without having called Init.
var errNoInit = errors.New("sandbox: this program would re-execute itself as the sandbox's init, but it never called sandbox.Init(): call sandbox.Init() first thing in main, or set Config.Executable to an airlock-init binary (or put airlock-init next to this program)")

// Run starts a sandbox, runs the command in it, waits for it and closes
// the sandbox (copying its writes back): the one lifecycle with a single
// exec. The error is non-nil only on misuse; every outcome of the command,
// including airlock refusing to start it (exit 125), is in the Report.
func (c *Cmd) Run(ctx context.Context) (*Report, error) {
	if ctx == nil {
		panic("sandbox: nil context")
	}
	start := time.Now()
	var rec audit.DenialLog
	sink := audit.Tee{&rec, c.Audit} // for refusals made before a sandbox exists
	refuse := func(code int, err error) (*Report, error) {
		rep := refusal(sink, c.Policy, code, err)
		rep.DurationMS = time.Since(start).Milliseconds()
		setDenials(rep, rec.Take())
		return rep, nil
	}
	if c.Policy == nil {
		return refuse(125, errNoPolicy)
	}
	cfg := c.Config
	if cfg.Pool == nil && (cfg.Isolation == "" || cfg.Isolation == IsolationNamespaces) {
		// Start the init while the plan compiles: a pool of one for this run.
		if p, err := NewPool(PoolConfig{Size: 1, NoRefill: true, Executable: cfg.Executable}); err == nil {
			defer p.Close()
			cfg.Pool = p
		}
	}
	cp, err := cfg.compileRun(c.request(plan.Target{}))
	if err != nil {
		return refuse(planExitCode(err), err)
	}
	be, err := backendFor(cfg, cp.pl)
	if err != nil {
		return refuse(125, err)
	}
	b := beginBox(ctx, cfg, cp, be)
	startFailed := func(err error) (*Report, error) {
		rep := &Report{ExitCode: 125, Error: err.Error(), Denials: []Denial{}}
		b.finishRun(rep, start)
		return rep, nil
	}
	<-b.launched
	if b.ctl == nil {
		return startFailed(b.waitReady())
	}
	// The exec is sent before the sandbox is ready (b.pl, not cp.pl: the
	// namespaces backend may have fallen back to landlock's): the init reads
	// it once every restriction is in place, which saves the round trip
	// of "ready". The init never acts on it before then, and if the
	// set-up fails it never reads it.
	x := execSpec{argv: b.pl.Argv, env: b.pl.Env, cwd: b.pl.Cwd, stdin: c.Stdin, stdout: c.Stdout, stderr: c.Stderr, pty: c.PTY, whole: true}
	p, rep := b.sendExec(x)
	if err := b.waitReady(); err != nil {
		if p != nil {
			p.abandon()
		}
		return startFailed(err)
	}
	if rep == nil {
		rep = b.awaitExec(ctx, x, p)
	}
	b.close()
	b.finishRun(rep, start)
	return rep, nil
}

// finishRun folds what the sandbox as a whole learned into the report of
// its only exec, once it is torn down: the whole tree's CPU and peak memory
// (the cgroup's), what was written back, a halt the kernel's counters
// decided late, and every denial.
func (b *box) finishRun(rep *Report, start time.Time) {
	<-b.done
	f := b.finalState()
	rep.Enforcement = b.enf
	rep.Writes = f.writes
	rep.Usage.WriteBytes = f.usage.WriteBytes
	if f.usage.CPUMS > rep.Usage.CPUMS {
		rep.Usage.CPUMS = f.usage.CPUMS // the cgroup counts background processes too
	}
	if f.usage.MaxMemoryBytes > 0 {
		rep.Usage.MaxMemoryBytes = f.usage.MaxMemoryBytes
	}
	rep.Usage.Ops, _ = b.meter.Usage()
	if h := b.meter.HaltedBy(); h != "" && rep.HaltedBy == nil {
		haltReport(rep, b.sink, b.cfg.Policy, h, b.haltMessage(), "")
	}
	rep.DurationMS = time.Since(start).Milliseconds()
	setDenials(rep, b.rec.Take())
	setEgressErrors(rep, b.egr.Take())
}

// haltReport marks rep as halted by h (exit 124) and records the halt with
// the suggestion that would have allowed more — or, when hint is set, with
// that hint instead (the caller's own limit ended it, not the policy).
func haltReport(rep *Report, sink audit.Sink, p *policy.Policy, h budget.Limit, msg, hint string) {
	s := string(h)
	rep.HaltedBy = &s
	rep.ExitCode = 124
	rep.Signal = nil
	ev := audit.Event{Time: time.Now(), Kind: audit.Halt, Layer: audit.LayerBudget, Rule: s, Message: msg, Hint: hint}
	switch {
	case h == budget.Interrupted:
		rep.Error = msg // the caller stopped it: there is no budget to raise
	case hint == "":
		ev.Suggestion = p.SuggestBudget(h).String()
	}
	sink.Emit(ev)
	addSuggestion(rep, ev)
}

// backendFor picks the backend of cfg.Isolation for pl: for the
// namespaces isolation, a warm init of cfg.Pool when one is ready.
func backendFor(cfg Config, pl *plan.Plan) (backend, error) {
	switch cfg.Isolation {
	case "", IsolationNamespaces:
		if cfg.Pool != nil {
			if w := cfg.Pool.st.take(cfg, pl); w != nil {
				return pooledBackend{w: w, st: &cfg.Pool.st}, nil
			}
		}
		return nsBackend{}, nil
	case IsolationOCI:
		return ociBackend{runtime: cfg.Runtime}, nil
	case IsolationLandlock:
		return unsharedBackend{}, nil
	case IsolationGVisor:
		if cfg.Runtime != "" && cfg.Runtime != "runsc" {
			return nil, fmt.Errorf("sandbox: isolation %q runs under runsc, not %q: drop the runtime, or use isolation %q with it", IsolationGVisor, cfg.Runtime, IsolationOCI)
		}
		return ociBackend{runtime: "runsc"}, nil
	case IsolationMicroVM:
		return microvmBackend{}, nil
	}
	return nil, fmt.Errorf("sandbox: isolation %q: use %q, %q, %q, %q or %q", cfg.Isolation, IsolationNamespaces, IsolationLandlock, IsolationGVisor, IsolationOCI, IsolationMicroVM)
}

func planExitCode(err error) int {
	var de *policy.DenyError
	if errors.As(err, &de) || errors.Is(err, ErrNotFound) {
		return 127
	}
	return 125
}

// pickHostID picks the unprivileged host uid/gid a sandbox runs as when
// the supervisor is root, by the rule m (plan.IDMap: random per sandbox,
// far above ordinary accounts, so two sandboxes never share an identity
// with each other or with a host user).
func pickHostID(m plan.IDMap) int {
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand does not fail on Linux
	return int(m.Pick(binary.LittleEndian.Uint32(b[:])))
}
