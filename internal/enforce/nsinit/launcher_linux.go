package nsinit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/plan/spec"
)

// The OCI launcher is the control process of isolation oci: airlock's
// binary re-executed as pid 1 of a new pid namespace, with a private mount
// namespace, that drives an OCI runtime (runc, crun) and speaks the
// control protocol (proto.go) for it. It starts the container with an idle
// pid 1 (Pause, below) and runs each exec with `RUNTIME exec`. Being pid 1,
// its death (Pdeathsig when the supervisor dies, or the supervisor's
// SIGKILL) makes the kernel kill everything in its pid namespace, the
// container's namespaces included: a container cannot outlive airlock.
//
// Arguments: HIDE_CGROUP2 ("1" or "0"), STAGE_DIR ("-" for none), LOWERS
// (comma-separated staged grant indices, or "-"), RUNTIME, STATE_DIR,
// BUNDLE_DIR, ID. File descriptors: ControlFD (4) the control socket; with
// a STAGE_DIR, 5 the stage's detached tmpfs, attached there, and 6 and up
// read-only clones of the staged folders, attached at STAGE_DIR/N/lower for
// each N of LOWERS in turn (the runtime mounts with the container's
// unprivileged id, which may not reach the grants' own host paths).

// LauncherArg0 is argv[0] of the re-executed OCI launcher.
const LauncherArg0 = "airlock-oci-launcher"

// PauseArg0 is argv[0] of the idle pid 1 inside an OCI container.
const PauseArg0 = "airlock-oci-pause"

// PausePath is where the OCI bundle binds the pause binary in the container.
const PausePath = "/.airlock/pause"

// LaunchFile, in the bundle folder, is the launcher's part of the plan
// (JSON LaunchInfo).
const LaunchFile = "launch.json"

// LaunchInfo is what the launcher needs of the plan.
type LaunchInfo struct {
	// Grants are the grants' targets in plan order: the launcher opens each
	// one's root inside the container and sends them in a "mounts"
	// message, for the supervisor's file API.
	Grants []string `json:"grants"`
	// Proxy says the container gets the egress proxy's listeners: the
	// launcher makes them inside the container's network namespace and
	// sends them in a "listeners" message.
	Proxy bool `json:"proxy"`
	// RuntimeFlags go before the subcommand of every runtime invocation
	// (runsc's --platform, --network=none, --host-uds=open).
	RuntimeFlags []string `json:"runtime_flags,omitempty"`
	// Sentry is set for a runtime whose container runs in a user-space
	// kernel (gVisor's runsc): its network is the sentry's own (the
	// container's pid 1 forwards the proxy's ports to the supervisor's
	// unix sockets, so the launcher makes no listeners), the grants are
	// the host folders themselves (there is no container mount namespace
	// to open them through), and each exec is an attached `runsc exec`,
	// whose exit status is the command's, killed with `runsc kill`.
	Sentry bool `json:"sentry,omitempty"`
}

// launcherStageFD is the launcher's inherited stage fd.
const launcherStageFD = 5

// Launch runs the launcher and exits the process; it never returns.
//
// Preconditions:
//   - started by the supervisor with CLONE_NEWPID|CLONE_NEWNS, as root
func Launch() {
	runtime.LockOSThread()
	fail := func(stage string, err error) {
		_ = Send(ControlFD, Message{Type: MsgError, Stage: stage, Error: err.Error()}) // the supervisor also sees exit 125
		os.Exit(125)
	}
	unix.CloseOnExec(ControlFD)
	if len(os.Args) != 8 {
		fail("launcher", errors.New("usage: HIDE_CGROUP2 STAGE_DIR LOWERS RUNTIME STATE_DIR BUNDLE_DIR ID"))
	}
	hide, stageDir, lowers := os.Args[1] == "1", os.Args[2], os.Args[3]
	l := &launcher{runtime: os.Args[4], state: os.Args[5], bundle: os.Args[6], id: os.Args[7], execs: map[int]*launched{}, early: map[int]reaped{}}
	if err := l.setup(hide, stageDir, lowers); err != nil {
		fail("mounts", err)
	}
	if err := l.start(); err != nil {
		fail("runtime", err)
	}
	if err := Send(ControlFD, Message{Type: MsgReady}); err != nil {
		os.Exit(125)
	}
	l.serve()
	os.Exit(0) // pid 1 exits: the kernel kills the container with it
}

// launcher is the launcher's state.
type launcher struct {
	runtime, state, bundle, id string
	process                    json.RawMessage // the bundle's process, the template of every exec
	info                       LaunchInfo

	mu    sync.Mutex
	execs map[int]*launched // guarded by mu: runtime exec pid -> its exec
	early map[int]reaped    // guarded by mu: reaped before registration
}

// launched is one `RUNTIME exec` the launcher started.
type launched struct {
	id      string
	pidFile string
	done    chan reaped
}

func (l *launcher) setup(hide bool, stageDir, lowers string) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / private: %w", err)
	}
	// The runtime reads /proc/<pid> of its own children: /proc must show
	// this pid namespace.
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc for the launcher's pid namespace: %w", err)
	}
	if hide {
		// crun refuses the hybrid cgroup layout unless cgroup2 is hidden (DESIGN §7).
		if err := unix.Unmount("/sys/fs/cgroup/unified", unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("hide cgroup2: %w", err)
		}
	}
	if stageDir != "-" {
		// Attached only in this mount namespace: the runtime's overlays
		// find their layers here, and nothing is left on the host.
		if err := unix.MoveMount(launcherStageFD, "", unix.AT_FDCWD, stageDir, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fmt.Errorf("attach the stage: %w", err)
		}
		unix.Close(launcherStageFD)
		if lowers != "-" {
			for i, n := range strings.Split(lowers, ",") {
				fd := launcherStageFD + 1 + i
				if err := unix.MoveMount(fd, "", unix.AT_FDCWD, filepath.Join(stageDir, n, "lower"), unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
					return fmt.Errorf("attach staged folder %s: %w", n, err)
				}
				unix.Close(fd)
			}
		}
	}
	var config struct {
		Process json.RawMessage `json:"process"`
	}
	data, err := os.ReadFile(filepath.Join(l.bundle, "config.json"))
	if err == nil {
		err = json.Unmarshal(data, &config)
	}
	if err != nil || len(config.Process) == 0 {
		return fmt.Errorf("read the bundle's process: %v", err)
	}
	l.process = config.Process
	data, err = os.ReadFile(filepath.Join(l.bundle, LaunchFile))
	if err == nil {
		err = json.Unmarshal(data, &l.info)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", LaunchFile, err)
	}
	return nil
}

// argv is a runtime invocation: the binary, the runtime flags, --root and
// the subcommand's arguments.
func (l *launcher) argv(sub ...string) []string {
	a := append([]string{l.runtime}, l.info.RuntimeFlags...)
	return append(append(a, "--root", l.state), sub...)
}

// start runs `RUNTIME run --detach`: the container's idle pid 1 is up when
// it returns.
func (l *launcher) start() error {
	go l.reap()
	if err := os.MkdirAll(l.state, 0o700); err != nil {
		return err
	}
	// A detached container's pid 1 inherits the runtime's stdio: a file,
	// not a pipe, so that nothing waits for it to close.
	logPath := filepath.Join(l.state, "run.log")
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		logf.Close()
		return err
	}
	ln := &launched{done: make(chan reaped, 1)}
	l.mu.Lock() // held across the fork, so the reaper cannot see the exit first
	pidFile := filepath.Join(l.state, "pause.pid")
	pid, err := syscall.ForkExec(l.runtime, l.argv("run", "--detach", "--pid-file", pidFile, "--bundle", l.bundle, l.id), &syscall.ProcAttr{
		Env:   []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"},
		Files: []uintptr{null.Fd(), null.Fd(), logf.Fd()},
	})
	if err == nil {
		l.execs[pid] = ln
	}
	l.mu.Unlock()
	logf.Close()
	null.Close()
	if err != nil {
		return fmt.Errorf("start %s: %w", l.runtime, err)
	}
	st := <-ln.done
	if code := st.ws.ExitStatus(); code != 0 || st.ws.Signaled() {
		out, _ := os.ReadFile(logPath)
		return fmt.Errorf("%s run exited %d: %s", filepath.Base(l.runtime), code, strings.TrimSpace(string(out)))
	}
	return l.sendGrants(pidFile)
}

// waitPauseExecd waits until the container's pid 1 runs the pause
// program. `crun run --detach` can return while pid 1 is still the
// runtime's own code setting the container up; a `crun exec` that joins
// its namespaces then fails with "setns(pid=N, CLONE_*): Operation not
// permitted" (crun before 1.9, containers/crun#1264), and the command does
// not start.
func waitPauseExecd(pid string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for wait := 100 * time.Microsecond; ; wait = min(2*wait, 10*time.Millisecond) {
		b, err := os.ReadFile("/proc/" + pid + "/cmdline")
		if err != nil {
			return fmt.Errorf("the container's pid 1 (%s) is gone: %w", pid, err)
		}
		if arg0, _, _ := strings.Cut(string(b), "\x00"); arg0 == PausePath || arg0 == PauseArg0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the container's pid 1 (%s) did not start %s within %v (its command line is %q)", pid, PausePath, within, b)
		}
		time.Sleep(wait)
	}
}

// sendGrants opens the root of every grant as the container sees it,
// through its pid 1's root, and sends them to the supervisor; and it makes
// the proxy's listeners in the container's network namespace (which the
// runtime made, owned by the container's user namespace, so that
// `RUNTIME exec` can join it).
func (l *launcher) sendGrants(pidFile string) error {
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return fmt.Errorf("read the container's pid: %w", err)
	}
	pid := strings.TrimSpace(string(b))
	info := l.info
	if !info.Sentry {
		if err := waitPauseExecd(pid, 10*time.Second); err != nil {
			return err
		}
	}
	rootPath := "/proc/" + pid + "/root"
	if info.Sentry {
		// The sentry's network and files are its own: the container's pid
		// 1 forwards the proxy, and the grants are the host folders.
		rootPath = "/"
	} else if err := containerNetwork(pid, info.Proxy); err != nil {
		return err
	}
	root, err := unix.Open(rootPath, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the container's root: %w", err)
	}
	defer unix.Close(root)
	var fds []int
	defer func() { closeAll(fds) }()
	for _, g := range info.Grants {
		fd, err := unix.Openat2(root, strings.TrimPrefix(g, "/"), &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS})
		if err != nil {
			return fmt.Errorf("open grant %s in the container: %w", g, err)
		}
		fds = append(fds, fd)
	}
	return Send(ControlFD, Message{Type: MsgMounts}, fds...)
}

// containerNetwork brings up lo in the container's network namespace,
// checks that lo is all it has, and, with a proxy, makes the proxy's
// listening sockets there and sends them to the supervisor. It runs on a
// thread of its own that switches namespace and is then thrown away.
func containerNetwork(pid string, proxy bool) error {
	ns, err := unix.Open("/proc/"+pid+"/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the container's network namespace: %w", err)
	}
	defer unix.Close(ns)
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		if err := unix.Setns(ns, unix.CLONE_NEWNET); err != nil {
			done <- fmt.Errorf("join the container's network namespace: %w", err)
			return
		}
		done <- setupNetwork(&spec.Plan{Proxy: proxy}, earlyNet{})
	}()
	return <-done
}

// serve runs exec requests until the supervisor closes the control socket.
func (l *launcher) serve() {
	for {
		m, fds, err := Recv(ControlFD)
		if err != nil {
			return // the supervisor is gone: end everything
		}
		switch m.Type {
		case MsgExec:
			l.exec(m, fds)
		case MsgKill:
			if m.Pid > 0 && l.info.Sentry {
				l.sentryKill(m.Pid)
			} else if m.Pid > 0 {
				_ = unix.Kill(-m.Pid, unix.SIGKILL) // its process group, when it leads one
				_ = unix.Kill(m.Pid, unix.SIGKILL)  // it may be gone already
			}
			closeAll(fds)
		default:
			closeAll(fds)
		}
	}
}

// exec starts `RUNTIME exec --detach` for one exec request. Detached,
// the runtime hands the command the exec's own fds and exits once it has
// started it: the command is then reparented to the launcher (pid 1 of the
// runtime's pid namespace), which reaps it and reports its own wait status
// and rusage. Attached, the runtime would relay the streams and wait for
// them to close, so a background process keeping stdout open would hold
// the exec until the sandbox's deadline.
func (l *launcher) exec(m Message, fds []int) {
	defer closeAll(fds)
	fail := func(code int, msg string) {
		_ = Send(ControlFD, Message{Type: MsgExit, ID: m.ID, Code: code, Error: msg}) // reported as the exec's result
	}
	if len(fds) != 3 || len(m.Argv) == 0 {
		fail(125, "airlock bug: exec needs argv and three fds")
		return
	}
	proc := map[string]any{}
	if err := json.Unmarshal(l.process, &proc); err != nil {
		fail(125, "read the bundle's process: "+err.Error())
		return
	}
	proc["args"], proc["env"], proc["terminal"] = m.Argv, m.Env, false
	if m.Cwd != "" {
		proc["cwd"] = m.Cwd
	}
	data, _ := json.Marshal(proc) // a map of JSON values always encodes
	base := filepath.Join(l.state, "exec-"+m.ID)
	if err := os.WriteFile(base+".json", data, 0o600); err != nil {
		fail(125, "write the exec's process: "+err.Error())
		return
	}
	ln := &launched{id: m.ID, pidFile: base + ".pid", done: make(chan reaped, 1)}
	argv := l.argv("exec", "--detach", "--process", base+".json", "--pid-file", ln.pidFile, l.id)
	if l.info.Sentry {
		// Attached: runsc hands the fds to the sentry and exits with the
		// command's status; the pid the supervisor kills is the one
		// inside the sandbox.
		argv = l.argv("exec", "--process", base+".json", "--internal-pid-file", ln.pidFile, l.id)
	}
	l.mu.Lock() // held across the fork, so the reaper cannot see the exit first
	pid, err := syscall.ForkExec(l.runtime, argv, &syscall.ProcAttr{
		Env:   []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"},
		Files: []uintptr{uintptr(fds[0]), uintptr(fds[1]), uintptr(fds[2])},
		Sys:   &syscall.SysProcAttr{Setsid: true},
	})
	if err == nil {
		l.execs[pid] = ln
	}
	l.mu.Unlock()
	if err != nil {
		fail(126, fmt.Sprintf("exec %s: start %s: %v", m.Argv[0], l.runtime, err))
		return
	}
	if l.info.Sentry {
		go l.reportAttached(ln)
		return
	}
	go l.report(ln)
}

// reportAttached reports an attached `runsc exec`: started once the
// sandbox's pid of the command is written, then the runtime's exit status,
// which is the command's.
func (l *launcher) reportAttached(ln *launched) {
	started := false
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case st := <-ln.done:
			if !started {
				_ = Send(ControlFD, Message{Type: MsgStarted, ID: ln.id})
			}
			m := exitMessage(st.ws, nil)
			m.ID = ln.id
			_ = Send(ControlFD, m)
			return
		case <-tick.C:
			if started {
				continue
			}
			if b, err := os.ReadFile(ln.pidFile); err == nil && len(b) > 0 {
				if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
					started = true
					_ = Send(ControlFD, Message{Type: MsgStarted, ID: ln.id, Pid: pid})
				}
			}
		}
	}
}

// sentryKill kills the process with pid inside the sandbox (`runsc kill
// --pid`) and waits for the runtime. What that process started keeps
// running until the sandbox ends: runsc kills one pid, not its group.
func (l *launcher) sentryKill(pid int) {
	l.mu.Lock() // held across the fork, so the reaper cannot see the exit first
	kp, err := syscall.ForkExec(l.runtime, l.argv("kill", "--pid", strconv.Itoa(pid), l.id, "KILL"), &syscall.ProcAttr{
		Env: []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"},
	})
	ln := &launched{done: make(chan reaped, 1)}
	if err == nil {
		l.execs[kp] = ln
	}
	l.mu.Unlock()
	if err == nil {
		<-ln.done
	}
}

// report waits for the runtime to start the command, sends the command's
// pid, then its exit.
func (l *launcher) report(ln *launched) {
	st := <-ln.done
	if st.ws.Signaled() || st.ws.ExitStatus() != 0 {
		// The runtime's own message went to the exec's stderr.
		_ = Send(ControlFD, Message{Type: MsgExit, ID: ln.id, Code: 126,
			Error: fmt.Sprintf("%s exec failed (%s): the command did not start", filepath.Base(l.runtime), describeWait(st.ws))})
		return
	}
	pid := 0
	if b, err := os.ReadFile(ln.pidFile); err == nil {
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	if pid <= 0 {
		_ = Send(ControlFD, Message{Type: MsgExit, ID: ln.id, Code: 125, Error: fmt.Sprintf("%s exec left no pid in %s", filepath.Base(l.runtime), ln.pidFile)})
		return
	}
	cmd := &launched{id: ln.id, done: make(chan reaped, 1)}
	l.mu.Lock()
	if r, ok := l.early[pid]; ok {
		delete(l.early, pid)
		cmd.done <- r
	} else {
		l.execs[pid] = cmd
	}
	l.mu.Unlock()
	_ = Send(ControlFD, Message{Type: MsgStarted, ID: ln.id, Pid: pid}) // the supervisor needs the pid only to kill
	st = <-cmd.done
	m := exitMessage(st.ws, &st.ru)
	m.ID = ln.id
	_ = Send(ControlFD, m) // the supervisor is gone when this fails
}

// describeWait says how a process ended.
func describeWait(ws unix.WaitStatus) string {
	if ws.Signaled() {
		return "killed by " + unix.SignalName(ws.Signal())
	}
	return fmt.Sprintf("exit %d", ws.ExitStatus())
}

// maxEarly bounds the reaped-but-unclaimed exits the launcher keeps: a
// command that exits before its runtime does is reaped before report has
// read its pid.
const maxEarly = 1024

// reap reaps every child: the runtime processes the launcher started, the
// commands they leave to it, and orphans reparented to it (it is pid 1).
func (l *launcher) reap() {
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, unix.SIGCHLD)
	for {
		var r reaped
		pid, err := unix.Wait4(-1, &r.ws, 0, &r.ru)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if errors.Is(err, unix.ECHILD) {
			<-chld
			continue
		}
		if err != nil {
			return
		}
		l.mu.Lock()
		ln := l.execs[pid]
		delete(l.execs, pid)
		if ln == nil {
			if len(l.early) >= maxEarly {
				clear(l.early) // only unclaimed exits: the oldest claims are long overdue
			}
			l.early[pid] = r
		}
		l.mu.Unlock()
		if ln != nil {
			ln.done <- r
		}
	}
}

// Pause is the idle pid 1 of an OCI container: it reaps the orphans of the
// container's pid namespace until the container is killed. With arguments
// "forward HTTP_SOCK SOCKS_SOCK" (under gVisor, whose network is the
// sentry's own) it also listens on the proxy's ports on the container's
// loopback and relays each connection to the supervisor's unix socket for
// that port, where the egress proxy decides it.
func Pause() {
	signal.Ignore(unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGQUIT)
	if len(os.Args) == 4 && os.Args[1] == "forward" {
		for port, sock := range map[int]string{spec.HTTPProxyPort: os.Args[2], spec.SOCKSProxyPort: os.Args[3]} {
			if err := forward(port, sock); err != nil {
				fmt.Fprintf(os.Stderr, "airlock pause: %v\n", err)
				os.Exit(125) // no proxy: the container ends rather than run without one
			}
		}
	}
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, unix.SIGCHLD)
	for {
		var ws unix.WaitStatus
		_, err := unix.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, unix.ECHILD) {
			<-chld
		}
	}
}

// Dispatch hands control to the init, the OCI launcher or the pause
// program when this process is one of them (by argv[0]), and returns at
// once otherwise. Both sandbox.Init and cmd/airlock-init call it: one
// table of what a re-executed airlock binary may be.
func Dispatch() {
	if len(os.Args) == 0 {
		return
	}
	switch os.Args[0] {
	case Arg0:
		Main()
	case LauncherArg0:
		Launch()
	case PauseArg0, PausePath: // the runtime executes args[0], the bind's path, as argv[0]
		Pause()
	case BundleInitPath:
		BundleInit()
	case VMMArg0:
		VMM()
	case GuestInit:
		if os.Getpid() == 1 { // the kernel runs the initramfs's /init as pid 1
			Guest()
		}
	}
}

// forward listens on 127.0.0.1:port and relays every connection to the
// unix socket sock. Plain TCP: MPTCP is refused by the profile.
func forward(port int, sock string) error {
	var lc net.ListenConfig
	lc.SetMultipathTCP(false)
	ln, err := lc.Listen(context.Background(), "tcp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("listen on the proxy's port %d: %w", port, err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go relay(c, sock)
		}
	}()
	return nil
}

// relay copies c to and from a new connection to sock until both sides
// are done.
func relay(c net.Conn, sock string) {
	defer c.Close()
	up, err := net.Dial("unix", sock)
	if err != nil {
		return // the supervisor is gone: the client sees the connection close
	}
	defer up.Close()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	<-done
}
