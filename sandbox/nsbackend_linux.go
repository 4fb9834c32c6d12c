package sandbox

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/internal/enforce/cgroup"
	"github.com/airlock-sandbox/airlock/internal/enforce/mount"
	"github.com/airlock-sandbox/airlock/internal/enforce/namespace"
	"github.com/airlock-sandbox/airlock/internal/enforce/nsinit"
	"github.com/airlock-sandbox/airlock/plan"
	"github.com/airlock-sandbox/airlock/policy"
)

// nsBackend is airlock's own isolation: the re-executed init (nsinit) as
// pid 1 of new user, mount, pid, net, ipc, uts and cgroup namespaces.
type nsBackend struct{}

// launch starts the init for b.pl: staged grants opened, the cgroup made,
// namespaces, the plan, idmapped grants and the "go" message. On error
// nothing is left running.
func (nsBackend) launch(b *box) (*control, error) {
	if err := checkInit(b.cfg.Executable); err != nil {
		return nil, err
	}
	cloneFlags, err := namespace.CloneFlags(b.pl.Namespaces)
	if err != nil {
		return nil, err
	}
	if err := b.openStageAndLimits("namespaces", func() (*limits, error) { return newLimits(b.pl.Limits, b.sink) }); err != nil {
		return nil, err
	}
	in, err := startInit(b.cfg.Executable, cloneFlags, b.lim.group, false)
	if err != nil {
		b.lim.finish(b)
		b.stage.close()
		// What the failed start recorded goes; how filesystem denials are
		// reported (set before the backend) stays.
		b.stage, b.lim, b.enf = nil, nil, Enforcement{FSDenials: b.enf.FSDenials}
		if why, ok := usernsRefused(err); ok {
			if b.cfg.Policy.AcceptsDowngrade(policy.DowngradeNamespaces) {
				// The landlock backend's plan, compiled afresh from the
				// box's request: a plan is never changed once compiled.
				c, err := b.cfg.compileLandlock(b.req)
				if err != nil {
					return nil, err
				}
				b.pl, b.req, b.creds, b.ca = c.pl, c.req, c.creds, c.ca
				return unsharedBackend{why: why}.launch(b)
			}
			return nil, fmt.Errorf("%s: nothing was started; to run without namespaces (Landlock and seccomp only: what is weaker is in airlock doctor and the report), add namespaces to allow_downgrade, or run where user namespaces can be created", why)
		}
		return nil, err
	}
	return b.adopt(in)
}

// adopt hands the started init over to b (initProc.handOver); on error it
// also releases what openStageAndLimits opened.
func (b *box) adopt(in *initProc) (*control, error) {
	ctl, err := in.handOver(b)
	if err != nil {
		b.lim.finish(b)
		b.stage.close()
		return nil, err
	}
	return ctl, nil
}

// usernsRefused reports whether err is the kernel refusing the init's new
// user namespace, and why in words.
func usernsRefused(err error) (string, bool) {
	switch {
	case errors.Is(err, unix.ENOSPC):
		return "user namespaces cannot be created here (ENOSPC: user.max_user_namespaces is 0 or exhausted)", true
	case errors.Is(err, unix.EPERM):
		return "user namespaces cannot be created here (EPERM: a seccomp profile or a security module refuses them, as Docker's and podman's default profiles do without CAP_SYS_ADMIN)", true
	case errors.Is(err, unix.EINVAL):
		return "user namespaces cannot be created here (EINVAL: the kernel was built without them)", true
	}
	return "", false
}

// copyPlan returns a deep copy of pl, so that a change leaves the
// caller's plan alone.
func copyPlan(pl *plan.Plan) (*plan.Plan, error) {
	raw, err := pl.MarshalBinary()
	if err != nil {
		return nil, fmt.Errorf("copy plan: %w", err)
	}
	var cp plan.Plan
	if err := cp.UnmarshalBinary(raw); err != nil {
		return nil, fmt.Errorf("copy plan: %w", err)
	}
	return &cp, nil
}

// openStageAndLimits opens what airlock's own init shares with the box
// for b.pl, whatever namespaces it gets: the staged grants' host side and
// the cgroup, or the downgrades accepted in its place (newLim makes them),
// and records the backend's name, what the limits give up and how egress
// leaves. On error nothing is left open.
func (b *box) openStageAndLimits(backend string, newLim func() (*limits, error)) error {
	var err error
	if b.stage, err = openStaging(b.pl); err != nil {
		return err
	}
	b.lim, err = newLim()
	if backend == "namespaces" {
		err = b.preflight(err)
	}
	if err != nil {
		if b.lim != nil {
			b.lim.finish(b)
			b.lim = nil
		}
		b.stage.close()
		return err
	}
	if rl := downgradeRlimits(b.pl.Limits, b.lim.downgrades); len(rl) > 0 {
		// The one change to a compiled plan besides the landlock backend's
		// uid: without a pids cgroup, which only the launch can find,
		// RLIMIT_NPROC stands in for max_pids (TestPlanHandedOverIsCompiled
		// expects it).
		pl, err := copyPlan(b.pl) // b.pl may be shared with other runs
		if err != nil {
			b.lim.finish(b)
			b.lim = nil
			b.stage.close()
			return err
		}
		pl.Rlimits = append(pl.Rlimits, rl...)
		b.pl = pl
	}
	b.enf.Backend = backend
	b.noteEnvironment()
	for _, d := range b.lim.downgrades {
		if d == string(policy.DowngradePids) && backend == "namespaces" && !namespace.HostAdmin() && hostRoot(os.Geteuid(), "/proc/self/uid_map") {
			// The unprivileged path maps the sandbox onto the caller, here
			// the host's root, whom fork(2) does not hold to RLIMIT_NPROC.
			b.downgradedAs(policy.DowngradePids, weakerPidsRoot)
			continue
		}
		b.downgraded(policy.Downgrade(d))
	}
	if b.lim.group != nil {
		b.enf.Cgroup = b.lim.host.Version
	}
	if b.pl.Transparent {
		b.enf.Egress = EgressTransparent
	} else if b.pl.Proxy {
		b.enf.Egress = EgressProxy
	}
	return nil
}

// initProc is an init started in its namespaces, and in its cgroup when
// there is one, that waits for its plan: the cold path hands it one at
// once (nsBackend.launch), a Pool keeps it until a sandbox claims it. It
// has run nothing of any sandbox's: it holds new namespaces (and a copy
// of the host's mount table, which it replaces with the plan's root) and
// reads the plan before anything else.
type initProc struct {
	ctl   *control
	planW *os.File
	// flags are the namespaces it was cloned into; 0 for the backend
	// without namespaces.
	flags uintptr
	// root says the supervisor is the host's root: it clones every bind
	// source for the init, and hostID is the host uid and gid that 0
	// inside maps to (picked at random per init: plan.IDMap).
	root   bool
	hostID int
	// group is the cgroup a Pool made for it (nil on the cold path, where
	// the box's limits made it, and where the host has none: groupErr).
	group    *cgroup.Group
	groupErr error
	host     cgroup.Host
	started  time.Time
	// cloned holds bind sources a Pool cloned for it while it waited
	// (root only, see precloneBinds), by the exact plan step each was
	// cloned for. handOverPlan takes a clone only for an identical step,
	// clones the other steps then, and closes what it did not take.
	cloned map[plan.Mount][]int
	// premountArg says the init was started with nsinit.PremountArg and
	// waits for a "premount" message first; premounted is what it mounted
	// then (root only, see premount).
	premountArg bool
	premounted  premountSet
}

// startInit starts the init process in new namespaces (cloneFlags), in g
// when g is not nil, executing exe (Config.Executable: "" finds it), and
// returns it waiting for its plan. With cloneFlags 0 it starts the init
// without namespaces (unsharedBackend), as the caller: no id maps, and
// SIGTERM, not SIGKILL, as its death signal and the supervisor's kill,
// since the init must live long enough to kill its tree.
//
// Preconditions:
//   - runs on the locked thread that will supervise the sandbox: the
//     init's death signal is tied to it
func startInit(exe string, cloneFlags uintptr, g *cgroup.Group, premount bool) (*initProc, error) {
	planR, planW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("plan pipe: %w", err)
	}
	defer planR.Close()
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		planW.Close()
		return nil, fmt.Errorf("control socket: %w", err)
	}
	child := os.NewFile(uintptr(pair[1]), "control")
	defer child.Close()

	path := "/proc/self/exe"
	extra := []*os.File{planR, child}
	initFile, err := openInit(exe)
	if err != nil {
		unix.Close(pair[0])
		planW.Close()
		return nil, fmt.Errorf("sandbox init binary: %w", err)
	}
	if initFile != nil {
		defer initFile.Close()
		// Executed through its fd (the third extra file is fd 5 in the child).
		extra = append(extra, initFile)
		path = "/proc/self/fd/5"
	}
	in := &initProc{planW: planW, flags: cloneFlags, started: time.Now()}
	unshared := cloneFlags == 0
	in.root = namespace.HostAdmin() && !unshared // not euid 0: root in a container lacks what the privileged path needs
	attr := &syscall.SysProcAttr{Pdeathsig: unix.SIGTERM, Setsid: true}
	if !unshared {
		id, gid := os.Getuid(), os.Getgid()
		if in.root {
			in.hostID = pickHostID(plan.DefaultIDMap())
			id, gid = in.hostID, in.hostID
		}
		attr = &syscall.SysProcAttr{
			Cloneflags:                 cloneFlags,
			UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: id, Size: 1}},
			GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: gid, Size: 1}},
			GidMappingsEnableSetgroups: in.root,
			Credential:                 &syscall.Credential{Uid: 0, Gid: 0, Groups: []uint32{}, NoSetGroups: !in.root},
			Pdeathsig:                  unix.SIGKILL,
			Setsid:                     true,
		}
	}
	args := []string{nsinit.Arg0}
	if cloneFlags&unix.CLONE_NEWNET != 0 {
		args = append(args, nsinit.NewNetArg) // lo comes up before the plan
	}
	if premount && in.root {
		args = append(args, nsinit.PremountArg) // a "premount" message comes first
		in.premountArg = true
	}
	cmd := &exec.Cmd{Path: path, Args: args, Env: []string{}, ExtraFiles: extra, SysProcAttr: attr, WaitDelay: time.Second}
	ctl := newControl(cmd, pair[0])
	ctl.graceful = unshared
	// The init's own output (a Go runtime panic, say); commands get pipes of their own.
	cmd.Stdout, cmd.Stderr = ctl.stderr, ctl.stderr
	start := cmd.Start
	if g != nil {
		// The init is in the group from its first instruction, in every
		// hierarchy; nothing is moved into it later.
		start = func() error { return g.Start(cmd) }
	}
	if err := start(); err != nil {
		if cmd.Process != nil {
			// Started, but the supervisor's thread could not leave the group.
			_ = cmd.Process.Kill() // the init waits for the plan: it ran nothing
			_ = cmd.Wait()         // reaped; its status says nothing more
		}
		ctl.close()
		planW.Close()
		if unshared {
			return nil, fmt.Errorf("start sandbox init: %w", err)
		}
		return nil, fmt.Errorf("start sandbox init: %w (are user namespaces enabled? see airlock doctor)", err)
	}
	in.ctl = ctl
	go func() {
		_ = cmd.Wait() // the status is read from ProcessState and the control messages
		close(ctl.exited)
	}()
	return in, nil
}

// handOver gives the init to b: it records who root inside is, watches
// the cgroup, sends the plan and the idmapped grants, lets the init go
// and routes its messages to b. On error the init is killed and reaped;
// b's stage and limits are the caller's.
func (in *initProc) handOver(b *box) (*control, error) {
	ctl := in.ctl
	if err := in.handOverPlan(b); err != nil {
		ctl.stopWatchers()
		ctl.kill()
		<-ctl.exited
		ctl.close()
		// Ended by something else than this kill: the init died first, and
		// that is why the hand-over failed (a broken pipe says no more).
		// (The init without namespaces ends itself on the kill's SIGTERM:
		// there the error stays as it is.)
		ws, _ := ctl.cmd.ProcessState.Sys().(syscall.WaitStatus)
		if !ctl.graceful && (!ws.Signaled() || ws.Signal() != unix.SIGKILL) {
			return nil, fmt.Errorf("sandbox init died during setup: %s (%v)", ctl.why(), err)
		}
		return nil, err
	}
	go readControl(b, ctl)
	return ctl, nil
}

func (in *initProc) handOverPlan(b *box) error {
	defer in.planW.Close()
	defer in.dropClones()
	if in.root {
		m := b.pl.IDMap
		if uint32(in.hostID) < m.RootFirst || uint32(in.hostID)-m.RootFirst >= m.RootCount {
			return fmt.Errorf("airlock bug: the init maps root inside to host id %d, outside the plan's range %d+%d", in.hostID, m.RootFirst, m.RootCount)
		}
		b.sandboxID = in.hostID // the init's id maps say it; the plan, compiled before, does not
	}
	b.fs.track(in.ctl.cmd.Process.Pid)
	if b.lim.group != nil {
		in.ctl.watch(func(stop <-chan struct{}) { b.lim.watch(b, stop, b.kill) })
	}
	b.handOver()
	pb, err := b.pl.MarshalBinary()
	if err == nil {
		_, err = in.planW.Write(pb)
	}
	if err != nil {
		return fmt.Errorf("send plan: %w", err)
	}
	in.planW.Close()
	use := 0 // the steps mounted ahead the plan begins with
	if in.premounted.begins(b.pl) {
		use = len(in.premounted.steps)
	}
	var cloneFDs []int
	if in.root {
		if cloneFDs, err = cloneBinds(in.ctl.cmd.Process.Pid, b.pl, use, in.cloned); err != nil {
			return err
		}
	}
	err = nsinit.Send(in.ctl.sock, nsinit.Message{Type: nsinit.MsgGo, IDMaps: len(cloneFDs), Premounted: use}, cloneFDs...)
	closeFDs(cloneFDs)
	if err != nil {
		return fmt.Errorf("start sandbox: %w", err)
	}
	return nil
}

// discard kills an init no sandbox took and removes what was made for it.
func (in *initProc) discard() {
	in.ctl.kill()
	<-in.ctl.exited
	in.ctl.close()
	in.planW.Close()
	in.dropClones()
	if in.group != nil {
		_ = in.group.Destroy() // a group left behind is removed by the janitor's next pass
	}
}

// dropClones closes the clones no plan step took.
func (in *initProc) dropClones() {
	for _, fds := range in.cloned {
		closeFDs(fds)
	}
	in.cloned = nil
}

// maxPreclones bounds the bind steps a Pool clones ahead for each warm
// init: every clone is an fd and a copy of a host mount tree held while
// the init waits. A default plan has 15 (the system base and /dev).
const maxPreclones = 32

// clonedAhead reports whether step m may be cloned before its sandbox's
// init is known: a bind that needs no user namespace (not idmapped; the
// grants are, the system base, /dev and the tools are not).
func clonedAhead(m plan.Mount) bool { return m.Cloned() && !m.IDMap }

// precloneBinds clones the steps that are clonedAhead exactly as
// cloneBinds would, ahead of the plan: a Pool does it for a warm init
// while it waits, for the steps its last taker's plan had, so that a
// sandbox taking the init has most of its binds ready (17 clones took
// 0.45 ms of a new session). A step that fails to clone is left out:
// cloneBinds tries it again and reports the error with the plan.
func precloneBinds(steps []plan.Mount) map[plan.Mount][]int {
	if len(steps) == 0 {
		return nil
	}
	cloned := map[plan.Mount][]int{}
	for _, m := range steps[:min(len(steps), maxPreclones)] {
		if !clonedAhead(m) {
			continue
		}
		if fd, err := mount.Clone(m, -1); err == nil {
			cloned[m] = append(cloned[m], fd)
		}
	}
	return cloned
}

// cloneBinds clones every bind source of the plan, in plan order, with the
// supervisor's (root's) access to the host: the sandbox's own uid may not
// even be able to reach a granted path or a tool (a 0700 parent). Grants
// are idmapped through the child's user namespace, so files the sandbox
// writes belong to the caller on disk. A step with a clone in pre (made
// by precloneBinds for an identical step) takes it instead, and out of
// pre. Steps before first were mounted ahead (initProc.premount) and get
// none.
func cloneBinds(pid int, pl *plan.Plan, first int, pre map[plan.Mount][]int) ([]int, error) {
	ns, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/ns/user", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open sandbox user namespace: %w", err)
	}
	defer unix.Close(ns)
	var fds []int
	for _, m := range pl.Mounts[first:] {
		if !m.Cloned() {
			continue
		}
		if ready := pre[m]; clonedAhead(m) && len(ready) > 0 {
			fds, pre[m] = append(fds, ready[len(ready)-1]), ready[:len(ready)-1]
			continue
		}
		userns := -1
		if m.IDMap {
			userns = ns
		}
		fd, err := mount.Clone(m, userns)
		if err != nil {
			closeFDs(fds)
			return nil, err
		}
		fds = append(fds, fd)
	}
	return fds, nil
}

// readControl takes a control process's start-up fds (proxy listeners,
// the stage and grant roots; the OCI launcher sends no stage) and delivers
// every other message to the box, until the socket ends.
func readControl(b *box, ctl *control) {
	defer b.delivered(ctl)
	for {
		m, fds, err := nsinit.Recv(ctl.sock)
		if err != nil {
			return
		}
		switch m.Type {
		case nsinit.MsgListeners:
			b.serveProxy(fds)
			continue
		case nsinit.MsgBroker:
			if b.pl.NoNamespaces {
				b.serveBroker(ctl, fds)
			} else {
				b.serveTransparentBroker(ctl, fds)
			}
			continue
		case nsinit.MsgMounts:
			if err := b.stage.receive(m.Staged, fds); err != nil {
				b.log.Error("sandbox mounts", "err", err)
				ctl.kill() // fail closed: the writes could not be bounded or copied back
				continue
			}
			if m.Staged {
				ctl.watch(func(stop <-chan struct{}) { b.stage.watch(stop, haltFull(b)) })
			}
			continue
		}
		closeFDs(fds)
		b.deliver(ctl, m)
	}
}

// serveProxy serves the egress proxy on the two listening sockets made
// inside the sandbox's network namespace (HTTP/CONNECT, then SOCKS5).
func (b *box) serveProxy(fds []int) { b.serveProxyOn(fds, nil) }

// serveProxyOn is serveProxy with admit, when set, deciding which
// accepted connections the proxy serves (the others are closed).
func (b *box) serveProxyOn(fds []int, admit func(net.Conn) bool) {
	// Each fd is closed exactly once: by its os.File below, or here if it
	// never gets one. (Closing a number twice could close whatever reused it.)
	owned := 0
	defer func() { closeFDs(fds[owned:]) }()
	want := 2
	if b.pl.Transparent {
		want = 4 // and the tunnel listener and the DNS socket
	}
	if len(fds) != want {
		b.log.Error("egress: wrong number of listener fds", "want", want, "got", len(fds))
		b.kill() // fail closed: what the plan promised cannot be served
		return
	}
	p, err := egress.New(egress.Config{Policy: b.cfg.Policy, Meter: b.meter, Audit: b.sink, Resolver: b.cfg.Resolver, Dialer: b.cfg.Dialer, Logger: b.log,
		MaxConns: proxyConnCap(b.pl.Limits.Pids, b.cfg.MaxProxyConns), AgentAdvice: b.cfg.AgentAdvice,
		Credentials: b.creds, CA: b.ca, UpstreamRoots: b.cfg.UpstreamRoots})
	if err != nil {
		b.log.Error("egress", "err", err) // no proxy: the sandbox has no way out at all
		return
	}
	b.proxy.Store(p)
	for i, serve := range []func(net.Listener) error{p.ServeHTTPProxy, p.ServeSOCKS5} {
		f := os.NewFile(uintptr(fds[i]), "egress")
		owned = i + 1
		l, err := net.FileListener(f) // a dup; f's own fd is closed next
		f.Close()
		if err != nil {
			b.log.Error("egress listener", "err", err)
			continue
		}
		if admit != nil {
			l = &admitListener{Listener: l, admit: admit}
		}
		go func() { _ = serve(l) }() // returns when Close closes the listener
	}
	if want == 4 {
		owned = 4 // serveTransparent owns them now
		if err := b.serveTransparent(p, fds[2], fds[3]); err != nil {
			b.log.Error("egress", "err", err)
			b.kill()
		}
	}
}

// admitListener closes accepted connections that admit refuses.
type admitListener struct {
	net.Listener
	admit func(net.Conn) bool
}

func (l *admitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.admit(c) {
			return c, nil
		}
		c.Close()
	}
}

// noteEnvironment records the environment in the report: the policy's
// rootfs and, for an image, its digest.
func (b *box) noteEnvironment() {
	b.enf.Rootfs = b.cfg.Policy.Rootfs()
	if _, d, ok := strings.Cut(b.pl.RootfsImage, "@"); ok {
		b.enf.RootfsDigest = d
	}
}
