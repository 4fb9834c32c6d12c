package seccomp

import (
	"testing"

	"github.com/airlock-sandbox/airlock/plan"
)

// Syscall argument values used by the tables, with their uapi names.
const (
	cloneVM, cloneFS, cloneFiles, cloneSighand = 0x100, 0x200, 0x400, 0x800
	clonePIDFD, cloneVfork, cloneThread        = 0x1000, 0x4000, 0x10000
	cloneSysvsem, cloneSettls                  = 0x40000, 0x80000
	cloneParentSettid, cloneChildCleartid      = 0x100000, 0x200000
	sigchld                                    = 17

	// pthread_create's flags in glibc (sysdeps/unix/sysv/linux/createthread.c).
	cloneThreadFlags = cloneVM | cloneFS | cloneFiles | cloneSighand | cloneThread |
		cloneSysvsem | cloneSettls | cloneParentSettid | cloneChildCleartid

	afNetlink, afPacket, afBluetooth, afVsock = 16, 17, 31, 40
	sockRaw, sockSeqpacket, sockPacket        = 3, 5, 10
	sockNonblock, sockCloexec                 = 0x800, 0x80000
	ipprotoICMP, ipprotoSCTP, ipprotoMPTCP    = 1, 132, 262
	tcgets, fionread                          = 0x5401, 0x541b
	addrNoRandomize                           = 0x0040000
	auditArchI386                             = 0x40000003

	// The values the profile's rules use (plan/syscalls_default.go).
	cloneNewTime, cloneNewNS, cloneNewCgroup, cloneNewUTS = 0x80, 0x20000, 0x2000000, 0x4000000
	cloneNewIPC, cloneNewUser, cloneNewPID, cloneNewNet   = 0x8000000, 0x10000000, 0x20000000, 0x40000000
	afUnix, afInet, afInet6                               = 1, 2, 10
	sockStream, sockDgram, sockTypeMask                   = 1, 2, 0xf
	ipprotoIP, ipprotoTCP, ipprotoUDP                     = 0, 6, 17
	tiocsti, tioclinux                                    = 0x5412, 0x541c
	all64, low32                                          = ^uint64(0), 0xffffffff
)

type call struct {
	name  string
	args  [6]uint64
	want  plan.Action
	label string // subtest name when name alone is not unique
}

func (c call) String() string {
	if c.label != "" {
		return c.label
	}
	return c.name
}

// allowedCalls must keep working: a sandbox that breaks ordinary programs
// gets switched off.
var allowedCalls = []call{
	{name: "read"}, {name: "write"}, {name: "openat"}, {name: "open"},
	{name: "execve"}, {name: "getpid"}, {name: "mmap"}, {name: "futex"},
	{name: "rseq"}, {name: "prctl"}, {name: "seccomp"}, {name: "fchmodat2"},
	{name: "exit_group"}, {name: "arch_prctl"}, {name: "fork"}, {name: "vfork"},
	{label: "clone-pthread", name: "clone", args: [6]uint64{cloneThreadFlags}},
	{label: "clone-fork", name: "clone", args: [6]uint64{sigchld}},
	{label: "clone-vfork-pidfd", name: "clone", args: [6]uint64{cloneVM | cloneVfork | clonePIDFD | sigchld}},
	// The kernel reads the low 32 bits of clone's flags only.
	{label: "clone-high-garbage", name: "clone", args: [6]uint64{0xffffffff_00000000 | sigchld}},
	{label: "socket-unix-stream", name: "socket", args: [6]uint64{afUnix, sockStream}},
	{label: "socket-unix-seqpacket", name: "socket", args: [6]uint64{afUnix, sockSeqpacket | sockCloexec}},
	{label: "socket-inet-stream", name: "socket", args: [6]uint64{afInet, sockStream}},
	{label: "socket-inet-tcp-flags", name: "socket", args: [6]uint64{afInet, sockStream | sockNonblock | sockCloexec, ipprotoTCP}},
	{label: "socket-inet6-dgram", name: "socket", args: [6]uint64{afInet6, sockDgram}},
	{label: "socket-inet6-udp", name: "socket", args: [6]uint64{afInet6, sockDgram | sockCloexec, ipprotoUDP}},
	{label: "socketpair-unix", name: "socketpair", args: [6]uint64{afUnix, sockStream}},
	{label: "ioctl-tcgets", name: "ioctl", args: [6]uint64{1, tcgets}},
	{label: "ioctl-fionread", name: "ioctl", args: [6]uint64{3, fionread}},
	{label: "personality-linux", name: "personality", args: [6]uint64{0}},
	{label: "personality-linux32", name: "personality", args: [6]uint64{8}},
	{label: "personality-uname26", name: "personality", args: [6]uint64{0x20000}},
	{label: "personality-uname26-linux32", name: "personality", args: [6]uint64{0x20008}},
	{label: "personality-query", name: "personality", args: [6]uint64{0xffffffff}},
}

// deniedNames must never run, whatever their arguments.
var deniedNames = []string{
	"io_uring_setup", "io_uring_enter", "io_uring_register", "userfaultfd",
	"bpf", "perf_event_open", "keyctl", "add_key", "request_key",
	"kexec_load", "kexec_file_load", "init_module", "finit_module",
	"delete_module", "mount", "umount2", "pivot_root", "chroot", "fsopen",
	"fsconfig", "fsmount", "fspick", "move_mount", "open_tree",
	"open_tree_attr", "mount_setattr", "unshare", "setns", "ptrace",
	"process_vm_readv", "process_vm_writev", "open_by_handle_at",
	"name_to_handle_at", "acct", "swapon", "swapoff", "reboot",
	"settimeofday", "clock_settime", "adjtimex", "clock_adjtime",
	"quotactl", "quotactl_fd", "lookup_dcookie", "vhangup", "iopl", "ioperm",
	"create_module", "get_kernel_syms", "query_module", "nfsservctl",
	"uselib", "syslog", "memfd_secret", "memfd_create", "execveat",
	"sethostname", "setdomainname", "fanotify_init", "kcmp", "pidfd_getfd",
	"process_madvise", "listmount", "statmount", "mbind", "set_mempolicy",
}

// refusedCalls are argument-filtered or answered with a specific errno.
var refusedCalls = []call{
	{name: "clone3", want: plan.ActENOSYS},
	{name: "landlock_create_ruleset", want: plan.ActENOSYS},
	{name: "landlock_add_rule", want: plan.ActENOSYS},
	{name: "landlock_restrict_self", want: plan.ActENOSYS},
	{label: "clone-newns", name: "clone", args: [6]uint64{cloneNewNS | sigchld}, want: plan.ActEPERM},
	{label: "clone-newuts", name: "clone", args: [6]uint64{cloneNewUTS | sigchld}, want: plan.ActEPERM},
	{label: "clone-newipc", name: "clone", args: [6]uint64{cloneNewIPC | sigchld}, want: plan.ActEPERM},
	{label: "clone-newuser", name: "clone", args: [6]uint64{cloneNewUser | sigchld}, want: plan.ActEPERM},
	{label: "clone-newpid", name: "clone", args: [6]uint64{cloneNewPID | sigchld}, want: plan.ActEPERM},
	{label: "clone-newnet", name: "clone", args: [6]uint64{cloneNewNet | sigchld}, want: plan.ActEPERM},
	{label: "clone-newcgroup", name: "clone", args: [6]uint64{cloneNewCgroup | sigchld}, want: plan.ActEPERM},
	{label: "clone-newtime", name: "clone", args: [6]uint64{cloneNewTime}, want: plan.ActEPERM},
	{label: "clone-thread-newuser", name: "clone", args: [6]uint64{cloneThreadFlags | cloneNewUser}, want: plan.ActEPERM},
	{label: "socket-netlink", name: "socket", args: [6]uint64{afNetlink, sockRaw}, want: plan.ActEPERM},
	{label: "socket-packet", name: "socket", args: [6]uint64{afPacket, sockRaw}, want: plan.ActEPERM},
	{label: "socket-bluetooth", name: "socket", args: [6]uint64{afBluetooth, sockStream}, want: plan.ActEPERM},
	{label: "socket-vsock", name: "socket", args: [6]uint64{afVsock, sockStream}, want: plan.ActEPERM},
	{label: "socket-inet-raw", name: "socket", args: [6]uint64{afInet, sockRaw, ipprotoICMP}, want: plan.ActEPERM},
	{label: "socket-inet6-raw-cloexec", name: "socket", args: [6]uint64{afInet6, sockRaw | sockCloexec}, want: plan.ActEPERM},
	{label: "socket-inet-packet", name: "socket", args: [6]uint64{afInet, sockPacket}, want: plan.ActEPERM},
	{label: "socket-inet-mptcp", name: "socket", args: [6]uint64{afInet, sockStream, ipprotoMPTCP}, want: plan.ActEPERM},
	{label: "socket-inet6-mptcp-flags", name: "socket", args: [6]uint64{afInet6, sockStream | sockNonblock | sockCloexec, ipprotoMPTCP}, want: plan.ActEPERM},
	{label: "socket-inet-ping", name: "socket", args: [6]uint64{afInet, sockDgram, ipprotoICMP}, want: plan.ActEPERM},
	{label: "socket-inet-sctp", name: "socket", args: [6]uint64{afInet, sockSeqpacket, ipprotoSCTP}, want: plan.ActEPERM},
	{label: "socket-unix-high-bits", name: "socket", args: [6]uint64{1<<32 | afUnix, sockStream}, want: plan.ActEPERM},
	{label: "socket-inet-proto-high-bits", name: "socket", args: [6]uint64{afInet, sockStream, 1<<32 | ipprotoTCP}, want: plan.ActEPERM},
	{label: "socketpair-inet", name: "socketpair", args: [6]uint64{afInet, sockStream}, want: plan.ActEPERM},
	{label: "ioctl-tiocsti", name: "ioctl", args: [6]uint64{0, tiocsti}, want: plan.ActEPERM},
	{label: "ioctl-tioclinux", name: "ioctl", args: [6]uint64{0, tioclinux}, want: plan.ActEPERM},
	{label: "ioctl-tiocsti-high-bits", name: "ioctl", args: [6]uint64{0, 0xdeadbeef_00000000 | tiocsti}, want: plan.ActEPERM},
	{label: "personality-no-aslr", name: "personality", args: [6]uint64{addrNoRandomize}, want: plan.ActEPERM},
	{label: "personality-query-sign-extended", name: "personality", args: [6]uint64{^uint64(0)}, want: plan.ActEPERM},
}

func TestBuildDecides(t *testing.T) {
	for _, arch := range []Arch{ArchAMD64, ArchARM64} {
		tgt, prog := mustBuild(t, arch)
		var calls []call
		for _, c := range allowedCalls {
			c.want = plan.ActAllow
			calls = append(calls, c)
		}
		for _, name := range deniedNames {
			calls = append(calls, call{name: name, want: plan.ActEPERM})
		}
		// What explain says is refused must be.
		for _, g := range plan.DefaultSeccomp().Refused {
			for _, name := range g.Names {
				calls = append(calls, call{name: name, want: plan.ActEPERM, label: "refused-" + name})
			}
		}
		calls = append(calls, refusedCalls...)
		for _, c := range calls {
			t.Run(string(arch)+"/"+c.String(), func(t *testing.T) {
				nr, ok := tgt.nums.lookup(c.name)
				if !ok {
					t.Skipf("%s has no %s syscall", arch, c.name)
				}
				d := Data{Nr: int32(nr), Arch: tgt.audit, Args: c.args}
				if got := mustRun(t, prog, d); got != c.want {
					t.Errorf("Run(%s%#x) = %v, want %v", c.name, c.args, got, c.want)
				}
			})
		}
	}
}

func TestBuildChecksArchAndNumber(t *testing.T) {
	tests := []struct {
		name string
		arch Arch
		d    Data
		want plan.Action
	}{
		{"amd64/i386-arch", ArchAMD64, Data{Nr: 0, Arch: auditArchI386}, plan.ActKillProcess},
		{"amd64/aarch64-arch", ArchAMD64, Data{Nr: 0, Arch: auditArchAArch64}, plan.ActKillProcess},
		{"amd64/zero-arch", ArchAMD64, Data{Nr: 0}, plan.ActKillProcess},
		{"amd64/x32-read", ArchAMD64, Data{Nr: x32SyscallBit, Arch: auditArchX86_64}, plan.ActKillProcess},
		{"amd64/x32-getpid", ArchAMD64, Data{Nr: x32SyscallBit | 39, Arch: auditArchX86_64}, plan.ActKillProcess},
		{"amd64/minus-one", ArchAMD64, Data{Nr: -1, Arch: auditArchX86_64}, plan.ActKillProcess},
		{"amd64/above-table", ArchAMD64, Data{Nr: 1000, Arch: auditArchX86_64}, plan.ActENOSYS},
		{"amd64/bit31", ArchAMD64, Data{Nr: -0x80000000, Arch: auditArchX86_64}, plan.ActENOSYS},
		{"amd64/gap", ArchAMD64, Data{Nr: 336, Arch: auditArchX86_64}, plan.ActEPERM},
		{"arm64/x86_64-arch", ArchARM64, Data{Nr: 63, Arch: auditArchX86_64}, plan.ActKillProcess},
		{"arm64/read", ArchARM64, Data{Nr: 63, Arch: auditArchAArch64}, plan.ActAllow},
		{"arm64/minus-one", ArchARM64, Data{Nr: -1, Arch: auditArchAArch64}, plan.ActENOSYS},
		{"arm64/bit30-not-x32", ArchARM64, Data{Nr: x32SyscallBit | 63, Arch: auditArchAArch64}, plan.ActENOSYS},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, prog := mustBuild(t, tt.arch)
			if got := mustRun(t, prog, tt.d); got != tt.want {
				t.Errorf("Run(nr %#x, arch %#x) = %v, want %v", uint32(tt.d.Nr), tt.d.Arch, got, tt.want)
			}
		})
	}
}

func TestBuildUnsupportedArch(t *testing.T) {
	if _, err := Build(plan.DefaultSeccomp(), Options{Arch: "riscv64"}); err == nil {
		t.Fatal(`Build(Arch "riscv64") = nil error, want an error`)
	}
}

func TestProfileNamesExist(t *testing.T) {
	p := plan.DefaultSeccomp()
	if err := p.Validate(); err != nil {
		t.Fatalf("plan.DefaultSeccomp().Validate() = %v", err)
	}
	names := append([]string{}, deniedNames...)
	for _, s := range p.Syscalls {
		names = append(names, s.Name)
	}
	for _, g := range p.Refused {
		names = append(names, g.Names...)
	}
	for _, name := range names {
		_, amd := sysnumamd64.lookup(name)
		_, arm := sysnumarm64.lookup(name)
		if !amd && !arm {
			t.Errorf("syscall %q is in neither the amd64 nor the arm64 table: a typo would be skipped silently", name)
		}
	}
}

func TestTablesAreOneToOne(t *testing.T) {
	for arch, table := range map[Arch]sysTable{ArchAMD64: sysnumamd64, ArchARM64: sysnumarm64} {
		seen := map[uint32]string{}
		for _, e := range table {
			name, nr := e.name, e.nr
			if other, dup := seen[nr]; dup {
				t.Errorf("%s: %s and %s both have number %d", arch, name, other, nr)
			}
			seen[nr] = name
		}
	}
}

// TestTablesSorted: lookup's binary search finds a name only in a table
// sorted by name with each name once; a hand edit or a generator that
// sorted otherwise would make names (and so allowed syscalls) vanish, or
// a name resolve to another's number.
func TestTablesSorted(t *testing.T) {
	for arch, table := range map[Arch]sysTable{ArchAMD64: sysnumamd64, ArchARM64: sysnumarm64} {
		if len(table) < 300 {
			t.Errorf("%s: %d syscalls; the generated table has over 300", arch, len(table))
		}
		for i, e := range table {
			if i > 0 && table[i-1].name >= e.name {
				t.Errorf("%s: %q before %q: not sorted by name, or a name twice", arch, table[i-1].name, e.name)
			}
			if nr, ok := table.lookup(e.name); !ok || nr != e.nr {
				t.Errorf("%s: lookup(%q) = %d, %v; want %d", arch, e.name, nr, ok, e.nr)
			}
		}
		for _, absent := range []string{"", "_", "read ", "READ", "zzz", "open_tree_attr2", "\x00"} {
			if nr, ok := table.lookup(absent); ok {
				t.Errorf("%s: lookup(%q) = %d, true; want not found", arch, absent, nr)
			}
		}
	}
}

func mustBuild(t testing.TB, arch Arch) (target, []Insn) {
	t.Helper()
	tgt, err := targetFor(arch)
	if err != nil {
		t.Fatal(err)
	}
	prog, err := Build(plan.DefaultSeccomp(), Options{Arch: arch})
	if err != nil {
		t.Fatalf("Build(%s) = %v", arch, err)
	}
	return tgt, prog
}

func mustRun(t testing.TB, prog []Insn, d Data) plan.Action {
	t.Helper()
	got, err := Run(prog, d)
	if err != nil {
		t.Fatalf("Run(%+v) = %v", d, err)
	}
	return got
}
