package seccomp

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/plan"
)

// These tests install the filter in a re-executed child (airtest.RunInChild)
// and probe the real kernel. The test process itself never gets a filter or
// no_new_privs. Each child prints a marker after its checks, so a child that
// was replaced by an unexpectedly successful exec cannot pass.

const probedMarker = "probed"

// requireSeccomp skips unless the kernel has seccomp filters.
func requireSeccomp(t *testing.T) {
	t.Helper()
	if _, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0); err != nil {
		airtest.SkipOrFail(t, "kernel has no seccomp (prctl PR_GET_SECCOMP: %v)", err)
	}
}

// installFilter builds and installs the filter for the host architecture.
// Only children call it.
func installFilter() error {
	runtime.LockOSThread()
	prog, err := Build(plan.DefaultSeccomp(), Options{})
	if err != nil {
		return err
	}
	return Install(prog)
}

// probe is one syscall made under the filter and the errno it must give.
type probe struct {
	name string
	want unix.Errno // 0: the call must succeed
	call func() unix.Errno
}

// runProbes installs the filter in one child, makes every probe's call
// there, and checks each result in its own subtest. One child for the
// whole table keeps the test fast under -race, where each re-exec costs
// about a second.
func runProbes(t *testing.T, probes []probe) {
	t.Helper()
	requireSeccomp(t)
	out := airtest.RunInChild(t, func() error {
		if err := installFilter(); err != nil {
			return err
		}
		for _, p := range probes {
			fmt.Printf("%s %d\n", p.name, p.call())
		}
		fmt.Println(probedMarker)
		return nil
	})
	if !strings.HasSuffix(out, probedMarker+"\n") {
		t.Fatalf("child exited without finishing its probes; stdout %q", out)
	}
	got := make(map[string]unix.Errno)
	for _, line := range strings.Split(out, "\n") {
		var name string
		var errno uintptr
		if n, _ := fmt.Sscanf(line, "%s %d", &name, &errno); n == 2 { // other lines are the marker
			got[name] = unix.Errno(errno)
		}
	}
	for _, p := range probes {
		t.Run(p.name, func(t *testing.T) {
			errno, ok := got[p.name]
			if !ok {
				t.Fatalf("child printed no result for %s", p.name)
			}
			if errno != p.want {
				t.Errorf("%s under the filter: errno %d (%v), want %d (%v)", p.name, errno, errno, p.want, p.want)
			}
		})
	}
}

// sys returns a probe making the raw syscall nr with args.
func sys(nr uintptr, args ...uintptr) func() unix.Errno {
	return func() unix.Errno {
		var a [6]uintptr
		copy(a[:], args)
		_, _, errno := unix.Syscall6(nr, a[0], a[1], a[2], a[3], a[4], a[5])
		return errno
	}
}

// errnoOf returns the errno inside err, 0 for nil, EIO for anything else.
func errnoOf(err error) unix.Errno {
	var errno unix.Errno
	switch {
	case err == nil:
		return 0
	case errors.As(err, &errno):
		return errno
	}
	return unix.EIO
}

// onPtyMaster returns a probe that runs call on a new pseudo-terminal master.
func onPtyMaster(call func(fd int) error) func() unix.Errno {
	return func() unix.Errno {
		fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
		if err != nil {
			return errnoOf(err)
		}
		defer unix.Close(fd)
		return errnoOf(call(fd))
	}
}

// inject pushes a byte into the terminal's input with request req, which
// the kernel reads as TIOCSTI or TIOCLINUX.
func inject(req uint) func() unix.Errno {
	return onPtyMaster(func(fd int) error { return unix.IoctlSetPointerInt(fd, req, 'x') })
}

const (
	atFdcwd = ^uintptr(99) // AT_FDCWD is -100
	badFd   = ^uintptr(0)  // -1
	badPtr  = uintptr(1)   // faults if the kernel ever reads it
)

// TestKernelDenies probes each refused syscall with arguments that would
// fail differently (or succeed harmlessly) if the filter let them through.
func TestKernelDenies(t *testing.T) {
	runProbes(t, []probe{
		{"unshare-newuser", unix.EPERM, sys(unix.SYS_UNSHARE, unix.CLONE_NEWUSER)},
		{"unshare-newns", unix.EPERM, sys(unix.SYS_UNSHARE, unix.CLONE_NEWNS)},
		{"setns", unix.EPERM, sys(unix.SYS_SETNS, badFd, 0)},
		// CLONE_THREAD with CLONE_NEWUSER is EINVAL, so a leak cannot fork.
		{"clone-newuser", unix.EPERM, sys(unix.SYS_CLONE, unix.CLONE_NEWUSER|unix.CLONE_THREAD|unix.CLONE_SIGHAND|unix.CLONE_VM)},
		{"clone3", unix.ENOSYS, sys(unix.SYS_CLONE3, 0, 0)},
		{"io_uring_setup", unix.EPERM, sys(unix.SYS_IO_URING_SETUP, 1, 0)},
		{"io_uring_enter", unix.EPERM, sys(unix.SYS_IO_URING_ENTER, badFd, 0, 0, 0, 0, 0)},
		{"io_uring_register", unix.EPERM, sys(unix.SYS_IO_URING_REGISTER, badFd, 0, 0, 0)},
		{"bpf", unix.EPERM, sys(unix.SYS_BPF, unix.BPF_PROG_LOAD, 0, 0)},
		{"perf_event_open", unix.EPERM, sys(unix.SYS_PERF_EVENT_OPEN, 0, 0, badFd, badFd, 0)},
		{"keyctl", unix.EPERM, sys(unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, ^uintptr(2) /* KEY_SPEC_SESSION_KEYRING, -3 */, 0)},
		{"add_key", unix.EPERM, sys(unix.SYS_ADD_KEY, 0, 0, 0, 0, 0)},
		{"request_key", unix.EPERM, sys(unix.SYS_REQUEST_KEY, 0, 0, 0, 0)},
		{"ptrace-traceme", unix.EPERM, sys(unix.SYS_PTRACE, unix.PTRACE_TRACEME)},
		{"process_vm_readv", unix.EPERM, sys(unix.SYS_PROCESS_VM_READV, uintptr(os.Getpid()), 0, 0, 0, 0, 0)},
		{"process_vm_writev", unix.EPERM, sys(unix.SYS_PROCESS_VM_WRITEV, uintptr(os.Getpid()), 0, 0, 0, 0, 0)},
		{"mount", unix.EPERM, sys(unix.SYS_MOUNT, 0, 0, 0, 0, 0)},
		{"umount2", unix.EPERM, sys(unix.SYS_UMOUNT2, badPtr, 0)},
		{"pivot_root", unix.EPERM, sys(unix.SYS_PIVOT_ROOT, 0, 0)},
		{"chroot", unix.EPERM, func() unix.Errno { return errnoOf(unix.Chroot("/")) }},
		{"fsopen", unix.EPERM, sys(unix.SYS_FSOPEN, 0, 0)},
		{"fsconfig", unix.EPERM, sys(unix.SYS_FSCONFIG, badFd, 0, 0, 0, 0)},
		{"fsmount", unix.EPERM, sys(unix.SYS_FSMOUNT, badFd, 0, 0)},
		{"fspick", unix.EPERM, sys(unix.SYS_FSPICK, badFd, 0, 0)},
		{"move_mount", unix.EPERM, sys(unix.SYS_MOVE_MOUNT, badFd, 0, badFd, 0, 0)},
		{"open_tree", unix.EPERM, sys(unix.SYS_OPEN_TREE, badFd, 0, 0)},
		{"mount_setattr", unix.EPERM, sys(unix.SYS_MOUNT_SETATTR, badFd, 0, 0, 0, 0)},
		{"memfd_create", unix.EPERM, func() unix.Errno { _, err := unix.MemfdCreate("x", 0); return errnoOf(err) }},
		{"memfd_secret", unix.EPERM, sys(unix.SYS_MEMFD_SECRET, 0)},
		// A NULL path is EFAULT if let through.
		{"execveat", unix.EPERM, sys(unix.SYS_EXECVEAT, atFdcwd, 0, 0, 0, 0)},
		{"userfaultfd", unix.EPERM, sys(unix.SYS_USERFAULTFD, 0)},
		{"open_by_handle_at", unix.EPERM, sys(unix.SYS_OPEN_BY_HANDLE_AT, badFd, 0, 0)},
		{"name_to_handle_at", unix.EPERM, sys(unix.SYS_NAME_TO_HANDLE_AT, badFd, 0, 0, 0, 0)},
		// Arguments the kernel refuses: too many segments, bad fd, bad magic.
		{"kexec_load", unix.EPERM, sys(unix.SYS_KEXEC_LOAD, 0, 1<<20, 0, 0)},
		{"init_module", unix.EPERM, sys(unix.SYS_INIT_MODULE, 0, 0, 0)},
		{"finit_module", unix.EPERM, sys(unix.SYS_FINIT_MODULE, badFd, 0, 0)},
		{"delete_module", unix.EPERM, sys(unix.SYS_DELETE_MODULE, 0, 0)},
		{"acct", unix.EPERM, sys(unix.SYS_ACCT, badPtr)},
		{"swapon", unix.EPERM, sys(unix.SYS_SWAPON, 0, 0)},
		{"swapoff", unix.EPERM, sys(unix.SYS_SWAPOFF, 0)},
		{"reboot", unix.EPERM, sys(unix.SYS_REBOOT, 0, 0, 0, 0)},
		{"clock_settime", unix.EPERM, sys(unix.SYS_CLOCK_SETTIME, badFd, 0)},
		{"clock_adjtime", unix.EPERM, sys(unix.SYS_CLOCK_ADJTIME, badFd, 0)},
		{"quotactl", unix.EPERM, sys(unix.SYS_QUOTACTL, 0, 0, 0, 0)},
		{"syslog", unix.EPERM, sys(unix.SYS_SYSLOG, unix.SYSLOG_ACTION_SIZE_BUFFER, 0, 0)},
		{"landlock_create_ruleset", unix.ENOSYS, sys(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)},
		{"personality-no-aslr", unix.EPERM, sys(unix.SYS_PERSONALITY, addrNoRandomize)},
		{"socket-netlink", unix.EPERM, sys(unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW, 0)},
		{"socket-packet", unix.EPERM, sys(unix.SYS_SOCKET, unix.AF_PACKET, unix.SOCK_RAW, 0)},
		{"socket-vsock", unix.EPERM, sys(unix.SYS_SOCKET, unix.AF_VSOCK, unix.SOCK_STREAM, 0)},
		{"socket-inet-mptcp", unix.EPERM, sys(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_MPTCP)},
		{"socket-inet6-mptcp", unix.EPERM, sys(unix.SYS_SOCKET, unix.AF_INET6, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, unix.IPPROTO_MPTCP)},
		{"socket-inet-raw", unix.EPERM, sys(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP)},
		{"socketpair-inet", unix.EPERM, sys(unix.SYS_SOCKETPAIR, unix.AF_INET, unix.SOCK_STREAM, 0, badPtr)},
		{"ioctl-tiocsti", unix.EPERM, inject(unix.TIOCSTI)},
		// The kernel truncates the request to 32 bits; so must the filter.
		{"ioctl-tiocsti-high-bits", unix.EPERM, inject(0xdeadbeef_00000000 | unix.TIOCSTI)},
		{"ioctl-tioclinux", unix.EPERM, inject(unix.TIOCLINUX)},
		{"above-table", unix.ENOSYS, sys(1023)},
	})
}

// TestKernelAllows checks that ordinary calls still work under the filter.
func TestKernelAllows(t *testing.T) {
	closing := func(nr uintptr, args ...uintptr) func() unix.Errno {
		return func() unix.Errno {
			var a [6]uintptr
			copy(a[:], args)
			fd, _, errno := unix.Syscall6(nr, a[0], a[1], a[2], a[3], a[4], a[5])
			if errno == 0 {
				unix.Close(int(fd))
			}
			return errno
		}
	}
	runProbes(t, []probe{
		{"getpid", 0, sys(unix.SYS_GETPID)},
		{"openat", 0, func() unix.Errno {
			f, err := os.Open(os.Args[0])
			if err != nil {
				return unix.EIO
			}
			f.Close()
			return 0
		}},
		{"socket-inet-stream", 0, closing(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)},
		{"socket-inet6-udp", 0, closing(unix.SYS_SOCKET, unix.AF_INET6, unix.SOCK_DGRAM, unix.IPPROTO_UDP)},
		{"socket-unix", 0, closing(unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_SEQPACKET, 0)},
		{"socketpair-unix", 0, func() unix.Errno {
			fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
			if err != nil {
				return errnoOf(err)
			}
			unix.Close(fds[0])
			unix.Close(fds[1])
			return 0
		}},
		{"ioctl-tiocgptn", 0, onPtyMaster(func(fd int) error { _, err := unix.IoctlGetInt(fd, unix.TIOCGPTN); return err })},
		{"ioctl-tcgets", 0, onPtyMaster(func(fd int) error { _, err := unix.IoctlGetTermios(fd, unix.TCGETS); return err })},
		{"personality-query", 0, sys(unix.SYS_PERSONALITY, 0xffffffff)},
	})
}

// TestKernelInstallSyncsThreads starts goroutines locked to other OS
// threads before installing, and checks that TSYNC filtered those threads
// too: unshare(CLONE_NEWUSER) there gets EPERM (an unfiltered thread of a
// threaded process would get EINVAL), no_new_privs is set, and every task
// in /proc/self/task reports seccomp mode 2.
func TestKernelInstallSyncsThreads(t *testing.T) {
	requireSeccomp(t)
	out := airtest.RunInChild(t, func() error {
		runtime.LockOSThread()
		type result struct {
			tid   int
			errno unix.Errno
			nnp   int
		}
		const n = 3
		var asks [n]chan chan result
		ready := make(chan int)
		for i := range asks {
			asks[i] = make(chan chan result)
			go func(ask chan chan result) {
				runtime.LockOSThread() // never unlocked: the thread stays ours
				ready <- unix.Gettid()
				reply := <-ask
				_, _, errno := unix.RawSyscall(unix.SYS_UNSHARE, unix.CLONE_NEWUSER, 0, 0)
				nnp, _ := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) // -1 on error fails the check below
				reply <- result{unix.Gettid(), errno, nnp}
			}(asks[i])
		}
		for range n {
			if tid := <-ready; tid == unix.Gettid() {
				return fmt.Errorf("goroutine runs on the installing thread %d", tid)
			}
		}
		if err := installFilter(); err != nil {
			return err
		}
		for _, ask := range asks {
			reply := make(chan result)
			ask <- reply
			r := <-reply
			if r.errno != unix.EPERM || r.nnp != 1 {
				return fmt.Errorf("thread %d: unshare errno %v, no_new_privs %d; want EPERM and 1", r.tid, r.errno, r.nnp)
			}
		}
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return err
		}
		for _, task := range tasks {
			status, err := os.ReadFile("/proc/self/task/" + task.Name() + "/status")
			if errors.Is(err, fs.ErrNotExist) {
				continue // the thread has exited since ReadDir
			}
			if err != nil {
				return err
			}
			if !strings.Contains(string(status), "\nSeccomp:\t2\n") {
				return fmt.Errorf("thread %s is not in seccomp filter mode:\n%s", task.Name(), status)
			}
		}
		fmt.Printf("%s %d threads\n", probedMarker, len(tasks))
		return nil
	})
	if !strings.Contains(out, probedMarker) {
		t.Fatalf("child exited without probing; stdout %q", out)
	}
}

// TestKernelInstallRefusesInvalid checks that Install validates before it
// touches the process: no_new_privs stays unset.
func TestKernelInstallRefusesInvalid(t *testing.T) {
	out := airtest.RunInChild(t, func() error {
		runtime.LockOSThread()
		if err := Install(nil); err == nil {
			return errors.New("Install(nil) = nil error, want an error")
		}
		if nnp, err := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0); err != nil || nnp != 0 {
			return fmt.Errorf("after a refused Install, no_new_privs = %d (%v), want 0", nnp, err)
		}
		fmt.Println(probedMarker)
		return nil
	})
	if !strings.Contains(out, probedMarker) {
		t.Fatalf("child exited without probing; stdout %q", out)
	}
}

// x32ProbeEnv makes TestKernelKillsX32 act as the filtered grandchild.
const x32ProbeEnv = "AIRLOCK_SECCOMP_X32_PROBE"

// TestKernelKillsX32 checks that an x32 syscall kills the process. The
// child installs the filter and runs this test again as a grandchild,
// which inherits the filter, turns off core dumps and makes the call.
func TestKernelKillsX32(t *testing.T) {
	if os.Getenv(x32ProbeEnv) == "1" {
		if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
			fmt.Printf("prctl: %v\n", err)
			os.Exit(4)
		}
		_, _, errno := unix.RawSyscall(x32SyscallBit|unix.SYS_GETPID, 0, 0, 0)
		fmt.Printf("survived the x32 call: errno %v\n", errno)
		os.Exit(0)
	}
	if runtime.GOARCH != "amd64" {
		t.Skip("x32 exists only on amd64")
	}
	requireSeccomp(t)
	out := airtest.RunInChild(t, func() error {
		if err := installFilter(); err != nil {
			return err
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestKernelKillsX32$", "-test.count=1")
		cmd.Env = append(os.Environ(), x32ProbeEnv+"=1")
		got, err := cmd.Output()
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			return fmt.Errorf("grandchild: %v, stdout %q; want death by SIGSYS", err, got)
		}
		if ws := ee.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGSYS {
			return fmt.Errorf("grandchild ended with %v, stdout %q; want death by SIGSYS", ee, got)
		}
		fmt.Println(probedMarker)
		return nil
	})
	if !strings.Contains(out, probedMarker) {
		t.Fatalf("child exited without probing; stdout %q", out)
	}
}

// pythonScript exercises what the filter must keep working: threads, a
// subprocess (glibc's posix_spawn tries clone3, gets ENOSYS and falls back
// to clone), a shell, and clean PermissionErrors for refused calls.
const pythonScript = `
import os, socket, subprocess, threading
out = []
ts = [threading.Thread(target=out.append, args=(i,)) for i in range(8)]
for t in ts: t.start()
for t in ts: t.join()
assert sorted(out) == list(range(8)), out
subprocess.run(['/bin/true'], check=True)
r = subprocess.run(['/bin/sh', '-c', 'echo hi'], capture_output=True, check=True)
assert r.stdout == b'hi\n', r.stdout
for what, call in [('memfd_create', lambda: os.memfd_create('x')),
                   ('netlink socket', lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW))]:
    try:
        call()
    except PermissionError:
        pass
    else:
        raise SystemExit(what + ' was allowed')
print('ok')
`

// TestKernelRunsPython execs python3 under the filter.
func TestKernelRunsPython(t *testing.T) {
	requireSeccomp(t)
	airtest.RequireBinary(t, "/usr/bin/python3")
	out := airtest.RunInChild(t, func() error {
		if err := installFilter(); err != nil {
			return err
		}
		return unix.Exec("/usr/bin/python3", []string{"python3", "-c", pythonScript}, os.Environ())
	})
	if strings.TrimSpace(out) != "ok" {
		t.Fatalf("python3 under the filter printed %q, want \"ok\"", out)
	}
}
