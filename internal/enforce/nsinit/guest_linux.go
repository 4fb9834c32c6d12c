package nsinit

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/enforce/namespace"
	"github.com/airlock-sandbox/airlock/plan/spec"
)

// GuestInit is the path of airlock's init in a microVM's initramfs: the
// guest kernel runs it as pid 1 with argv[0] set to it.
const GuestInit = "/init"

// Guest ports and mounts: the names the VMM launcher gives them.
const (
	GuestPort     = "airlock.0" // the virtio-serial port of the link
	GuestRootTag  = "root"      // the 9p share of the sandbox's sources
	GuestModules  = "/modules"  // the module files to load, in order, one per line
	guestNewRoot  = "/newroot"
	guestPortWait = 10 * time.Second
)

// Guest runs as pid 1 of a microVM: it loads the modules the initramfs
// carries, mounts the host's share of the plan's sources as its root, and
// bridges the link to airlock's own init, started in new namespaces of
// the guest kernel with the plan the host sends: the same mounts,
// Landlock, seccomp, capabilities and rlimits as on the host, inside a
// kernel of the sandbox's own. It powers the VM off when that init ends
// or anything fails; it never returns.
//
// Preconditions:
//   - pid 1 of a guest booted from airlock's initramfs
func Guest() {
	err := guest()
	fmt.Fprintln(os.Stderr, "airlock guest:", err)
	unix.Sync()
	// The VMM runs with -no-reboot: a restart ends it.
	_ = unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART)
	os.Exit(1)
}

func guest() error {
	for _, m := range []struct{ src, dst, fs string }{{"devtmpfs", "/dev", "devtmpfs"}, {"proc", "/proc", "proc"}, {"sysfs", "/sys", "sysfs"}} {
		if err := os.MkdirAll(m.dst, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(m.src, m.dst, m.fs, unix.MS_NOSUID|unix.MS_NOEXEC, ""); err != nil {
			return fmt.Errorf("mount %s: %w", m.dst, err)
		}
	}
	if err := loadModules(); err != nil {
		return err
	}
	port, err := findPort()
	if err != nil {
		return err
	}
	self, err := os.Open(GuestInit)
	if err != nil {
		return err
	}
	if err := switchRoot(); err != nil {
		return err
	}
	l := &link{r: port, w: port}
	if err := l.send(frameHello, "", nil); err != nil {
		return fmt.Errorf("link: %w", err)
	}
	f, err := l.recv()
	if err != nil || f.kind != framePlan {
		return fmt.Errorf("link: expected the plan: kind %d, %v", f.kind, err)
	}
	var pl spec.Plan
	if err := pl.UnmarshalBinary(f.data); err != nil {
		return fmt.Errorf("plan: %w", err)
	}
	group, events, err := guestCgroup(&pl)
	if err != nil {
		_ = l.sendMsg(Message{Type: MsgError, Stage: "guest cgroup", Error: err.Error()})
		return err
	}
	sock, cmd, err := startGuestInit(self, group, &pl, f.data)
	self.Close()
	if err != nil {
		_ = l.sendMsg(Message{Type: MsgError, Stage: "guest", Error: err.Error()})
		return err
	}
	bridgeGuest(l, sock, events)
	_ = cmd.Process.Kill() // pid 1 of the sandbox: its namespace dies with it
	_ = cmd.Wait()
	return errors.New("the sandbox's init ended")
}

// loadModules loads the modules listed in GuestModules with the parameters
// the kernel command line gives them (virtio_mmio.device=..., which QEMU's
// microvm machine adds for each device).
func loadModules() error {
	list, err := os.ReadFile(GuestModules)
	if err != nil {
		return err
	}
	cmdline, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		return err
	}
	for _, p := range strings.Fields(string(list)) {
		name := strings.TrimSuffix(filepath.Base(p), ".ko") + "."
		var params []string
		for _, w := range strings.Fields(string(cmdline)) {
			if v, ok := strings.CutPrefix(w, name); ok {
				params = append(params, v)
			}
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		// finit_module(2), Linux 3.8.
		err = unix.FinitModule(int(f.Fd()), strings.Join(params, " "), 0)
		f.Close()
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("load module %s: %w", p, err)
		}
	}
	return nil
}

// findPort opens the link's virtio-serial port once the driver has named it.
func findPort() (*os.File, error) {
	deadline := time.Now().Add(guestPortWait)
	for time.Now().Before(deadline) {
		names, _ := filepath.Glob("/sys/class/virtio-ports/*/name")
		for _, n := range names {
			if b, err := os.ReadFile(n); err == nil && strings.TrimSpace(string(b)) == GuestPort {
				return os.OpenFile("/dev/"+filepath.Base(filepath.Dir(n)), os.O_RDWR, 0)
			}
		}
		time.Sleep(5 * time.Millisecond) // the driver names ports asynchronously; nothing to wait on
	}
	return nil, fmt.Errorf("virtio-serial port %s did not appear in %s", GuestPort, guestPortWait)
}

// switchRoot mounts the host's share as the root and moves into it, as
// switch_root does: the initramfs stays underneath, unreachable.
func switchRoot() error {
	if err := os.MkdirAll(guestNewRoot, 0o755); err != nil {
		return err
	}
	// 9p2000.L over virtio (Documentation/filesystems/9p.rst); the host
	// decides what is writable (read-only binds in the VMM's export).
	// cache=loose: with cache=none every lookup makes a new inode, and
	// Landlock's rules, which hang on inodes, would match none of them
	// (every exec was refused). Writes still go through to the host at
	// each write(2); the bridge syncs before it reports an exit.
	if err := unix.Mount(GuestRootTag, guestNewRoot, "9p", unix.MS_NOSUID, "trans=virtio,version=9p2000.L,msize=262144,cache=loose,access=client"); err != nil {
		return fmt.Errorf("mount the host's share: %w", err)
	}
	if err := unix.Chdir(guestNewRoot); err != nil {
		return err
	}
	if err := unix.Mount(".", "/", "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("move the root: %w", err)
	}
	if err := unix.Chroot("."); err != nil {
		return err
	}
	if err := unix.Chdir("/"); err != nil {
		return err
	}
	if err := unix.Mount("devtmpfs", "/dev", "devtmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /dev: %w", err)
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NOEXEC|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	return nil
}

// guestCgroup makes the sandbox's cgroup in the guest (cgroup v2) with the
// plan's pids and memory limits, and returns it open.
func guestCgroup(pl *spec.Plan) (*os.File, *guestEvents, error) {
	const root = "/sys"
	if err := unix.Mount("cgroup2", root, "cgroup2", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return nil, nil, fmt.Errorf("mount cgroup2: %w", err)
	}
	if err := os.WriteFile(root+"/cgroup.subtree_control", []byte("+pids +memory"), 0); err != nil {
		return nil, nil, fmt.Errorf("enable the pids and memory controllers: %w", err)
	}
	dir := root + "/sandbox"
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, nil, err
	}
	limits := map[string]int64{"pids.max": pl.Limits.Pids, "memory.max": pl.Limits.Memory, "memory.swap.max": 0}
	for file, v := range limits {
		if v <= 0 && file != "memory.swap.max" {
			continue
		}
		err := os.WriteFile(dir+"/"+file, []byte(fmt.Sprint(v)), 0)
		if err != nil && !(file == "memory.swap.max" && errors.Is(err, os.ErrNotExist)) {
			return nil, nil, fmt.Errorf("cgroup %s: %w", file, err)
		}
	}
	f, err := os.Open(dir)
	return f, &guestEvents{dir: dir}, err
}

// guestEvents tells, at each exit, whether the sandbox's cgroup in the
// guest refused a fork or killed for memory since the last look.
type guestEvents struct {
	dir          string
	mu           sync.Mutex
	oom, pidsMax int64 // guarded by mu: the counts already reported
}

// halts returns the MsgHalt messages for what happened since the last call.
func (g *guestEvents) halts() []Message {
	read := func(file, key string) int64 {
		b, err := os.ReadFile(g.dir + "/" + file)
		if err != nil {
			return 0
		}
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, " "); ok && k == key {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
		return 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []Message
	if n := read("memory.events", "oom_kill"); n > g.oom {
		g.oom = n
		out = append(out, Message{Type: MsgHalt, Stage: "max_memory"})
	}
	if n := read("pids.events", "max"); n > g.pidsMax {
		g.pidsMax = n
		out = append(out, Message{Type: MsgHalt, Stage: "max_pids"})
	}
	return out
}

// guestLimitPoll is how often the guest's cgroup counters are read: often
// enough that a blown limit halts the run at once, seldom enough that an
// idle guest under software emulation is not woken 20 times a second.
const guestLimitPoll = 250 * time.Millisecond

// watchGuestLimits tells the host, while the sandbox runs, when its cgroup
// in the guest killed for memory or refused a fork, and the host halts the
// run and ends the VM (as airlock's own cgroup watcher does on the host):
// a child killed for memory does not leave the rest running to max_wall.
func watchGuestLimits(l *link, events *guestEvents, stop <-chan struct{}) {
	t := time.NewTicker(guestLimitPoll)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		for _, h := range events.halts() {
			if l.sendMsg(h) != nil {
				return
			}
		}
	}
}

// startGuestInit starts airlock's init from self in the plan's namespaces
// of the guest kernel, hands it the plan and lets it go. It returns the
// guest end of the init's control socket.
func startGuestInit(self, group *os.File, pl *spec.Plan, raw []byte) (int, *exec.Cmd, error) {
	flags, err := namespace.CloneFlags(pl.Namespaces)
	if err != nil {
		return -1, nil, err
	}
	planR, planW, err := os.Pipe()
	if err != nil {
		return -1, nil, err
	}
	defer planR.Close()
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		planW.Close()
		return -1, nil, err
	}
	child := os.NewFile(uintptr(pair[1]), "control")
	defer child.Close()
	args := []string{Arg0}
	if flags&unix.CLONE_NEWNET != 0 {
		args = append(args, NewNetArg)
	}
	cmd := &exec.Cmd{Path: "/proc/self/fd/5", Args: args, Env: []string{}, ExtraFiles: []*os.File{planR, child, self}, Stdout: os.Stderr, Stderr: os.Stderr,
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: flags,
			// Root of the guest is root inside: the guest kernel is the
			// sandbox's own, and the host's share is served by the VMM
			// as an unprivileged host uid.
			UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}},
			Credential:  &syscall.Credential{Uid: 0, Gid: 0, Groups: []uint32{}, NoSetGroups: true},
			Pdeathsig:   unix.SIGKILL,
			Setsid:      true,
			// In the sandbox's cgroup from its first instruction.
			UseCgroupFD: true,
			CgroupFD:    int(group.Fd()),
		}}
	if err := cmd.Start(); err != nil {
		unix.Close(pair[0])
		planW.Close()
		return -1, nil, fmt.Errorf("start the sandbox's init in the guest: %w", err)
	}
	_, err = planW.Write(raw)
	planW.Close()
	if err == nil {
		err = Send(pair[0], Message{Type: MsgGo})
	}
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		unix.Close(pair[0])
		return -1, nil, fmt.Errorf("hand the plan to the sandbox's init: %w", err)
	}
	return pair[0], cmd, nil
}

// bridgeGuest relays the link and the sandbox init's control socket until
// either ends.
func bridgeGuest(l *link, sock int, events *guestEvents) {
	var mu sync.Mutex
	stdin := map[string]*os.File{} // guarded by mu: exec ID -> the write end of its stdin
	pc := newProxyConns(l)
	defer pc.closeAll()
	stop := make(chan struct{})
	defer close(stop)
	go watchGuestLimits(l, events, stop)
	done := make(chan struct{}, 2)
	go func() { // the init's messages to the host; fds stay in the guest
		defer func() { done <- struct{}{} }()
		for {
			m, fds, err := Recv(sock)
			if err != nil {
				return
			}
			if m.Type == MsgListeners {
				serveGuestListeners(pc, fds) // the proxy's ports, carried to the host
				continue
			}
			closeAll(fds)
			if m.Type == MsgMounts || m.Type == MsgBroker {
				continue // the host's file API has its own roots; no broker without transparent egress
			}
			if m.Type == MsgExit {
				unix.Sync() // what the command wrote reaches the host before the VM may be killed
				for _, h := range events.halts() {
					_ = l.sendMsg(h) // before the exit, so the exec ends halted
				}
			}
			if l.sendMsg(m) != nil {
				return
			}
		}
	}()
	go func() { // the host's frames to the init
		defer func() { done <- struct{}{} }()
		for {
			f, err := l.recv()
			if err != nil {
				return
			}
			switch f.kind {
			case frameCtl:
				m, err := f.msg()
				if err != nil {
					return
				}
				if m.Type == MsgExec {
					if w, err := guestExec(l, sock, m); err == nil {
						mu.Lock()
						stdin[m.ID] = w
						mu.Unlock()
					}
					continue
				}
				if Send(sock, m) != nil {
					return
				}
			case frameConn:
				pc.data(f.id, f.data)
			case frameIn:
				mu.Lock()
				w := stdin[f.id]
				if len(f.data) == 0 {
					delete(stdin, f.id)
				}
				mu.Unlock()
				if w == nil {
					continue
				}
				if len(f.data) == 0 {
					w.Close()
				} else if _, err := w.Write(f.data); err != nil {
					// The command closed its stdin; the rest is dropped.
					continue
				}
			}
		}
	}()
	<-done
}

// guestExec passes an exec to the sandbox's init with pipes for its
// stdin, stdout and stderr, and pumps the output to the link. It returns
// the write end of stdin.
func guestExec(l *link, sock int, m Message) (*os.File, error) {
	fail := func(err error) (*os.File, error) {
		_ = l.sendMsg(Message{Type: MsgExit, ID: m.ID, Code: 125, Error: err.Error()})
		return nil, err
	}
	if m.PTY {
		return fail(errors.New("a terminal (pty) is not available under isolation microvm"))
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		return fail(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return fail(err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		outR.Close()
		outW.Close()
		return fail(err)
	}
	err = Send(sock, m, int(inR.Fd()), int(outW.Fd()), int(errW.Fd()))
	inR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		errR.Close()
		return fail(err)
	}
	go func() { l.pump(frameOut, m.ID, outR); outR.Close() }()
	go func() { l.pump(frameErr, m.ID, errR); errR.Close() }()
	return inW, nil
}
