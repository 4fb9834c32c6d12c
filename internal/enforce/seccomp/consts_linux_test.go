package seccomp

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/plan"
)

// TestConstantsMatchKernelHeaders checks the constants the portable half
// spells out against golang.org/x/sys, which takes them from the uapi
// headers.
func TestConstantsMatchKernelHeaders(t *testing.T) {
	tests := []struct {
		name      string
		got, want uint64
	}{
		{"SECCOMP_RET_ALLOW", uint64(plan.ActAllow), unix.SECCOMP_RET_ALLOW},
		{"SECCOMP_RET_KILL_PROCESS", uint64(plan.ActKillProcess), unix.SECCOMP_RET_KILL_PROCESS},
		{"SECCOMP_RET_ERRNO|EPERM", uint64(plan.ActEPERM), unix.SECCOMP_RET_ERRNO | uint64(unix.EPERM)},
		{"SECCOMP_RET_ERRNO|ENOSYS", uint64(plan.ActENOSYS), unix.SECCOMP_RET_ERRNO | uint64(unix.ENOSYS)},
		{"AUDIT_ARCH_X86_64", auditArchX86_64, unix.AUDIT_ARCH_X86_64},
		{"AUDIT_ARCH_AARCH64", auditArchAArch64, unix.AUDIT_ARCH_AARCH64},
		{"AUDIT_ARCH_I386", auditArchI386, unix.AUDIT_ARCH_I386},
		{"BPF_LD|BPF_W|BPF_ABS", opLdAbsW, unix.BPF_LD | unix.BPF_W | unix.BPF_ABS},
		{"BPF_ALU|BPF_AND|BPF_K", opAndK, unix.BPF_ALU | unix.BPF_AND | unix.BPF_K},
		{"BPF_JMP|BPF_JA", opJa, unix.BPF_JMP | unix.BPF_JA},
		{"BPF_JMP|BPF_JEQ|BPF_K", opJeqK, unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K},
		{"BPF_JMP|BPF_JGT|BPF_K", opJgtK, unix.BPF_JMP | unix.BPF_JGT | unix.BPF_K},
		{"BPF_JMP|BPF_JGE|BPF_K", opJgeK, unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K},
		{"BPF_JMP|BPF_JSET|BPF_K", opJsetK, unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K},
		{"BPF_RET|BPF_K", opRetK, unix.BPF_RET | unix.BPF_K},
		{"BPF_MAXINSNS", maxInsns, unix.BPF_MAXINSNS},
		{"CLONE_NEWTIME", cloneNewTime, unix.CLONE_NEWTIME},
		{"CLONE_NEWNS", cloneNewNS, unix.CLONE_NEWNS},
		{"CLONE_NEWCGROUP", cloneNewCgroup, unix.CLONE_NEWCGROUP},
		{"CLONE_NEWUTS", cloneNewUTS, unix.CLONE_NEWUTS},
		{"CLONE_NEWIPC", cloneNewIPC, unix.CLONE_NEWIPC},
		{"CLONE_NEWUSER", cloneNewUser, unix.CLONE_NEWUSER},
		{"CLONE_NEWPID", cloneNewPID, unix.CLONE_NEWPID},
		{"CLONE_NEWNET", cloneNewNet, unix.CLONE_NEWNET},
		{"CLONE_VM", cloneVM, unix.CLONE_VM},
		{"CLONE_FS", cloneFS, unix.CLONE_FS},
		{"CLONE_FILES", cloneFiles, unix.CLONE_FILES},
		{"CLONE_SIGHAND", cloneSighand, unix.CLONE_SIGHAND},
		{"CLONE_PIDFD", clonePIDFD, unix.CLONE_PIDFD},
		{"CLONE_VFORK", cloneVfork, unix.CLONE_VFORK},
		{"CLONE_THREAD", cloneThread, unix.CLONE_THREAD},
		{"CLONE_SYSVSEM", cloneSysvsem, unix.CLONE_SYSVSEM},
		{"CLONE_SETTLS", cloneSettls, unix.CLONE_SETTLS},
		{"CLONE_PARENT_SETTID", cloneParentSettid, unix.CLONE_PARENT_SETTID},
		{"CLONE_CHILD_CLEARTID", cloneChildCleartid, unix.CLONE_CHILD_CLEARTID},
		{"SIGCHLD", sigchld, uint64(unix.SIGCHLD)},
		{"AF_UNIX", afUnix, unix.AF_UNIX},
		{"AF_INET", afInet, unix.AF_INET},
		{"AF_INET6", afInet6, unix.AF_INET6},
		{"AF_NETLINK", afNetlink, unix.AF_NETLINK},
		{"AF_PACKET", afPacket, unix.AF_PACKET},
		{"AF_BLUETOOTH", afBluetooth, unix.AF_BLUETOOTH},
		{"AF_VSOCK", afVsock, unix.AF_VSOCK},
		{"SOCK_STREAM", sockStream, unix.SOCK_STREAM},
		{"SOCK_DGRAM", sockDgram, unix.SOCK_DGRAM},
		{"SOCK_RAW", sockRaw, unix.SOCK_RAW},
		{"SOCK_SEQPACKET", sockSeqpacket, unix.SOCK_SEQPACKET},
		{"SOCK_PACKET", sockPacket, unix.SOCK_PACKET},
		{"SOCK_NONBLOCK", sockNonblock, unix.SOCK_NONBLOCK},
		{"SOCK_CLOEXEC", sockCloexec, unix.SOCK_CLOEXEC},
		{"IPPROTO_IP", ipprotoIP, unix.IPPROTO_IP},
		{"IPPROTO_TCP", ipprotoTCP, unix.IPPROTO_TCP},
		{"IPPROTO_UDP", ipprotoUDP, unix.IPPROTO_UDP},
		{"IPPROTO_ICMP", ipprotoICMP, unix.IPPROTO_ICMP},
		{"IPPROTO_SCTP", ipprotoSCTP, unix.IPPROTO_SCTP},
		{"IPPROTO_MPTCP", ipprotoMPTCP, unix.IPPROTO_MPTCP},
		{"TIOCSTI", tiocsti, unix.TIOCSTI},
		{"TIOCLINUX", tioclinux, unix.TIOCLINUX},
		{"TCGETS", tcgets, unix.TCGETS},
		{"FIONREAD", fionread, unix.TIOCINQ}, // FIONREAD is TIOCINQ
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("%s = %#x, want %#x", tt.name, tt.got, tt.want)
			}
		})
	}
	// SOCK_NONBLOCK and SOCK_CLOEXEC must sit above SOCK_TYPE_MASK, or the
	// socket rules would compare flags as part of the type.
	if (unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)&sockTypeMask != 0 {
		t.Errorf("SOCK_NONBLOCK|SOCK_CLOEXEC overlaps SOCK_TYPE_MASK %#x", sockTypeMask)
	}
}

// TestHostTableMatchesXSys spot-checks the generated table for this
// machine against x/sys's SYS_* constants.
func TestHostTableMatchesXSys(t *testing.T) {
	table := map[string]sysTable{"amd64": sysnumamd64, "arm64": sysnumarm64}[runtime.GOARCH]
	if table == nil {
		t.Skipf("no syscall table for GOARCH %s", runtime.GOARCH)
	}
	want := map[string]uintptr{
		"read": unix.SYS_READ, "write": unix.SYS_WRITE, "openat": unix.SYS_OPENAT, "close": unix.SYS_CLOSE,
		"clone": unix.SYS_CLONE, "clone3": unix.SYS_CLONE3, "execve": unix.SYS_EXECVE, "execveat": unix.SYS_EXECVEAT,
		"socket": unix.SYS_SOCKET, "socketpair": unix.SYS_SOCKETPAIR, "ioctl": unix.SYS_IOCTL,
		"personality": unix.SYS_PERSONALITY, "unshare": unix.SYS_UNSHARE, "setns": unix.SYS_SETNS,
		"mount": unix.SYS_MOUNT, "bpf": unix.SYS_BPF, "perf_event_open": unix.SYS_PERF_EVENT_OPEN,
		"io_uring_setup": unix.SYS_IO_URING_SETUP, "memfd_create": unix.SYS_MEMFD_CREATE,
		"userfaultfd": unix.SYS_USERFAULTFD, "ptrace": unix.SYS_PTRACE, "keyctl": unix.SYS_KEYCTL,
		"landlock_create_ruleset": unix.SYS_LANDLOCK_CREATE_RULESET, "fchmodat2": unix.SYS_FCHMODAT2,
		"futex": unix.SYS_FUTEX, "exit_group": unix.SYS_EXIT_GROUP, "prctl": unix.SYS_PRCTL,
		"seccomp": unix.SYS_SECCOMP, "getpid": unix.SYS_GETPID, "rseq": unix.SYS_RSEQ,
	}
	for name, nr := range want {
		if got, ok := table.lookup(name); !ok || uintptr(got) != nr {
			t.Errorf("table[%q] = %d, %v; want %d", name, got, ok, nr)
		}
	}
}
