package sandbox

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/internal/enforce/mount"
	"github.com/airlock-sandbox/airlock/internal/enforce/nsinit"
	"github.com/airlock-sandbox/airlock/plan"
	"github.com/airlock-sandbox/airlock/policy/budget"
)

// initProc is a started sandbox init and what the supervisor holds for it.
type initProc struct {
	cmd    *exec.Cmd
	ctl    int
	lim    *limits
	msgs   chan nsinit.Message // control messages but listeners; closed at EOF
	exited chan struct{}       // closed once the init has been reaped
	proxy  atomic.Pointer[egress.Proxy]
	stage  *staging // the staged fs_write grants
	// sandboxID is the host uid and gid the sandbox runs as when the
	// supervisor is root (files it creates belong to it); 0 rootless.
	sandboxID int

	killOnce  sync.Once
	stopWatch chan struct{}
	stopOnce  sync.Once
	watching  sync.WaitGroup
	downOnce  sync.Once
}

// startInit starts the sandbox init for pl: limits, namespaces, the plan,
// idmapped grants and the "go" message. On error nothing is left running.
//
// Preconditions:
//   - the calling goroutine is locked to its OS thread and stays so for the
//     init's whole life (Pdeathsig is tied to the thread)
func startInit(r *run, pl *plan.Plan, stdin io.Reader, stdout, stderr io.Writer) (*initProc, error) {
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
	ip := &initProc{ctl: pair[0], msgs: make(chan nsinit.Message, 16), exited: make(chan struct{}), stopWatch: make(chan struct{})}
	if ip.stage, err = openStaging(pl); err != nil {
		unix.Close(ip.ctl)
		return nil, err
	}

	ip.lim, err = newLimits(pl.Limits, r.sink)
	if err != nil {
		ip.stage.close()
		unix.Close(ip.ctl)
		return nil, err
	}
	r.report.Enforcement.Downgrades = ip.lim.downgrades
	if ip.lim.group != nil {
		r.report.Enforcement.Cgroup = ip.lim.host.Version
	}

	exe := "/proc/self/exe"
	extra := []*os.File{planR, child}
	initFile, err := openInit(r.c.Executable)
	if err != nil {
		ip.lim.finish(r)
		ip.stage.close()
		unix.Close(ip.ctl)
		return nil, fmt.Errorf("sandbox init binary: %w", err)
	}
	if initFile != nil {
		defer initFile.Close()
		// Executed through its fd (the third extra file is fd 5 in the child).
		extra = append(extra, initFile)
		exe = "/proc/self/fd/5"
	}
	root := os.Geteuid() == 0
	id, gid := os.Getuid(), os.Getgid()
	if root {
		id = hostID()
		gid = id
		ip.sandboxID = id
	}
	ip.cmd = &exec.Cmd{
		Path:       exe,
		Args:       []string{nsinit.Arg0},
		Env:        []string{},
		Stdin:      stdin,
		Stdout:     stdout,
		Stderr:     stderr,
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
	if ip.lim.group != nil {
		if fd, ok := ip.lim.group.UnifiedFD(); ok {
			// CLONE_INTO_CGROUP: the init is in the group from its first instruction.
			ip.cmd.SysProcAttr.UseCgroupFD, ip.cmd.SysProcAttr.CgroupFD = true, fd
		}
	}
	if err := ip.cmd.Start(); err != nil {
		ip.lim.finish(r)
		ip.stage.close()
		unix.Close(ip.ctl)
		return nil, fmt.Errorf("start sandbox init: %w (are user namespaces enabled? see airlock doctor)", err)
	}
	child.Close()
	planR.Close()
	go func() {
		_ = ip.cmd.Wait() // the status is read from ProcessState and the control messages
		close(ip.exited)
	}()
	r.fs.track(ip.cmd.Process.Pid)
	if err := ip.handOver(r, pl, planW, root); err != nil {
		ip.shutdown(r)
		return nil, err
	}
	go ip.readControl(r)
	return ip, nil
}

// handOver puts the init in its cgroup, sends the plan and the idmapped
// grants, and lets it go.
func (ip *initProc) handOver(r *run, pl *plan.Plan, planW *os.File, root bool) error {
	if g := ip.lim.group; g != nil {
		// The init waits for "go" before it forks anything, so adding it to
		// the v1 hierarchies now leaves no window.
		if err := g.Add(ip.cmd.Process.Pid); err != nil {
			return fmt.Errorf("cgroup: %w", err)
		}
		ip.watching.Add(1)
		go func() {
			defer ip.watching.Done()
			ip.lim.watch(r, ip.stopWatch, ip.kill)
		}()
	}
	if err := json.NewEncoder(planW).Encode(pl); err != nil {
		return fmt.Errorf("send plan: %w", err)
	}
	planW.Close()
	var cloneFDs []int
	if root {
		var err error
		if cloneFDs, err = cloneBinds(ip.cmd.Process.Pid, pl); err != nil {
			return err
		}
	}
	err := nsinit.Send(ip.ctl, nsinit.Message{Type: "go", IDMaps: len(cloneFDs)}, cloneFDs...)
	for _, fd := range cloneFDs {
		unix.Close(fd)
	}
	if err != nil {
		return fmt.Errorf("start sandbox: %w", err)
	}
	return nil
}

// kill ends the sandbox: SIGKILL to pid 1 of its pid namespace makes the
// kernel kill every process in it.
func (ip *initProc) kill() {
	ip.killOnce.Do(func() { _ = ip.cmd.Process.Kill() }) // already gone is fine
}

// shutdown kills the sandbox, waits for the init, ends the proxy and
// removes the cgroup. It is idempotent.
func (ip *initProc) shutdown(r *run) {
	ip.downOnce.Do(func() {
		ip.stopOnce.Do(func() { close(ip.stopWatch) })
		ip.watching.Wait() // the watcher must not read the group while it is destroyed
		ip.kill()
		<-ip.exited
		if p := ip.proxy.Load(); p != nil {
			_ = p.Close() // tunnels end with the sandbox
		}
		// Every process of the sandbox is dead: the stage no longer changes.
		written, full := ip.stage.usage()
		if full {
			r.halt(budget.MaxWrite, "the run wrote max_write bytes to its fs_write grants; the write past it failed (no space left), and the run was stopped")
		}
		r.report.Usage.WriteBytes = written
		if res := ip.stage.writeBack(r); res != nil {
			r.report.Writes = res
		}
		ip.stage.close()
		ip.lim.finish(r)
		unix.Close(ip.ctl)
	})
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
func (ip *initProc) readControl(r *run) {
	defer close(ip.msgs)
	for {
		m, fds, err := nsinit.Recv(ip.ctl)
		if err != nil {
			return
		}
		switch m.Type {
		case "listeners":
			ip.serveProxy(r, fds)
			continue
		case "mounts":
			if err := ip.stage.receive(m.Staged, fds); err != nil {
				r.log.Error("sandbox mounts", "err", err)
				ip.kill() // fail closed: the writes could not be bounded or copied back
				continue
			}
			if m.Staged {
				ip.watching.Add(1)
				go func() {
					defer ip.watching.Done()
					ip.stage.watch(ip.stopWatch, haltFull(r, ip.kill))
				}()
			}
			continue
		}
		for _, fd := range fds {
			unix.Close(fd)
		}
		ip.msgs <- m
	}
}

func (ip *initProc) serveProxy(r *run, fds []int) {
	// Each fd is closed exactly once: by its os.File below, or here if it
	// never gets one. (Closing a number twice could close whatever reused it.)
	owned := 0
	defer func() {
		for _, fd := range fds[owned:] {
			unix.Close(fd)
		}
	}()
	if len(fds) != 2 {
		r.log.Error("egress: expected 2 listener fds", "got", len(fds))
		return
	}
	p, err := egress.New(egress.Config{Policy: r.c.Policy, Meter: r.meter, Audit: r.sink, Resolver: r.c.Resolver, Dialer: r.c.Dialer, Logger: r.log,
		MaxConns: proxyConnCap(r.c.Policy.Budget().Pids, r.c.MaxProxyConns), AgentAdvice: r.c.AgentAdvice})
	if err != nil {
		r.log.Error("egress", "err", err) // no proxy: the sandbox has no way out at all
		return
	}
	ip.proxy.Store(p)
	for i, serve := range []func(net.Listener) error{p.ServeHTTPProxy, p.ServeSOCKS5} {
		f := os.NewFile(uintptr(fds[i]), "egress")
		owned = i + 1
		l, err := net.FileListener(f) // a dup; f's own fd is closed next
		f.Close()
		if err != nil {
			r.log.Error("egress listener", "err", err)
			continue
		}
		go func() { _ = serve(l) }() // returns when Close closes the listener
	}
}
