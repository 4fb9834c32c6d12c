package nsinit

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/enforce/landlock"
	"github.com/airlock-sandbox/airlock/internal/enforce/seccomp"
	"github.com/airlock-sandbox/airlock/plan/spec"
)

// The init without namespaces (plan.NoNamespaces) runs in the host's
// namespaces, as the caller. Nothing is mounted: Landlock confines the
// host's filesystem to the plan's rules, and the seccomp filter sends
// connect(2) and the metadata calls (chmod, chown, utimes, xattrs) to the
// supervisor (the "broker" message carries the listener). Commands never
// run as root: when the caller is root, the jail thread takes the plan's
// uid and gid (IDMap.HostUID, HostGID) before it drops every capability.
// It differs from the namespace init in three ways:
//
//   - The init itself is not restricted. Every restriction is applied once
//     on a jail thread, and every command is forked from it, so commands
//     live in a Landlock domain the init is outside of: with its signal
//     scope (ABI 6), nothing the command runs can signal, trace or read
//     the init, which is what keeps its process tree bounded.
//   - The init is a child subreaper: whatever a command double-forks or
//     daemonizes is reparented to it, never to the host's init.
//   - The init kills its whole tree when the supervisor asks (SIGTERM),
//     when the control socket closes, and before it exits. There is no
//     pid namespace to do it.

// MsgBroker carries the seccomp listener of the jail thread's filter: the
// supervisor answers every connect(2) of the sandbox on it.
const MsgBroker Kind = "broker"

// jail is the restricted thread commands are forked from.
type jail struct {
	run chan func()
}

// do runs f on the jail thread and waits for it.
func (j *jail) do(f func()) {
	done := make(chan struct{})
	j.run <- func() { f(); close(done) }
	<-done
}

// setupUnshared is setupAndRun without namespaces.
func setupUnshared(pl *spec.Plan) (int, error) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return 0, fail("subreaper", err)
	}
	// Not dumpable: nothing of the caller's uid reads this init's memory.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return 0, fail("dumpable", err)
	}
	var grants []int
	for _, m := range pl.Mounts {
		if !m.Grant() {
			continue
		}
		fd, err := unix.Open(m.Target, unix.O_PATH|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
		if err != nil {
			closeAll(grants)
			return 0, fail("grants", fmt.Errorf("open grant %s: %w", m.Target, err))
		}
		grants = append(grants, fd)
	}
	err := Send(ControlFD, Message{Type: MsgMounts}, grants...)
	closeAll(grants)
	if err != nil {
		return 0, fail("report mounts", err)
	}
	if err := nprocForUID(pl); err != nil {
		return 0, fail("rlimits", err)
	}
	j, abi, listener, err := startJail(pl)
	if err != nil {
		return 0, err
	}
	err = Send(ControlFD, Message{Type: MsgBroker}, listener)
	unix.Close(listener)
	if err != nil {
		return 0, fail("report broker", err)
	}
	if err := Send(ControlFD, Message{Type: MsgReady, Landlock: abi}); err != nil {
		return 0, fail("report ready", err)
	}
	return serveOn(pl, j.do, true)
}

// startJail starts the jail thread and applies every restriction on it:
// Landlock, rlimits, capabilities, no_new_privs and seccomp with a
// listener. It returns the Landlock ABI and the listener.
func startJail(pl *spec.Plan) (*jail, int, int, error) {
	j := &jail{run: make(chan func())}
	type result struct {
		abi, listener int
		err           error
	}
	res := make(chan result, 1)
	go func() {
		// Locked for good: the thread carries the restrictions and exits
		// with the goroutine, never to run other Go code.
		runtime.LockOSThread()
		abi, listener, err := restrictJail(pl)
		res <- result{abi, listener, err}
		if err != nil {
			return
		}
		for f := range j.run {
			f()
		}
	}()
	r := <-res
	return j, r.abi, r.listener, r.err
}

func restrictJail(pl *spec.Plan) (int, int, error) {
	cfg := landlock.Config{
		// No TCP connect or bind at all: the supervisor makes every
		// connection (seccomp user notification) and hands it back.
		RestrictBind:      true,
		ScopeSignals:      true,
		ScopeAbstractUnix: true,
		LogNewExec:        true,
		MinABI:            spec.NoNamespacesMinLandlock,
		ThreadOnly:        true,
	}
	cfg.Paths = landlockPaths(pl)
	st, err := landlock.Restrict(cfg)
	if err != nil {
		return 0, -1, fail("landlock", fmt.Errorf("%w: without namespaces, Landlock ABI %d or later is what confines the sandbox (files, TCP, signals): nothing was started", err, spec.NoNamespacesMinLandlock))
	}
	if err := applyRlimits(pl.Rlimits); err != nil {
		return 0, -1, fail("rlimits", err)
	}
	if len(pl.Capabilities) != 0 {
		return 0, -1, fail("capabilities", fmt.Errorf("airlock bug: the plan keeps capabilities %v", pl.Capabilities))
	}
	if err := takeIdentity(pl); err != nil {
		return 0, -1, fail("identity", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return 0, -1, fail("no_new_privs", err)
	}
	drop := dropCapabilities
	if !effectiveCap(unix.CAP_SETPCAP) {
		// The caller's own uid, without privileges: the bounding set and
		// securebits need CAP_SETPCAP to change, and with no_new_privs
		// (set above) execve can grant nothing from them anyway.
		drop = dropHeldCapabilities
	}
	if err := drop(); err != nil {
		return 0, -1, fail("capabilities", err)
	}
	prog, err := seccomp.Build(pl.Seccomp, seccomp.Options{})
	if err != nil {
		return 0, -1, fail("seccomp", err)
	}
	listener, err := seccomp.InstallListener(prog)
	if err != nil {
		return 0, -1, fail("seccomp", err)
	}
	return st.ABI, listener, nil
}

// nprocForUID raises a plan's RLIMIT_NPROC by what the sandbox's uid runs
// already: without a user namespace the kernel counts every process of
// the uid, not the sandbox's.
func nprocForUID(pl *spec.Plan) error {
	uid := os.Getuid()
	if uid == 0 {
		uid = int(pl.IDMap.HostUID)
	}
	if uid == 0 {
		return errNoIdentity
	}
	for i, r := range pl.Rlimits {
		if r.Resource != "nproc" {
			continue
		}
		n, err := tasksOf(uid)
		if err != nil {
			return fmt.Errorf("count the processes of uid %d for RLIMIT_NPROC: %w", uid, err)
		}
		pl.Rlimits[i].Value += uint64(n)
		pl.Rlimits[i].Hard += uint64(n)
	}
	return nil
}

// errNoIdentity refuses a plan that would run the sandbox as root.
var errNoIdentity = errors.New("airlock bug: the plan names no uid and gid to run the sandbox as, and the landlock backend never runs it as root")

// takeIdentity gives the jail thread, which the caller has locked for
// good, the plan's uid and gid (IDMap.HostUID, HostGID) and no
// supplementary groups when the init runs as root; as anyone else the
// thread keeps the caller's ids, which the plan must name or leave zero.
// The ids change on this thread alone (raw syscalls; Go's syscall.Setuid
// would change every thread's), so the init itself stays root, outside
// the sandbox. The thread's permitted capabilities are kept across the
// change (PR_SET_KEEPCAPS) and raised again, so that the capability drop
// that follows can still empty the bounding set; it then empties every
// set.
func takeIdentity(pl *spec.Plan) error {
	uid, gid := int(pl.IDMap.HostUID), int(pl.IDMap.HostGID)
	if os.Geteuid() != 0 {
		if (uid != 0 && uid != os.Getuid()) || (gid != 0 && gid != os.Getgid()) {
			return fmt.Errorf("airlock bug: the plan runs the sandbox as %d:%d, and the init, not being root, can run it only as the caller (%d:%d)", uid, gid, os.Getuid(), os.Getgid())
		}
		return nil
	}
	if uid == 0 || gid == 0 {
		return errNoIdentity
	}
	if err := unix.Prctl(unix.PR_SET_KEEPCAPS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("keep capabilities across the change of uid: %w", err)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0); e != 0 {
		return fmt.Errorf("drop supplementary groups: %w", e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(gid), uintptr(gid), uintptr(gid)); e != 0 {
		return fmt.Errorf("take gid %d: %w", gid, e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(uid), uintptr(uid), uintptr(uid)); e != 0 {
		return fmt.Errorf("take uid %d: %w", uid, e)
	}
	if err := unix.Prctl(unix.PR_SET_KEEPCAPS, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("stop keeping capabilities: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("read capabilities: %w", err)
	}
	for i := range data {
		data[i].Effective = data[i].Permitted
	}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("raise capabilities to drop them: %w", err)
	}
	if got := unix.Getuid(); got != uid {
		return fmt.Errorf("the jail thread runs as uid %d after taking uid %d", got, uid)
	}
	return nil
}

// tasksOf counts the threads of uid (RLIMIT_NPROC counts threads).
func tasksOf(uid int) (int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	n := 0
	want := "Uid:\t" + strconv.Itoa(uid) + "\t"
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue // gone
		}
		s := string(b)
		if !strings.Contains(s, "\n"+want) {
			continue
		}
		if _, rest, ok := strings.Cut(s, "\nThreads:\t"); ok {
			v, _, _ := strings.Cut(rest, "\n")
			t, _ := strconv.Atoi(v)
			n += max(t, 1)
		}
	}
	return n, nil
}

// killTree SIGKILLs every descendant of the init until none is left, or
// until the bound: as the init is a subreaper, a descendant whose parent
// dies becomes its child, so each round finds what the last one orphaned.
func killTree(bound time.Duration) {
	end := time.Now().Add(bound)
	for time.Now().Before(end) {
		pids := descendants(os.Getpid())
		if len(pids) == 0 {
			return
		}
		for _, p := range pids {
			_ = unix.Kill(p, unix.SIGKILL) // gone is fine
		}
		time.Sleep(time.Millisecond) // let the reaper collect them
	}
}

// descendants lists pid's descendants, breadth first, from
// /proc/<pid>/task/<tid>/children (CONFIG_PROC_CHILDREN). A zombie not yet
// reaped is listed too; killing it again is harmless.
func descendants(pid int) []int {
	var out []int
	queue := []int{pid}
	seen := map[int]bool{pid: true}
	for len(queue) > 0 && len(out) < 1<<16 {
		p := queue[0]
		queue = queue[1:]
		tasks, err := os.ReadDir("/proc/" + strconv.Itoa(p) + "/task")
		if err != nil {
			continue
		}
		for _, t := range tasks {
			b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/task/" + t.Name() + "/children")
			if err != nil {
				continue
			}
			for _, f := range strings.Fields(string(b)) {
				c, err := strconv.Atoi(f)
				if err != nil || seen[c] {
					continue
				}
				seen[c] = true
				out = append(out, c)
				queue = append(queue, c)
			}
		}
	}
	return out
}

// errNoChildrenFile says the kernel cannot list a process's children.
var errNoChildrenFile = errors.New("/proc/<pid>/task/<tid>/children is missing (CONFIG_PROC_CHILDREN): the init could not find and kill what the sandbox leaves running")

// checkChildrenFile fails when killTree cannot work on this kernel.
func checkChildrenFile() error {
	self := strconv.Itoa(os.Getpid())
	if _, err := os.Stat("/proc/" + self + "/task/" + self + "/children"); err != nil {
		return errNoChildrenFile
	}
	return nil
}

// effectiveCap reports whether the calling thread has capability c in its
// effective set.
func effectiveCap(c int) bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	return data[c/32].Effective&(1<<(uint(c)%32)) != 0
}
