package sandbox_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// A syscallProbe is one raw system call that the seccomp filter must refuse,
// in the spec format of testdata/probe ("name:number:arg,..."): the Go probe
// and the Python runner both execute the same specs.
//
// The arguments are chosen so that a kernel that is reached answers
// something other than a refusal whenever it can (EBADF for fd -1, EFAULT for
// a nil pointer, EINVAL for unknown flags, or success for calls that are
// harmless), so that EPERM inside the sandbox is the filter's answer and not
// the kernel's. distinct marks the probes for which that holds on the host
// for any caller; for the others the host kernel itself may refuse an
// unprivileged caller (capability checks come first), and the control run
// only logs its answer. None can do harm if it went through: flags are
// invalid, pointers nil and fds -1, and the calls that would succeed only
// make an fd or change the probing process itself.
type syscallProbe struct {
	name     string
	nr       uintptr
	args     string
	distinct bool
	// sandboxOnly keeps a probe out of the host control run, where success
	// would disturb the test process (PTRACE_TRACEME makes the test binary
	// the tracer). It also runs last: it would change how the caller is
	// treated afterwards.
	sandboxOnly bool
}

func (p syscallProbe) spec() string { return fmt.Sprintf("%s:%d:%s", p.name, p.nr, p.args) }

const (
	ptraceTraceme   = 0
	ptraceAttach    = 16
	cloneNewuser    = 0x10000000
	cloneNewns      = 0x00020000
	cloneNewnet     = 0x40000000
	cloneThread     = 0x00010000
	cloneFS         = 0x00000200
	uffdUserOnly    = 1
	oCloexec        = 0x80000
	afNetlink       = 16
	afPacket        = 17
	afInet          = 2
	afInet6         = 10
	afVsock         = 40
	sockStream      = 1
	sockDgram       = 2
	sockRaw         = 3
	ipprotoICMP     = 1
	ipprotoICMPV6   = 58
	ipprotoSCTP     = 132
	ipprotoMPTCP    = 262
	readImpliesExec = 0x0400000
	addrNoRandomize = 0x0040000
	tiocsti         = 0x5412
	tioclinux       = 0x541C
	tiocsctty       = 0x540E
	atEmptyPath     = 0x1000
	atFDCWD         = -100
)

// deniedSyscalls is every call the README and the seccomp package doc say is
// refused, with arguments that cannot do harm.
var deniedSyscalls = []syscallProbe{
	{name: "io_uring_setup", nr: unix.SYS_IO_URING_SETUP, args: "1,buf"},
	{name: "io_uring_enter", nr: unix.SYS_IO_URING_ENTER, args: "-1,0,0,0,0,0", distinct: true},
	{name: "io_uring_register", nr: unix.SYS_IO_URING_REGISTER, args: "-1,0,0,0", distinct: true},
	{name: "userfaultfd", nr: unix.SYS_USERFAULTFD, args: fmt.Sprint(uffdUserOnly | oCloexec), distinct: true},
	{name: "bpf", nr: unix.SYS_BPF, args: "1000,0,0"},
	{name: "perf_event_open", nr: unix.SYS_PERF_EVENT_OPEN, args: "buf,0,-1,-1,0xffffffff", distinct: true},
	{name: "keyctl", nr: unix.SYS_KEYCTL, args: "0x7fffffff,0,0,0,0", distinct: true},
	{name: "add_key", nr: unix.SYS_ADD_KEY, args: "0,0,0,0,-2", distinct: true},
	{name: "request_key", nr: unix.SYS_REQUEST_KEY, args: "0,0,0,0", distinct: true},
	{name: "kexec_load", nr: unix.SYS_KEXEC_LOAD, args: "0,0,0,0xffffffff"},
	{name: "init_module", nr: unix.SYS_INIT_MODULE, args: "0,0,0"},
	{name: "finit_module", nr: unix.SYS_FINIT_MODULE, args: "-1,0,0xffffffff"},
	{name: "delete_module", nr: unix.SYS_DELETE_MODULE, args: "0,0"},
	{name: "mount", nr: unix.SYS_MOUNT, args: "0,0,0,0,0", distinct: true},
	{name: "umount2", nr: unix.SYS_UMOUNT2, args: "0,0xffff", distinct: true},
	{name: "pivot_root", nr: unix.SYS_PIVOT_ROOT, args: "0,0"},
	{name: "chroot", nr: unix.SYS_CHROOT, args: "0", distinct: true},
	{name: "fsopen", nr: unix.SYS_FSOPEN, args: "0,0xffffffff"},
	{name: "fsmount", nr: unix.SYS_FSMOUNT, args: "-1,0xffffffff,0"},
	{name: "fspick", nr: unix.SYS_FSPICK, args: "-1,0,0xffffffff"},
	{name: "open_tree", nr: unix.SYS_OPEN_TREE, args: "-1,0,0xffffffff", distinct: true},
	{name: "move_mount", nr: unix.SYS_MOVE_MOUNT, args: "-1,0,-1,0,0xffffffff"},
	{name: "mount_setattr", nr: unix.SYS_MOUNT_SETATTR, args: "-1,0,0xffffffff,0,0", distinct: true},
	// A multi-threaded Go process gets EINVAL from a reached kernel; the
	// single-threaded Python one would get a new user namespace.
	{name: "unshare-newuser", nr: unix.SYS_UNSHARE, args: fmt.Sprint(cloneNewuser), distinct: true},
	{name: "unshare-newnet", nr: unix.SYS_UNSHARE, args: fmt.Sprint(cloneNewnet)},
	{name: "setns", nr: unix.SYS_SETNS, args: "-1,0", distinct: true},
	// CLONE_THREAD without CLONE_SIGHAND, and CLONE_NEWNS with CLONE_FS, are
	// EINVAL in the kernel before anything is created: no child can appear.
	{name: "clone-newuser", nr: unix.SYS_CLONE, args: fmt.Sprintf("%d,0,0,0,0", cloneNewuser|cloneThread), distinct: true},
	{name: "clone-newns", nr: unix.SYS_CLONE, args: fmt.Sprintf("%d,0,0,0,0", cloneNewns|cloneFS), distinct: true},
	{name: "clone3", nr: unix.SYS_CLONE3, args: "0,0", distinct: true},
	{name: "ptrace-attach", nr: unix.SYS_PTRACE, args: fmt.Sprintf("%d,0,0,0", ptraceAttach), distinct: true},
	{name: "process_vm_readv", nr: unix.SYS_PROCESS_VM_READV, args: "pid,0,0,0,0,0", distinct: true},
	{name: "process_vm_writev", nr: unix.SYS_PROCESS_VM_WRITEV, args: "pid,0,0,0,0,0", distinct: true},
	{name: "open_by_handle_at", nr: unix.SYS_OPEN_BY_HANDLE_AT, args: "-1,0,0"},
	{name: "name_to_handle_at", nr: unix.SYS_NAME_TO_HANDLE_AT, args: fmt.Sprintf("%d,str=/,0,0,0", atFDCWD), distinct: true},
	{name: "personality-read-implies-exec", nr: unix.SYS_PERSONALITY, args: fmt.Sprint(readImpliesExec), distinct: true},
	{name: "personality-addr-no-randomize", nr: unix.SYS_PERSONALITY, args: fmt.Sprint(addrNoRandomize), distinct: true},
	{name: "memfd_create", nr: unix.SYS_MEMFD_CREATE, args: "str=x,1", distinct: true},
	{name: "execveat", nr: unix.SYS_EXECVEAT, args: fmt.Sprintf("-1,str=,0,0,%d", atEmptyPath), distinct: true},
	{name: "socket-netlink", nr: unix.SYS_SOCKET, args: fmt.Sprintf("%d,%d,0", afNetlink, sockRaw), distinct: true},
	{name: "socket-packet", nr: unix.SYS_SOCKET, args: fmt.Sprintf("%d,%d,0", afPacket, sockRaw)},
	{name: "socket-inet-raw-icmp", nr: unix.SYS_SOCKET, args: fmt.Sprintf("%d,%d,%d", afInet, sockRaw, ipprotoICMP)},
	{name: "socket-inet6-raw-icmpv6", nr: unix.SYS_SOCKET, args: fmt.Sprintf("%d,%d,%d", afInet6, sockRaw, ipprotoICMPV6)},
	{name: "socket-inet-ping", nr: unix.SYS_SOCKET, args: fmt.Sprintf("%d,%d,%d", afInet, sockDgram, ipprotoICMP)},
	{name: "socket-inet-mptcp", nr: unix.SYS_SOCKET, args: fmt.Sprintf("%d,%d,%d", afInet, sockStream, ipprotoMPTCP), distinct: true},
	{name: "socket-inet-sctp", nr: unix.SYS_SOCKET, args: fmt.Sprintf("%d,%d,%d", afInet, sockStream, ipprotoSCTP), distinct: true},
	{name: "socket-vsock", nr: unix.SYS_SOCKET, args: fmt.Sprintf("%d,%d,0", afVsock, sockStream)},
	{name: "socketpair-inet", nr: unix.SYS_SOCKETPAIR, args: fmt.Sprintf("%d,%d,0,buf", afInet, sockStream), distinct: true},
	// Stdin is /dev/null here: a reached kernel answers ENOTTY. The pty
	// test below aims the same ioctls at a real terminal.
	{name: "ioctl-tiocsti", nr: unix.SYS_IOCTL, args: fmt.Sprintf("0,%d,str=x", tiocsti), distinct: true},
	{name: "ioctl-tiocsti-high-bits", nr: unix.SYS_IOCTL, args: fmt.Sprintf("0,%#x,str=x", uint64(1)<<32|tiocsti), distinct: true},
	{name: "ioctl-tioclinux", nr: unix.SYS_IOCTL, args: fmt.Sprintf("0,%d,buf", tioclinux), distinct: true},
	{name: "ptrace-traceme", nr: unix.SYS_PTRACE, args: fmt.Sprint(ptraceTraceme), sandboxOnly: true},
}

// refused is what a refusal looks like: the filter's EPERM and ENOSYS, and
// the EACCES and EAFNOSUPPORT that other layers answer with.
func refused(e syscall.Errno) bool {
	return e == unix.EPERM || e == unix.ENOSYS || e == unix.EACCES || e == unix.EAFNOSUPPORT
}

func errnoName(e syscall.Errno) string {
	if e == 0 {
		return "success"
	}
	if n := unix.ErrnoName(e); n != "" {
		return n
	}
	return strconv.Itoa(int(e))
}

// pythonRunner executes the same specs as testdata/probe, through libc's
// syscall(2) wrapper, and prints the same lines.
const pythonRunner = `
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
keep = []
def arg(tok):
    if tok == "buf":
        b = ctypes.create_string_buffer(4096); keep.append(b); return ctypes.cast(b, ctypes.c_void_p)
    if tok.startswith("str="):
        b = ctypes.create_string_buffer(tok[4:].encode()); keep.append(b); return ctypes.cast(b, ctypes.c_void_p)
    if tok == "pid":
        return ctypes.c_long(os.getpid())
    return ctypes.c_long(int(tok, 0))
for spec in SPECS:
    name, nr, rest = spec.split(":", 2)
    args = [arg(a) for a in rest.split(",")] if rest else []
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(int(nr)), *args)
    print(name, ctypes.get_errno() if r == -1 else 0, flush=True)
`

func pythonProbe(specs []string) string {
	b, err := json.Marshal(specs) // a JSON list of strings is a Python list literal
	if err != nil {
		panic(err)
	}
	return "SPECS = " + string(b) + "\n" + pythonRunner
}

// parseProbeOutput reads "name errno" lines and fails unless every wanted
// name is there exactly once.
func parseProbeOutput(t *testing.T, out string, want []string) map[string]syscall.Errno {
	t.Helper()
	got := map[string]syscall.Errno{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 {
			t.Fatalf("probe output line %q: want \"name errno\"\nall output:\n%s", sc.Text(), out)
		}
		n, err := strconv.Atoi(f[1])
		if err != nil {
			t.Fatalf("probe output line %q: %v", sc.Text(), err)
		}
		if _, dup := got[f[0]]; dup {
			t.Fatalf("probe %s reported twice:\n%s", f[0], out)
		}
		got[f[0]] = syscall.Errno(n)
	}
	for _, name := range want {
		if _, ok := got[name]; !ok {
			t.Fatalf("probe %s printed nothing (did an earlier probe kill or stop the program?)\noutput:\n%s", name, out)
		}
	}
	return got
}

// buildProbe compiles testdata/probe statically into a fresh directory,
// which the caller grants with fs_read.
func buildProbe(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	// As root the sandbox runs as a random unprivileged host uid, which must
	// be able to reach the command: t.TempDir makes 0700 directories.
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "probe")
	goBuild(t, "./testdata/probe", bin)
	return bin
}

func probeSpecs(sandboxed bool) (specs, names []string) {
	for _, p := range deniedSyscalls {
		if p.sandboxOnly && !sandboxed {
			continue
		}
		specs = append(specs, p.spec())
		names = append(names, p.name)
	}
	return specs, names
}

// TestProbeDeniedSyscalls runs every denied call inside airlock run, from a
// static Go binary and from Python, and wants each refused. A control run of
// the same binary on the host shows that the arguments reach the kernel when
// nothing filters them, so a refusal inside is the sandbox's doing.
func TestProbeDeniedSyscalls(t *testing.T) {
	requireSandbox(t)
	bin := buildProbe(t)
	hostSpecs, hostNames := probeSpecs(false)
	specs, names := probeSpecs(true)

	t.Run("host-control", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, hostSpecs...) // stdin is /dev/null
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s on the host: %v\n%s", bin, err, out)
		}
		got := parseProbeOutput(t, string(out), hostNames)
		for _, p := range deniedSyscalls {
			if p.sandboxOnly {
				continue
			}
			e := got[p.name]
			switch {
			case p.distinct && refused(e):
				t.Errorf("host control: %s = %s, want an answer other than a refusal: the probe's arguments do not reach the kernel, so a refusal inside proves nothing", p.name, errnoName(e))
			case refused(e):
				t.Logf("host control: %s = %s: the host kernel refuses this caller too, so inside the sandbox the refusal may come from either layer", p.name, errnoName(e))
			}
		}
	})

	check := func(t *testing.T, rep *sandbox.Report) {
		t.Helper()
		wantExit(t, rep, 0)
		got := parseProbeOutput(t, rep.Stdout, names)
		tally := map[string]int{}
		for _, p := range deniedSyscalls {
			t.Run(p.name, func(t *testing.T) {
				e := got[p.name]
				tally[errnoName(e)]++
				if !refused(e) {
					t.Errorf("%s inside the sandbox = %s, want it refused (EPERM, ENOSYS, EACCES or EAFNOSUPPORT)", p.spec(), errnoName(e))
				}
			})
		}
		t.Logf("answers inside the sandbox: %v", tally)
	}
	t.Run("go-static", func(t *testing.T) {
		rep := run(t, policy.Spec{FSRead: []string{filepath.Dir(bin)}}, append([]string{bin}, specs...)...)
		check(t, rep)
	})
	t.Run("python", func(t *testing.T) {
		check(t, py(t, policy.Spec{}, pythonProbe(specs)))
	})
}

// openPty opens a pseudo-terminal pair with echo and canonical mode on, as
// an interactive shell's terminal would be.
func openPty(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		airtest.SkipOrFail(t, "no pseudo-terminals: open /dev/ptmx: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	rc, err := m.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	var ioErr error
	if err := rc.Control(func(fd uintptr) {
		if ioErr = unix.IoctlSetPointerInt(int(fd), unix.TIOCSPTLCK, 0); ioErr != nil {
			return
		}
		n, ioErr = unix.IoctlGetInt(int(fd), unix.TIOCGPTN)
	}); err != nil || ioErr != nil {
		t.Fatalf("unlock pty: %v %v", err, ioErr)
	}
	s, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open pty slave: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	tio, err := unix.IoctlGetTermios(int(s.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatalf("TCGETS: %v", err)
	}
	tio.Lflag |= unix.ECHO | unix.ICANON
	if err := unix.IoctlSetTermios(int(s.Fd()), unix.TCSETS, tio); err != nil {
		t.Fatalf("TCSETS: %v", err)
	}
	return m, s
}

// readUntil reads the pty master until want appears, the read fails (the
// slave side hung up) or the deadline passes, and returns everything read.
// It does not touch t: it runs on its own goroutine.
func readUntil(m *os.File, want string, d time.Duration) (string, error) {
	if err := m.SetReadDeadline(time.Now().Add(d)); err != nil {
		return "", fmt.Errorf("pty master is not pollable: %w", err)
	}
	defer m.SetReadDeadline(time.Time{})
	var got []byte
	buf := make([]byte, 4096)
	for !strings.Contains(string(got), want) {
		n, err := m.Read(buf)
		got = append(got, buf[:n]...)
		if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, io.EOF) || errors.Is(err, unix.EIO) {
			break
		}
		if err != nil {
			return string(got), fmt.Errorf("read pty master: %w", err)
		}
	}
	return string(got), nil
}

// TestProbeTIOCSTI gives the sandbox a real terminal as stdin. The command
// makes it its controlling terminal (it is a session leader), so only the
// seccomp filter stands between it and typing into the terminal; then it
// tries TIOCSTI, with and without garbage in the high half of the request.
// Injected bytes would be echoed to the master before the command's own
// "DONE" write; the command then blocks reading the terminal until the test
// answers with a newline, so its exit (which hangs the terminal up and
// flushes it) cannot race the read.
func TestProbeTIOCSTI(t *testing.T) {
	requireSandbox(t)
	bin := buildProbe(t)
	write := func(name, s string) string {
		return fmt.Sprintf("%s:%d:0,str=%s,%d", name, unix.SYS_WRITE, s, len(s))
	}
	inject := func(name, payload string, high bool) []string {
		var out []string
		req := uint64(tiocsti)
		if high {
			req |= 1 << 32
		}
		for i, c := range payload {
			out = append(out, fmt.Sprintf("%s-%d:%d:0,%#x,str=%c", name, i, unix.SYS_IOCTL, req, c))
		}
		return out
	}
	specs := []string{
		write("alive", "ALIVE"),
		fmt.Sprintf("tiocsctty:%d:0,%d,0", unix.SYS_IOCTL, tiocsctty),
	}
	specs = append(specs, inject("tiocsti", "QZ", false)...)
	specs = append(specs, inject("tiocsti-high", "QZ", true)...)
	specs = append(specs, write("done", "DONE"), fmt.Sprintf("wait:%d:0,buf,1", unix.SYS_READ))
	var names []string
	for _, s := range specs {
		names = append(names, strings.SplitN(s, ":", 2)[0])
	}

	t.Run("host-control", func(t *testing.T) {
		// Root may inject into any terminal: this shows that injected
		// bytes do come back on the master, so the check below can see
		// them.
		airtest.RequireRoot(t)
		m, s := openPty(t)
		c := byte('Q')
		if _, _, errno := unix.Syscall(unix.SYS_IOCTL, s.Fd(), tiocsti, uintptr(unsafe.Pointer(&c))); errno != 0 {
			t.Fatalf("TIOCSTI as root on the host: %v", errno)
		}
		got, err := readUntil(m, "Q", 10*time.Second)
		if err != nil || !strings.Contains(got, "Q") {
			t.Fatalf("the master did not echo a byte injected on the host: %q, %v", got, err)
		}
	})

	for _, tc := range []struct {
		name string
		argv func() []string
		spec policy.Spec
	}{
		{"go-static", func() []string { return append([]string{bin}, specs...) }, policy.Spec{FSRead: []string{filepath.Dir(bin)}}},
		{"python", func() []string {
			airtest.RequireBinary(t, "/usr/bin/python3")
			return []string{"/usr/bin/python3", "-c", pythonProbe(specs)}
		}, policy.Spec{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			argv := tc.argv()
			m, s := openPty(t)
			type result struct {
				echoed string
				err    error
			}
			done := make(chan result, 1)
			go func() {
				echoed, err := readUntil(m, "DONE", 15*time.Second)
				if err == nil && strings.Contains(echoed, "DONE") {
					_, err = m.Write([]byte("\n")) // releases the command's final read
				}
				done <- result{echoed, err}
			}()
			rep := runWithStdin(t, tc.spec, s, argv...)
			res := <-done
			wantExit(t, rep, 0)
			if res.err != nil {
				t.Fatal(res.err)
			}
			got := parseProbeOutput(t, rep.Stdout, names)
			if !strings.Contains(res.echoed, "ALIVE") || !strings.Contains(res.echoed, "DONE") {
				t.Fatalf("the terminal did not receive the command's own writes (%q): the sandbox's stdin is not the pty", res.echoed)
			}
			if e := got["tiocsctty"]; e != 0 {
				t.Logf("TIOCSCTTY inside = %s: the kernel refuses TIOCSTI on a terminal that is not the caller's own, so the refusals below may not be the filter's", errnoName(e))
			}
			for _, n := range names {
				if !strings.HasPrefix(n, "tiocsti") {
					continue
				}
				if e := got[n]; !refused(e) {
					t.Errorf("%s inside the sandbox = %s, want it refused", n, errnoName(e))
				}
			}
			if strings.ContainsAny(res.echoed, "QZ") {
				t.Errorf("bytes injected from the sandbox reached the terminal: master read %q", res.echoed)
			}
		})
	}
}

// runWithStdin is run with the command's stdin attached to f.
func runWithStdin(t *testing.T, spec policy.Spec, f *os.File, argv ...string) *sandbox.Report {
	t.Helper()
	if spec.Budget.Wall == 0 {
		spec.Budget.Wall = 20 * time.Second
	}
	if os.Geteuid() != 0 {
		spec.AllowDowngrade = append(spec.AllowDowngrade, "max_memory", "max_pids", "max_cpu")
	}
	p, err := policy.New(spec)
	if err != nil {
		t.Fatalf("policy.New: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rep, err := (&sandbox.Cmd{Config: sandbox.Config{Policy: p}, Args: argv, CommandIsGranted: true, Stdin: f}).Run(ctx)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return rep
}

// TestProbeSetuid: a setuid-root copy of python3, granted as an allowed
// tool, runs with exactly the caller's identity and no capabilities. A host
// control runs the same copy as nobody and sees it gain euid 0 and full
// capabilities, so the binary does carry a working setuid bit.
func TestProbeSetuid(t *testing.T) {
	requireSandbox(t)
	airtest.RequireRoot(t) // only root can make a setuid-root file
	airtest.RequireBinary(t, "/usr/bin/python3")
	real, err := filepath.EvalSymlinks("/usr/bin/python3")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o755); err != nil { // nobody must reach the copy for the control
			t.Fatal(err)
		}
	}
	suid := filepath.Join(dir, "pysuid")
	data, err := os.ReadFile(real)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(suid, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(suid, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(suid, os.ModeSetuid|0o755); err != nil {
		t.Fatal(err)
	}
	const status = `print("".join(l for l in open("/proc/self/status") if l.startswith(("Uid:", "Gid:", "Cap", "NoNewPrivs"))))`
	field := func(out, key string) []string {
		for _, l := range strings.Split(out, "\n") {
			if rest, ok := strings.CutPrefix(l, key+":"); ok {
				return strings.Fields(rest)
			}
		}
		return nil
	}

	t.Run("host-control", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, suid, "-I", "-S", "-c", status)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("setuid copy as nobody on the host: %v\n%s", err, out)
		}
		if uid := field(string(out), "Uid"); len(uid) != 4 || uid[0] != "65534" || uid[1] != "0" {
			t.Fatalf("host control: Uid = %v, want real 65534 and effective 0: the copy is not a working setuid binary (is %s on a nosuid mount?)\n%s", uid, dir, out)
		}
	})

	rep := py(t, policy.Spec{AllowedTools: []string{suid}}, fmt.Sprintf(`
import os, subprocess, sys
p = %q
st = os.stat(p)
print("setuid-bit", bool(st.st_mode & 0o4000), "owner", st.st_uid, "nosuid", bool(os.statvfs(p).f_flag & os.ST_NOSUID))
print("caller:", os.getuid(), os.geteuid())
r = subprocess.run([p, "-I", "-S", "-c", %q], capture_output=True, text=True, timeout=20)
print("exit", r.returncode)
print(r.stdout)
print(r.stderr, file=sys.stderr)`, suid, status))
	wantExit(t, rep, 0)
	t.Logf("inside:\n%s", rep.Stdout)
	if !strings.Contains(rep.Stdout, "setuid-bit True") {
		t.Fatalf("the copy shows no setuid bit inside the sandbox, so the test proves nothing:\n%s", rep.Stdout)
	}
	if !strings.Contains(rep.Stdout, "exit 0") {
		t.Fatalf("the setuid copy did not run inside the sandbox:\nstdout:\n%s\nstderr:\n%s", rep.Stdout, rep.Stderr)
	}
	caller := field(rep.Stdout, "caller")
	uid := field(rep.Stdout, "Uid")
	if len(caller) != 2 || len(uid) != 4 {
		t.Fatalf("cannot parse the identities:\n%s", rep.Stdout)
	}
	for i, u := range uid {
		if u != caller[0] {
			t.Errorf("setuid copy Uid field %d = %s, want the caller's %s (Uid: %v)", i, u, caller[0], uid)
		}
	}
	for _, c := range []string{"CapInh", "CapPrm", "CapEff", "CapAmb"} {
		if v := field(rep.Stdout, c); len(v) != 1 || strings.Trim(v[0], "0") != "" {
			t.Errorf("setuid copy %s = %v, want no capabilities", c, v)
		}
	}
	if v := field(rep.Stdout, "NoNewPrivs"); len(v) != 1 || v[0] != "1" {
		t.Errorf("setuid copy NoNewPrivs = %v, want 1", v)
	}
}
