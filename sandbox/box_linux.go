package sandbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/guard"
	"github.com/airlock-sandbox/airlock/internal/enforce/nsinit"
	"github.com/airlock-sandbox/airlock/plan"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
)

// One sandbox lifecycle (like runsc's Create, Start and Wait): a box is one
// live sandbox, started by a backend, that runs execs until it is closed.
// Cmd.Run is start, exec once, close; a Session is start, exec many times,
// close. The box holds what lives as long as the sandbox — its budget
// (max_ops, max_wall), the denial log, the cgroup, the egress proxy, the
// staged writes, the filesystem-denial collector — and the one loop that
// ends it: at its deadline, when its caller's context ends, when a budget
// the kernel or the proxy counts is blown, or when Close is called.
//
// Each backend starts a control process that speaks the control protocol
// (internal/enforce/nsinit, proto.go) on a socket: airlock's own init, or
// the OCI launcher that drives runc or crun. Everything else is the box's.

// backend starts sandboxes of one kind of isolation. What a new backend
// (no user namespace, gVisor, a microVM) implements is launch, and a control
// process that speaks the protocol:
//
//   - launch changes no plan: b.pl is the plan compiled for the backend
//     (plan.Target, targetOf), to apply whole, and b.handOver marks where
//     it goes to the control process (the namespaces backend's fallback
//     to landlock compiles that backend's plan afresh). It opens
//     what the box tears down (b.stage for staged writes, b.lim for the
//     cgroup or the downgrades the plan accepts) and fills b.enf with what
//     it enforces, so that the report says exactly that.
//   - The control process sends "listeners" when the plan has a proxy (the
//     box serves the egress proxy on them), "mounts" with the grant roots
//     as the sandbox sees them (the file API resolves beneath them), then
//     "ready", or "error" and exit 125 without starting anything.
//   - It runs each "exec" with the three fds it carries, answers "started"
//     with a pid it can "kill" (its process group) and "exit" with the
//     status and the rusage of that command alone; execs run concurrently.
//   - Everything in the sandbox dies when the control process dies or its
//     socket closes: the box's teardown is killing it and waiting.
type backend interface {
	// launch starts the control process for b.pl and returns it before it
	// is ready: the box reads its control socket, and the sandbox is ready
	// when it sends "ready" (or failed when it sends "error" or exits).
	//
	// Preconditions:
	//   - runs on the box's locked supervise thread (Pdeathsig is tied to it)
	launch(b *box) (*control, error)
}

// box is one live sandbox.
type box struct {
	id   string // the run's or session's id, on every audit event
	cfg  Config
	view *policy.Policy // cfg.Policy as the sandbox sees it: placed grants at their places
	// pl is the plan compiled for the backend, applied as it is; req is
	// the request it was compiled from (the namespaces backend compiles
	// it again for its fallback, the landlock backend).
	pl    *plan.Plan
	req   plan.Request
	meter *budget.Meter // the sandbox's own: max_ops, and max_wall from its start
	rec   audit.DenialLog
	egr   audit.EgressErrorLog // the proxy's failures to reach granted destinations
	sink  audit.Sink
	log   *slog.Logger
	start time.Time

	enf   Enforcement
	fs    *fsDenials // nil when filesystem denials are not collected
	lim   *limits
	stage *staging
	proxy atomic.Pointer[egress.Proxy]
	// creds and ca are the policy's credentials with their values and
	// the run's CA (compileRun), whose certificate the plan's trust bundle
	// holds; nil without credentials.
	creds []egress.Credential
	ca    *egress.CA
	// transparent is set once the tunnel listener and DNS are served.
	transparent atomic.Pointer[transparent]
	ctl         *control // set once launched

	halted firstHalt

	// sandboxID is the host uid and gid the sandbox runs as when the
	// supervisor is root; 0 rootless (it runs as the caller).
	// sandboxGID, when set, is its gid where it differs (the landlock
	// backend runs as the fs_write grants' owner and group).
	sandboxID, sandboxGID int

	ready    chan error // receives once (signalReady): nil when ready, or why not
	readyFn  func()     // set by a backend's launch (onReady): runs once, when ready or failed
	readyOne sync.Once
	launched chan struct{} // closed once the backend's launch returned (ctl is set when it succeeded)
	extended chan struct{} // a session's end moved (Extend): the deadline timer is reset
	routed   chan struct{} // closed when the control process's messages are all delivered
	done     chan struct{} // closed when everything is torn down
	closeCh  chan struct{} // closed by close
	once     sync.Once

	mu      sync.Mutex
	guard   *guard.Guard                   // guarded by mu: a session's file API, closed first at teardown
	pending map[string]chan nsinit.Message // guarded by mu: exec ID -> its messages
	closed  bool                           // guarded by mu: no new exec
	final   final                          // guarded by mu: set by teardown
	execs   int                            // guarded by mu
}

// final is what the teardown learned once every process was dead.
type final struct {
	usage  Usage   // the cgroup's CPU and peak memory, the stage's bytes
	writes *Writes // the copy back
}

// startBox starts a sandbox for c with the given backend and returns once
// it is ready to exec, or the reason it is not (the error). It ends when
// close is called, at its deadline, or when ctx ends.
func startBox(ctx context.Context, cfg Config, c compiled, be backend) (*box, error) {
	b := beginBox(ctx, cfg, c, be)
	return b, b.waitReady()
}

// handOver is where a backend hands b.pl to its control process (or, for
// the OCI runtimes, turns it into the bundle): the plan goes as it was
// compiled for the backend.
func (b *box) handOver() {
	if f := b.cfg.handedOver; f != nil {
		f(b.pl)
	}
}

// onReady makes fn run once the sandbox is ready or has failed to be.
//
// Preconditions:
//   - called by the backend's launch, before it returns
func (b *box) onReady(fn func()) { b.readyFn = fn }

// signalReady runs the readiness hook and sends the outcome of the start;
// only the first outcome counts.
func (b *box) signalReady(err error) {
	b.readyOne.Do(func() {
		if b.readyFn != nil {
			b.readyFn()
		}
		b.ready <- err // buffered: never blocks
	})
}

// waitReady waits until the sandbox is ready to exec, or returns why it
// never will be once it is torn down. Call it once.
func (b *box) waitReady() error {
	if err := <-b.ready; err != nil {
		<-b.done
		return err
	}
	<-b.launched // b.ctl is set: "ready" may come before launch returns
	return nil
}

// beginBox starts a sandbox for c with the given backend and returns at
// once; launched closes when the control process is started, and
// waitReady says when it is ready.
func beginBox(ctx context.Context, cfg Config, c compiled, be backend) *box {
	pl := c.pl
	b := &box{cfg: cfg, pl: pl, req: c.req, creds: c.creds, ca: c.ca, start: time.Now(), ready: make(chan error, 1), launched: make(chan struct{}), extended: make(chan struct{}, 1), routed: make(chan struct{}), done: make(chan struct{}), closeCh: make(chan struct{}),
		pending: map[string]chan nsinit.Message{}, view: cfg.Policy.View()}
	b.id = newID()
	b.log = cfg.Logger
	if b.log == nil {
		b.log = slog.New(slog.DiscardHandler)
	}
	b.log = b.log.With("run", b.id) // the id of the audit events and the report
	b.sink = runSink{run: b.id, next: audit.Tee{&b.rec, &b.egr, cfg.Audit}}
	if pl.Session {
		// A session lives for its lifetime; max_wall bounds each exec.
		lifetime, _ := cfg.sessionLifetimes()
		b.meter = budget.NewSessionMeter(pl.Limits.Budget(), lifetime, cfg.Clock)
	} else {
		b.meter = budget.NewMeter(pl.Limits.Budget(), cfg.Clock)
	}
	b.fs = startFSAudit(b)
	if pb, ok := be.(pooledBackend); ok {
		pb.w.run <- func() { b.supervise(ctx, be) } // on the warm init's own thread
	} else {
		go b.supervise(ctx, be)
	}
	return b
}

// supervise launches the sandbox and ends it. It runs on a thread of its
// own for the sandbox's whole life: the control process's Pdeathsig is
// tied to the thread that started it.
func (b *box) supervise(ctx context.Context, be backend) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer close(b.done)
	ctl, err := be.launch(b)
	if err != nil {
		b.fs.close()
		close(b.routed)
		close(b.launched)
		b.signalReady(err)
		return
	}
	b.mu.Lock()
	b.ctl = ctl
	b.mu.Unlock()
	close(b.launched)
	timer := time.NewTimer(time.Until(b.meter.Deadline()))
	defer timer.Stop()
wait:
	for {
		select {
		case <-b.extended:
			timer.Reset(time.Until(b.meter.Deadline()))
			continue
		case <-timer.C:
			if b.pl.Session {
				b.halt(budget.SessionLifetime, "the session reached the end of its lifetime and was ended with everything running in it: extend a session before its deadline (Session.Extend, POST /v1/sessions/{id}/extend, the MCP tool extend_session)")
			} else {
				b.halt(budget.MaxWall, "the sandbox passed max_wall and was ended with everything running in it")
			}
		case <-b.meter.Done(): // a charge the sandbox provoked blew the budget (max_ops)
			b.halt("", haltReason(b.meter.HaltedBy()))
		case <-ctx.Done():
			b.halt(budget.Interrupted, "the caller stopped the sandbox ("+context.Cause(ctx).Error()+"): everything running in it was killed")
		case <-ctl.exited:
		case <-b.closeCh:
			if b.pl.Session {
				b.halt(budget.SessionClosed, "the session was closed (Session.Close; over the API: DELETE or the server's shutdown) during the exec, which was killed with everything in the session")
			}
		}
		break wait
	}
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.teardown()
}

// deliver takes one message of ctl, the box's control process, that is
// not a start-up hand-over: "ready" and "error" to the box, the others to
// the exec they name. It runs on the goroutine that reads the control
// socket (readControl), so a message reaches its reader in one hand-off.
func (b *box) deliver(ctl *control, m nsinit.Message) {
	switch m.Type {
	case nsinit.MsgReady:
		b.enf.Landlock = m.Landlock
		// Under gVisor the workload's syscalls reach the sentry, not a
		// filter of airlock's (oci_linux.go).
		b.enf.Namespaces, b.enf.Seccomp = !b.pl.NoNamespaces, !strings.HasPrefix(b.enf.Platform, "gvisor/")
		if m.Landlock == 0 && b.enf.Backend == "namespaces" {
			b.downgraded(policy.DowngradeLandlock) // the init refuses this unless the plan accepts it
		}
		if m.ProcShared {
			b.downgraded(policy.DowngradeProc)
		}
		if m.HostnameKept {
			b.enf.Weaker = append(b.enf.Weaker, weakerHostname)
		}
		b.signalReady(nil)
	case nsinit.MsgError:
		b.signalReady(fmt.Errorf("sandbox setup failed at %s: %s (nothing was started)", m.Stage, m.Error))
		ctl.kill()
	case nsinit.MsgHalt:
		// A microVM's guest: its own cgroup refused a fork or killed for
		// memory (seen while it runs, or at the exit of the exec it
		// ended). The run is halted and the VM ended, everything in it.
		switch budget.Limit(m.Stage) {
		case budget.MaxMemory:
			b.halt(budget.MaxMemory, "a process reached max_memory and was killed by the guest's kernel, and the sandbox was stopped")
			ctl.kill()
		case budget.MaxPids:
			b.halt(budget.MaxPids, "the process tree reached max_pids in the guest: a fork was refused, and the sandbox was stopped")
			ctl.kill()
		default:
			b.log.Error("sandbox: a halt for an unknown limit", "limit", m.Stage)
		}
	default:
		select {
		case b.execChan(m.ID) <- m:
		default:
			b.log.Error("sandbox: dropped control message", "type", m.Type, "id", m.ID)
		}
	}
}

// delivered is the end of ctl's messages: the control process is gone
// and every message it sent is delivered. If it never became ready, it
// says so.
func (b *box) delivered(ctl *control) {
	b.signalReady(errors.New("sandbox init died during setup: " + ctl.why())) // no-op once ready
	close(b.routed)
}

// execChan returns the channel of exec id's messages, made on first use.
func (b *box) execChan(id string) chan nsinit.Message {
	b.mu.Lock()
	defer b.mu.Unlock()
	ch, ok := b.pending[id]
	if !ok {
		ch = make(chan nsinit.Message, 4)
		b.pending[id] = ch
	}
	return ch
}

func (b *box) forget(id string) {
	b.mu.Lock()
	delete(b.pending, id)
	b.mu.Unlock()
}

// kill ends the sandbox at once, with everything running in it.
func (b *box) kill() {
	b.mu.Lock()
	ctl := b.ctl
	b.mu.Unlock()
	if ctl != nil {
		ctl.kill()
	}
}

// close ends the sandbox, copies its staged writes back and waits until
// everything is torn down. It is idempotent.
func (b *box) close() {
	b.once.Do(func() { close(b.closeCh) })
	<-b.done
}

// teardown kills what is left, then, once every process of the sandbox is
// dead, ends the proxy, decides the late halts from the kernel's counters,
// copies the writes back and removes the cgroup.
func (b *box) teardown() {
	b.mu.Lock()
	g := b.guard
	b.mu.Unlock()
	if g != nil {
		_ = g.Close() // file operations in flight end before the writes are copied back
	}
	ctl := b.ctl
	if ctl != nil {
		ctl.stopWatchers()
		ctl.kill()
		<-ctl.exited
		if ctl.onExit != nil {
			defer ctl.onExit() // after the copy back, which reads the stage
		}
	}
	if p := b.proxy.Load(); p != nil {
		_ = p.Close() // tunnels end with the sandbox
	}
	var f final
	if b.stage != nil {
		written, full := b.stage.usage()
		if full {
			b.halt(budget.MaxWrite, "the sandbox wrote max_write bytes to its fs_write grants; the write past it failed (no space left), and it was stopped")
		}
		f.usage.WriteBytes = written
		f.writes = b.stage.writeBack(b)
		b.stage.close()
	}
	if b.lim != nil {
		u := b.lim.finish(b)
		f.usage.CPUMS, f.usage.MaxMemoryBytes = u.CPUMS, u.MaxMemoryBytes
	}
	if ctl != nil {
		ctl.close()
	}
	b.fs.emit(b, true) // late records reach the audit sink
	b.fs.close()
	b.mu.Lock()
	b.final = f
	b.mu.Unlock()
}

// setGuard makes g end with the box, before anything is torn down.
func (b *box) setGuard(g *guard.Guard) {
	b.mu.Lock()
	b.guard = g
	b.mu.Unlock()
}

// halt stops the sandbox's meter because of l (when set) and keeps the
// first explanation.
func (b *box) halt(l budget.Limit, msg string) { b.halted.note(b.meter, l, msg) }

func (b *box) haltMessage() string { return b.halted.message() }

// firstHalt stops a meter and keeps the explanation of the first halt: a
// sandbox's, and an exec's own.
type firstHalt struct {
	mu  sync.Mutex
	msg string // guarded by mu
}

// note halts m because of l (when set) and keeps msg if it is the first.
func (f *firstHalt) note(m *budget.Meter, l budget.Limit, msg string) {
	if l != "" {
		m.Halt(l)
	}
	f.mu.Lock()
	if f.msg == "" {
		f.msg = msg
	}
	f.mu.Unlock()
}

func (f *firstHalt) message() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.msg
}

// finalState returns what the teardown recorded; valid once done is closed.
func (b *box) finalState() final {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.final
}

// haltReason explains a halt that the meter noticed (a refused charge)
// rather than the supervisor.
func haltReason(l budget.Limit) string {
	if l == budget.MaxOps {
		return "the sandbox reached max_ops (each connection to the egress proxy and each request it decides, granted or denied, is one op) and was killed with everything running in it"
	}
	return "the sandbox reached " + string(l) + " and was killed with everything running in it"
}

// weaker says, for each downgrade, what the sandbox then does not stop or
// hide (the report's enforcement.weaker).
var weaker = map[policy.Downgrade]string{
	policy.DowngradeLandlock:     "landlock: no Landlock: files outside the grants are absent (mount namespace), but nothing refuses a path inside the sandbox's root beyond its mount flags, and signals and abstract sockets are not scoped",
	policy.DowngradeMemory:       "max_memory: no memory cgroup: nothing bounds the sandbox's memory but the host's own (an RLIMIT_AS would bind airlock's init too, whose limits the command inherits): a run can take what the host has until its OOM killer acts",
	policy.DowngradePids:         "max_pids: no pids cgroup: RLIMIT_NPROC bounds the processes of the sandbox's user, not exactly its process tree",
	policy.DowngradeCPU:          "max_cpu: no cpu cgroup: RLIMIT_CPU bounds each process's CPU time, not the tree's",
	policy.DowngradeStagedWrites: "staged_writes: fs_write folders are written in place (this backend does not stage them): max_write is not enforced, and the protected paths inside them (git hooks and config, shell rc files, editor and CI configuration) are writable: check them before you use git or a shell there",
	policy.DowngradeProc: "proc: /proc is the container's, read-only: the container's other processes are listed there (under the container's pid numbers, so /proc/self is right but /proc/<getpid()> is not) " +
		"with what ps shows of them and the numbers of their open fds; they cannot be signalled, traced, or have their memory, environment or fds read (pid namespace, Landlock, seccomp)",
}

// weakerHostname is the report's line when the init could not name the
// sandbox's UTS namespace.
const weakerHostname = "hostname: the host refused sethostname (a container's seccomp profile), so the sandbox's own UTS namespace shows the container's hostname"

// weakerPidsRoot is the max_pids line when the sandbox's processes are
// the host's uid 0 (root in a container without a user namespace of its
// own), which the kernel exempts from RLIMIT_NPROC.
const weakerPidsRoot = "max_pids: no pids cgroup, and the sandbox's processes run as the host's uid 0, which RLIMIT_NPROC does not bind: nothing bounds how many processes the sandbox starts but the host's own limits"

// weakerInPlace is the staged_writes line of the backends that write in
// place but keep the existing protected paths read-only (gVisor, the
// microVM), in place of weaker's.
const weakerInPlace = "staged_writes: fs_write folders are written in place (this backend does not stage them): max_write is not enforced, and new protected paths (git hooks, shell rc files, editor and CI configuration) can be created inside them, while the existing ones are read-only: check the new ones before you use git or a shell there"

// downgraded records that the sandbox runs without d.
func (b *box) downgraded(d policy.Downgrade) {
	b.downgradedAs(d, weaker[d])
}

// downgradedAs records that the sandbox runs without d, with line ("" for
// none) as what is weaker.
func (b *box) downgradedAs(d policy.Downgrade, line string) {
	if slices.Contains(b.enf.Downgrades, string(d)) {
		return
	}
	b.enf.Downgrades = append(b.enf.Downgrades, string(d))
	if line != "" {
		b.enf.Weaker = append(b.enf.Weaker, line)
	}
}

// runSink stamps each event with the run's id on its way to next.
type runSink struct {
	run  string
	next audit.Sink
}

func (s runSink) Emit(e audit.Event) {
	if e.Run == "" {
		e.Run = s.run
	}
	s.next.Emit(e)
}
