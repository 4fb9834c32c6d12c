package sandbox

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/egress"
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
	cloneFlags, err := namespace.CloneFlags(b.pl.Namespaces)
	if err != nil {
		return nil, err
	}
	if b.stage, err = openStaging(b.pl); err != nil {
		return nil, err
	}
	if b.lim, err = newLimits(b.pl.Limits, b.sink); err != nil {
		b.stage.close()
		return nil, err
	}
	b.enf.Backend = "namespaces"
	for _, d := range b.lim.downgrades {
		b.downgraded(policy.Downgrade(d))
	}
	if b.lim.group != nil {
		b.enf.Cgroup = b.lim.host.Version
	}
	ctl, err := startInit(b, cloneFlags)
	if err != nil {
		b.lim.finish(b)
		b.stage.close()
		return nil, err
	}
	return ctl, nil
}

// startInit starts the init process and hands the plan over.
func startInit(b *box, cloneFlags uintptr) (*control, error) {
	planR, planW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("plan pipe: %w", err)
	}
	defer planR.Close()
	defer planW.Close()
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	child := os.NewFile(uintptr(pair[1]), "control")
	defer child.Close()

	exe := "/proc/self/exe"
	extra := []*os.File{planR, child}
	initFile, err := openInit(b.cfg.Executable)
	if err != nil {
		unix.Close(pair[0])
		return nil, fmt.Errorf("sandbox init binary: %w", err)
	}
	if initFile != nil {
		defer initFile.Close()
		// Executed through its fd (the third extra file is fd 5 in the child).
		extra = append(extra, initFile)
		exe = "/proc/self/fd/5"
	}
	root := namespace.HostAdmin() // not euid 0: root in a container lacks what the privileged path needs
	id, gid := os.Getuid(), os.Getgid()
	if root {
		id = hostID(b.pl)
		gid = id
		b.sandboxID = id
	}
	cmd := &exec.Cmd{
		Path:       exe,
		Args:       []string{nsinit.Arg0},
		Env:        []string{},
		ExtraFiles: extra,
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
	ctl := newControl(cmd, pair[0])
	// The init's own output (a Go runtime panic, say); commands get pipes of their own.
	cmd.Stdout, cmd.Stderr = ctl.stderr, ctl.stderr
	if g := b.lim.group; g != nil {
		if fd, ok := g.UnifiedFD(); ok {
			// CLONE_INTO_CGROUP: the init is in the group from its first instruction.
			cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, fd
		}
	}
	if err := cmd.Start(); err != nil {
		ctl.close()
		return nil, fmt.Errorf("start sandbox init: %w (are user namespaces enabled? see airlock doctor)", err)
	}
	child.Close()
	planR.Close()
	go func() {
		_ = cmd.Wait() // the status is read from ProcessState and the control messages
		close(ctl.exited)
	}()
	b.fs.track(cmd.Process.Pid)
	if err := handOver(b, ctl, planW, root); err != nil {
		ctl.stopWatchers()
		ctl.kill()
		<-ctl.exited
		ctl.close()
		return nil, err
	}
	go readControl(b, ctl)
	return ctl, nil
}

// handOver puts the init in its cgroup, sends the plan and the idmapped
// grants, and lets it go.
func handOver(b *box, ctl *control, planW *os.File, root bool) error {
	if g := b.lim.group; g != nil {
		// The init waits for "go" before it forks anything, so adding it to
		// the v1 hierarchies now leaves no window. Started into the cgroup2
		// group (CLONE_INTO_CGROUP), it is only moved in the others.
		add := g.Add
		if ctl.cmd.SysProcAttr.UseCgroupFD {
			add = g.AddCloned
		}
		if err := add(ctl.cmd.Process.Pid); err != nil {
			return fmt.Errorf("cgroup: %w", err)
		}
		ctl.watch(func(stop <-chan struct{}) { b.lim.watch(b, stop, b.kill) })
	}
	if err := json.NewEncoder(planW).Encode(b.pl); err != nil {
		return fmt.Errorf("send plan: %w", err)
	}
	planW.Close()
	var cloneFDs []int
	if root {
		var err error
		if cloneFDs, err = cloneBinds(ctl.cmd.Process.Pid, b.pl); err != nil {
			return err
		}
	}
	err := nsinit.Send(ctl.sock, nsinit.Message{Type: nsinit.MsgGo, IDMaps: len(cloneFDs)}, cloneFDs...)
	closeFDs(cloneFDs)
	if err != nil {
		return fmt.Errorf("start sandbox: %w", err)
	}
	return nil
}

// cloneBinds clones every bind source of the plan, in plan order, with the
// supervisor's (root's) access to the host: the sandbox's own uid may not
// even be able to reach a granted path or a tool (a 0700 parent). Grants
// are idmapped through the child's user namespace, so files the sandbox
// writes belong to the caller on disk.
func cloneBinds(pid int, pl *plan.Plan) ([]int, error) {
	ns, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/ns/user", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open sandbox user namespace: %w", err)
	}
	defer unix.Close(ns)
	var fds []int
	for _, m := range pl.Mounts {
		if !m.Cloned() {
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
// the stage and grant roots; the OCI launcher sends no stage) and forwards
// every other message to the box.
func readControl(b *box, ctl *control) {
	defer close(ctl.msgs)
	for {
		m, fds, err := nsinit.Recv(ctl.sock)
		if err != nil {
			return
		}
		switch m.Type {
		case nsinit.MsgListeners:
			b.serveProxy(fds)
			continue
		case nsinit.MsgMounts:
			if err := b.stage.receive(m.Staged, fds); err != nil {
				b.log.Error("sandbox mounts", "err", err)
				b.kill() // fail closed: the writes could not be bounded or copied back
				continue
			}
			if m.Staged {
				ctl.watch(func(stop <-chan struct{}) { b.stage.watch(stop, haltFull(b)) })
			}
			continue
		}
		closeFDs(fds)
		ctl.msgs <- m
	}
}

// serveProxy serves the egress proxy on the two listening sockets made
// inside the sandbox's network namespace (HTTP/CONNECT, then SOCKS5).
func (b *box) serveProxy(fds []int) {
	// Each fd is closed exactly once: by its os.File below, or here if it
	// never gets one. (Closing a number twice could close whatever reused it.)
	owned := 0
	defer func() { closeFDs(fds[owned:]) }()
	if len(fds) != 2 {
		b.log.Error("egress: expected 2 listener fds", "got", len(fds))
		return
	}
	p, err := egress.New(egress.Config{Policy: b.cfg.Policy, Meter: b.meter, Audit: b.sink, Resolver: b.cfg.Resolver, Dialer: b.cfg.Dialer, Logger: b.log,
		MaxConns: proxyConnCap(b.pl.Limits.Pids, b.cfg.MaxProxyConns), AgentAdvice: b.cfg.AgentAdvice})
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
		go func() { _ = serve(l) }() // returns when Close closes the listener
	}
}
