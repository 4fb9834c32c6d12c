package sandbox

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/internal/enforce/mount"
	"github.com/airlock-sandbox/airlock/internal/enforce/nsinit"
	"github.com/airlock-sandbox/airlock/internal/plan"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
)

// Init hands control to the sandbox's init when this process is the
// re-executed child; otherwise it returns at once. Call it first in main.
func Init() {
	if len(os.Args) > 0 && os.Args[0] == nsinit.Arg0 {
		nsinit.Main()
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
	rec    audit.Recorder
	sink   audit.Sink
	log    *slog.Logger
	start  time.Time
	report *Report

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
	r.exec(ctx, pl)
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
		r.sink.Emit(audit.Event{Time: time.Now(), Kind: audit.Deny, Layer: audit.LayerExec, Op: de.Op, Target: de.Subject, Rule: de.Cap.String(), Message: de.Error(), Suggestion: de.Suggestion()})
	}
	r.finish()
	return r.report
}

func (r *run) finish() {
	r.report.DurationMS = time.Since(r.start).Milliseconds()
	for _, e := range r.rec.Denials() {
		r.report.Denials = append(r.report.Denials, denialFromEvent(e))
	}
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

	planR, planW, err := os.Pipe()
	if err != nil {
		r.fail(fmt.Errorf("plan pipe: %w", err))
		return
	}
	defer planR.Close()
	defer planW.Close()
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		r.fail(fmt.Errorf("control socket: %w", err))
		return
	}
	ctl := pair[0]
	child := os.NewFile(uintptr(pair[1]), "control")
	defer unix.Close(ctl)
	defer child.Close()

	lim, err := newLimits(r.c.Policy, r.sink)
	if err != nil {
		r.fail(err)
		return
	}
	r.report.Enforcement.Downgrades = lim.downgrades
	if lim.group != nil {
		r.report.Enforcement.Cgroup = lim.host.Version
	}

	exe := r.c.Executable
	if exe == "" {
		exe = "/proc/self/exe"
	}
	root := os.Geteuid() == 0
	id := os.Getuid()
	gid := os.Getgid()
	if root {
		id = hostID()
		gid = id
	}
	stdout := &capture{r: r, tee: r.c.Stdout, halted: make(chan struct{}, 1)}
	stderr := &capture{r: r, tee: r.c.Stderr, halted: make(chan struct{}, 1)}
	cmd := &exec.Cmd{
		Path:       exe,
		Args:       []string{nsinit.Arg0},
		Env:        []string{},
		Stdin:      r.c.Stdin,
		Stdout:     stdout,
		Stderr:     stderr,
		ExtraFiles: []*os.File{planR, child},
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags:                 cloneFlags,
			UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: id, Size: 1}},
			GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: gid, Size: 1}},
			GidMappingsEnableSetgroups: root,
			Credential:                 &syscall.Credential{Uid: 0, Gid: 0, Groups: []uint32{}, NoSetGroups: !root},
			Pdeathsig:                  unix.SIGKILL,
			Setsid:                     true,
		},
		WaitDelay: time.Second,
	}
	if lim.group != nil {
		if fd, ok := lim.group.UnifiedFD(); ok {
			// CLONE_INTO_CGROUP: the init is in the group from its first instruction.
			cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, fd
		}
	}
	if err := cmd.Start(); err != nil {
		lim.finish(r)
		r.fail(fmt.Errorf("start sandbox init: %w (are user namespaces enabled? see airlock doctor)", err))
		return
	}
	child.Close()
	planR.Close()
	var killOnce sync.Once
	kill := func() {
		killOnce.Do(func() {
			_ = cmd.Process.Kill() // pid 1 of the namespace: the kernel kills every process in it
		})
	}
	defer kill()
	stopWatch := make(chan struct{})
	var stopOnce sync.Once
	var watching sync.WaitGroup
	stop := func() {
		stopOnce.Do(func() { close(stopWatch) })
		watching.Wait() // the watcher must not read the group while it is destroyed
	}
	defer func() {
		stop()
		kill()
		_ = cmd.Wait() // reaps the init if an early return left it running
		lim.finish(r)
	}()
	if lim.group != nil {
		// The init waits for "go" before it forks anything, so adding it to
		// the v1 hierarchies now leaves no window.
		if err := lim.group.Add(cmd.Process.Pid); err != nil {
			r.fail(fmt.Errorf("cgroup: %w", err))
			return
		}
		watching.Add(1)
		go func() {
			defer watching.Done()
			lim.watch(r, stopWatch, kill)
		}()
	}

	if err := json.NewEncoder(planW).Encode(pl); err != nil {
		r.fail(fmt.Errorf("send plan: %w", err))
		return
	}
	planW.Close()

	var idmapFDs []int
	if root {
		idmapFDs, err = idmapGrants(cmd.Process.Pid, pl)
		if err != nil {
			r.fail(err)
			return
		}
	}
	err = nsinit.Send(ctl, nsinit.Message{Type: "go", IDMaps: len(idmapFDs)}, idmapFDs...)
	for _, fd := range idmapFDs {
		unix.Close(fd)
	}
	if err != nil {
		r.fail(fmt.Errorf("start sandbox: %w", err))
		return
	}

	var proxy *egress.Proxy
	msgs := make(chan nsinit.Message, 8)
	go r.readControl(ctl, msgs, &proxy)

	deadline := r.meter.Deadline()
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	waitErr := make(chan error, 1)
	go func() { waitErr <- cmd.Wait() }()

	var exitMsg *nsinit.Message
	var stageErr *nsinit.Message
	live := (<-chan nsinit.Message)(msgs)
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
				r.report.Enforcement.Landlock = m.Landlock
				r.report.Enforcement.Namespaces = true
				r.report.Enforcement.Seccomp = true
			}
			continue
		case <-timer.C:
			r.halt(budget.MaxWall, "the run passed max_wall and was killed with everything it started")
			kill()
			continue
		case <-ctx.Done():
			r.halt("", "the caller cancelled the run")
			kill()
			continue
		case <-stdout.halted:
			kill()
			continue
		case <-stderr.halted:
			kill()
			continue
		case err := <-waitErr:
			_ = err // the status is read from ProcessState and the control messages
		}
		break
	}
	// Drain control messages that raced with the exit: readControl closes
	// msgs when the init's end of the socket is gone.
	for m := range msgs {
		switch m.Type {
		case "exit":
			exitMsg = &m
		case "error":
			stageErr = &m
		}
	}
	if proxy != nil {
		_ = proxy.Close() // tunnels end with the sandbox
	}
	r.report.Stdout, r.report.StdoutTruncated = stdout.result()
	r.report.Stderr, r.report.StderrTruncated = stderr.result()
	r.report.Usage.CPUMS = (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Milliseconds()

	stop()
	lim.finish(r)
	// Without a cgroup (an accepted downgrade) RLIMIT_CPU still holds; the
	// init's rusage includes every process it reaped.
	if maxCPU := r.c.Policy.Budget().CPU; r.report.Usage.CPUMS >= maxCPU.Milliseconds() ||
		(exitMsg != nil && exitMsg.Signal == int(unix.SIGXCPU)) {
		r.halt(budget.MaxCPU, "the process tree used max_cpu of CPU time")
	}
	if h := r.meter.HaltedBy(); h != "" {
		s := string(h)
		r.report.HaltedBy = &s
		r.report.ExitCode = 124
		r.sink.Emit(audit.Event{Time: time.Now(), Kind: audit.Halt, Layer: audit.LayerBudget, Rule: s, Message: r.haltMessage(), Suggestion: "raise " + s + " in the policy's budget if the work needs more"})
		return
	}
	switch {
	case stageErr != nil:
		r.report.ExitCode = 125
		r.report.Error = "sandbox setup failed at " + stageErr.Stage + ": " + stageErr.Error + " (nothing was started)"
	case exitMsg != nil:
		r.report.ExitCode = exitMsg.Code
		if exitMsg.Signal != 0 {
			s := exitMsg.Signal
			r.report.Signal = &s
		}
		if exitMsg.Error != "" {
			r.report.Error = exitMsg.Error
			r.sink.Emit(audit.Event{Time: time.Now(), Kind: audit.Deny, Layer: audit.LayerExec, Op: "exec", Target: pl.Argv[0], Rule: policy.AllowedTools.String(), Message: exitMsg.Error})
		}
	default:
		r.report.ExitCode = 125
		r.report.Error = "sandbox init died without reporting: " + cmd.ProcessState.String()
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

func (r *run) haltMessage() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.haltMsg
}

func (r *run) fail(err error) {
	r.report.ExitCode = 125
	r.report.Error = err.Error()
}

// idmapGrants clones every grant with an idmapping through the child's user
// namespace, so files the sandbox writes belong to the caller on disk.
func idmapGrants(pid int, pl *plan.Plan) ([]int, error) {
	ns, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/ns/user", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open sandbox user namespace: %w", err)
	}
	defer unix.Close(ns)
	var fds []int
	for _, m := range pl.Mounts {
		if m.Kind != plan.KindBind || !m.IDMap {
			continue
		}
		fd, err := mount.Clone(m, ns)
		if err != nil {
			for _, f := range fds {
				unix.Close(f)
			}
			return nil, err
		}
		fds = append(fds, fd)
	}
	return fds, nil
}

// readControl forwards the init's messages and serves the proxy listeners.
func (r *run) readControl(ctl int, out chan<- nsinit.Message, proxy **egress.Proxy) {
	defer close(out)
	for {
		m, fds, err := nsinit.Recv(ctl)
		if err != nil {
			return
		}
		if m.Type == "listeners" {
			r.serveProxy(fds, proxy)
			continue
		}
		for _, fd := range fds {
			unix.Close(fd)
		}
		out <- m
	}
}

func (r *run) serveProxy(fds []int, proxy **egress.Proxy) {
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	if len(fds) != 2 {
		r.log.Error("egress: expected 2 listener fds", "got", len(fds))
		return
	}
	p, err := egress.New(egress.Config{Policy: r.c.Policy, Meter: r.meter, Audit: r.sink, Resolver: r.c.Resolver, Dialer: r.c.Dialer, Logger: r.log})
	if err != nil {
		r.log.Error("egress", "err", err)
		return
	}
	*proxy = p
	for i, serve := range []func(net.Listener) error{p.ServeHTTPProxy, p.ServeSOCKS5} {
		f := os.NewFile(uintptr(fds[i]), "egress")
		l, err := net.FileListener(f)
		f.Close()
		if err != nil {
			r.log.Error("egress listener", "err", err)
			continue
		}
		go func() { _ = serve(l) }() // returns when Close closes the listener
	}
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
