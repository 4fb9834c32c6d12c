package seccomp

import (
	"slices"
	"testing"
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
)

type call struct {
	name  string
	args  [6]uint64
	want  Action
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
	{name: "clone3", want: ActENOSYS},
	{name: "landlock_create_ruleset", want: ActENOSYS},
	{name: "landlock_add_rule", want: ActENOSYS},
	{name: "landlock_restrict_self", want: ActENOSYS},
	{label: "clone-newns", name: "clone", args: [6]uint64{cloneNewNS | sigchld}, want: ActEPERM},
	{label: "clone-newuts", name: "clone", args: [6]uint64{cloneNewUTS | sigchld}, want: ActEPERM},
	{label: "clone-newipc", name: "clone", args: [6]uint64{cloneNewIPC | sigchld}, want: ActEPERM},
	{label: "clone-newuser", name: "clone", args: [6]uint64{cloneNewUser | sigchld}, want: ActEPERM},
	{label: "clone-newpid", name: "clone", args: [6]uint64{cloneNewPID | sigchld}, want: ActEPERM},
	{label: "clone-newnet", name: "clone", args: [6]uint64{cloneNewNet | sigchld}, want: ActEPERM},
	{label: "clone-newcgroup", name: "clone", args: [6]uint64{cloneNewCgroup | sigchld}, want: ActEPERM},
	{label: "clone-newtime", name: "clone", args: [6]uint64{cloneNewTime}, want: ActEPERM},
	{label: "clone-thread-newuser", name: "clone", args: [6]uint64{cloneThreadFlags | cloneNewUser}, want: ActEPERM},
	{label: "socket-netlink", name: "socket", args: [6]uint64{afNetlink, sockRaw}, want: ActEPERM},
	{label: "socket-packet", name: "socket", args: [6]uint64{afPacket, sockRaw}, want: ActEPERM},
	{label: "socket-bluetooth", name: "socket", args: [6]uint64{afBluetooth, sockStream}, want: ActEPERM},
	{label: "socket-vsock", name: "socket", args: [6]uint64{afVsock, sockStream}, want: ActEPERM},
	{label: "socket-inet-raw", name: "socket", args: [6]uint64{afInet, sockRaw, ipprotoICMP}, want: ActEPERM},
	{label: "socket-inet6-raw-cloexec", name: "socket", args: [6]uint64{afInet6, sockRaw | sockCloexec}, want: ActEPERM},
	{label: "socket-inet-packet", name: "socket", args: [6]uint64{afInet, sockPacket}, want: ActEPERM},
	{label: "socket-inet-mptcp", name: "socket", args: [6]uint64{afInet, sockStream, ipprotoMPTCP}, want: ActEPERM},
	{label: "socket-inet6-mptcp-flags", name: "socket", args: [6]uint64{afInet6, sockStream | sockNonblock | sockCloexec, ipprotoMPTCP}, want: ActEPERM},
	{label: "socket-inet-ping", name: "socket", args: [6]uint64{afInet, sockDgram, ipprotoICMP}, want: ActEPERM},
	{label: "socket-inet-sctp", name: "socket", args: [6]uint64{afInet, sockSeqpacket, ipprotoSCTP}, want: ActEPERM},
	{label: "socket-unix-high-bits", name: "socket", args: [6]uint64{1<<32 | afUnix, sockStream}, want: ActEPERM},
	{label: "socket-inet-proto-high-bits", name: "socket", args: [6]uint64{afInet, sockStream, 1<<32 | ipprotoTCP}, want: ActEPERM},
	{label: "socketpair-inet", name: "socketpair", args: [6]uint64{afInet, sockStream}, want: ActEPERM},
	{label: "ioctl-tiocsti", name: "ioctl", args: [6]uint64{0, tiocsti}, want: ActEPERM},
	{label: "ioctl-tioclinux", name: "ioctl", args: [6]uint64{0, tioclinux}, want: ActEPERM},
	{label: "ioctl-tiocsti-high-bits", name: "ioctl", args: [6]uint64{0, 0xdeadbeef_00000000 | tiocsti}, want: ActEPERM},
	{label: "personality-no-aslr", name: "personality", args: [6]uint64{addrNoRandomize}, want: ActEPERM},
	{label: "personality-query-sign-extended", name: "personality", args: [6]uint64{^uint64(0)}, want: ActEPERM},
}

func TestBuildDecides(t *testing.T) {
	for _, arch := range []Arch{ArchAMD64, ArchARM64} {
		tgt, prog := mustBuild(t, arch)
		var calls []call
		for _, c := range allowedCalls {
			c.want = ActAllow
			calls = append(calls, c)
		}
		for _, name := range deniedNames {
			calls = append(calls, call{name: name, want: ActEPERM})
		}
		calls = append(calls, refusedCalls...)
		for _, c := range calls {
			t.Run(string(arch)+"/"+c.String(), func(t *testing.T) {
				nr, ok := tgt.nums[c.name]
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
		want Action
	}{
		{"amd64/i386-arch", ArchAMD64, Data{Nr: 0, Arch: auditArchI386}, ActKillProcess},
		{"amd64/aarch64-arch", ArchAMD64, Data{Nr: 0, Arch: auditArchAArch64}, ActKillProcess},
		{"amd64/zero-arch", ArchAMD64, Data{Nr: 0}, ActKillProcess},
		{"amd64/x32-read", ArchAMD64, Data{Nr: x32SyscallBit, Arch: auditArchX86_64}, ActKillProcess},
		{"amd64/x32-getpid", ArchAMD64, Data{Nr: x32SyscallBit | 39, Arch: auditArchX86_64}, ActKillProcess},
		{"amd64/minus-one", ArchAMD64, Data{Nr: -1, Arch: auditArchX86_64}, ActKillProcess},
		{"amd64/above-table", ArchAMD64, Data{Nr: 1000, Arch: auditArchX86_64}, ActENOSYS},
		{"amd64/bit31", ArchAMD64, Data{Nr: -0x80000000, Arch: auditArchX86_64}, ActENOSYS},
		{"amd64/gap", ArchAMD64, Data{Nr: 336, Arch: auditArchX86_64}, ActEPERM},
		{"arm64/x86_64-arch", ArchARM64, Data{Nr: 63, Arch: auditArchX86_64}, ActKillProcess},
		{"arm64/read", ArchARM64, Data{Nr: 63, Arch: auditArchAArch64}, ActAllow},
		{"arm64/minus-one", ArchARM64, Data{Nr: -1, Arch: auditArchAArch64}, ActENOSYS},
		{"arm64/bit30-not-x32", ArchARM64, Data{Nr: x32SyscallBit | 63, Arch: auditArchAArch64}, ActENOSYS},
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
	if _, err := Build(Options{Arch: "riscv64"}); err == nil {
		t.Fatal(`Build(Arch "riscv64") = nil error, want an error`)
	}
}

// TestDeniedNamesHaveNoAllowRule checks the profile as data, which is what
// an OCI export sees: no rule for a denied syscall allows it.
func TestDeniedNamesHaveNoAllowRule(t *testing.T) {
	p := DefaultProfile()
	for _, s := range p.Syscalls {
		if !slices.Contains(deniedNames, s.Name) {
			continue
		}
		for _, r := range s.Rules {
			if r.Action == ActAllow {
				t.Errorf("DefaultProfile has an allow rule for %s", s.Name)
			}
		}
	}
}

func TestProfileNamesExist(t *testing.T) {
	p := DefaultProfile()
	if err := p.Validate(); err != nil {
		t.Fatalf("DefaultProfile().Validate() = %v", err)
	}
	names := append([]string{}, deniedNames...)
	for _, s := range p.Syscalls {
		names = append(names, s.Name)
	}
	for _, name := range names {
		_, amd := sysnumamd64[name]
		_, arm := sysnumarm64[name]
		if !amd && !arm {
			t.Errorf("syscall %q is in neither the amd64 nor the arm64 table: a typo would be skipped silently", name)
		}
	}
}

func TestTablesAreOneToOne(t *testing.T) {
	for arch, table := range map[Arch]map[string]uint32{ArchAMD64: sysnumamd64, ArchARM64: sysnumarm64} {
		seen := map[uint32]string{}
		for name, nr := range table {
			if other, dup := seen[nr]; dup {
				t.Errorf("%s: %s and %s both have number %d", arch, name, other, nr)
			}
			seen[nr] = name
		}
	}
}

// mobyAllowed is the unconditional allow-list of moby's
// profiles/seccomp/default.json (including its minKernel 4.8 and x86-only
// entries), restricted to names amd64 or arm64 have.
var mobyAllowed = []string{
	"accept", "accept4", "access", "adjtimex", "alarm", "bind", "brk", "capget", "capset", "chdir", "chmod", "chown",
	"clock_adjtime", "clock_getres", "clock_gettime", "clock_nanosleep", "close", "close_range", "connect",
	"copy_file_range", "creat", "dup", "dup2", "dup3", "epoll_create", "epoll_create1", "epoll_ctl", "epoll_ctl_old",
	"epoll_pwait", "epoll_pwait2", "epoll_wait", "epoll_wait_old", "eventfd", "eventfd2", "execve", "execveat", "exit",
	"exit_group", "faccessat", "faccessat2", "fadvise64", "fallocate", "fanotify_mark", "fchdir", "fchmod", "fchmodat",
	"fchown", "fchownat", "fcntl", "fdatasync", "fgetxattr", "flistxattr", "flock", "fork", "fremovexattr", "fsetxattr",
	"fstat", "fstatfs", "fsync", "ftruncate", "futex", "futex_waitv", "futimesat", "getcpu", "getcwd", "getdents",
	"getdents64", "getegid", "geteuid", "getgid", "getgroups", "getitimer", "getpeername", "getpgid", "getpgrp",
	"getpid", "getppid", "getpriority", "getrandom", "getresgid", "getresuid", "getrlimit", "get_robust_list",
	"getrusage", "getsid", "getsockname", "getsockopt", "get_thread_area", "gettid", "gettimeofday", "getuid",
	"getxattr", "inotify_add_watch", "inotify_init", "inotify_init1", "inotify_rm_watch", "io_cancel", "ioctl",
	"io_destroy", "io_getevents", "io_pgetevents", "ioprio_get", "ioprio_set", "io_setup", "io_submit",
	"io_uring_enter", "io_uring_register", "io_uring_setup", "kill", "landlock_add_rule", "landlock_create_ruleset",
	"landlock_restrict_self", "lchown", "lgetxattr", "link", "linkat", "listen", "listxattr", "llistxattr",
	"lremovexattr", "lseek", "lsetxattr", "lstat", "madvise", "membarrier", "memfd_create", "memfd_secret", "mincore",
	"mkdir", "mkdirat", "mknod", "mknodat", "mlock", "mlock2", "mlockall", "mmap", "mprotect", "mq_getsetattr",
	"mq_notify", "mq_open", "mq_timedreceive", "mq_timedsend", "mq_unlink", "mremap", "msgctl", "msgget", "msgrcv",
	"msgsnd", "msync", "munlock", "munlockall", "munmap", "name_to_handle_at", "nanosleep", "newfstatat", "open",
	"openat", "openat2", "pause", "pidfd_open", "pidfd_send_signal", "pipe", "pipe2", "pkey_alloc", "pkey_free",
	"pkey_mprotect", "poll", "ppoll", "prctl", "pread64", "preadv", "preadv2", "prlimit64", "process_mrelease",
	"pselect6", "pwrite64", "pwritev", "pwritev2", "read", "readahead", "readlink", "readlinkat", "readv", "recvfrom",
	"recvmmsg", "recvmsg", "remap_file_pages", "removexattr", "rename", "renameat", "renameat2", "restart_syscall",
	"rmdir", "rseq", "rt_sigaction", "rt_sigpending", "rt_sigprocmask", "rt_sigqueueinfo", "rt_sigreturn",
	"rt_sigsuspend", "rt_sigtimedwait", "rt_tgsigqueueinfo", "sched_getaffinity", "sched_getattr", "sched_getparam",
	"sched_get_priority_max", "sched_get_priority_min", "sched_getscheduler", "sched_rr_get_interval",
	"sched_setaffinity", "sched_setattr", "sched_setparam", "sched_setscheduler", "sched_yield", "seccomp", "select",
	"semctl", "semget", "semop", "semtimedop", "sendfile", "sendmmsg", "sendmsg", "sendto", "setfsgid", "setfsuid",
	"setgid", "setgroups", "setitimer", "setpgid", "setpriority", "setregid", "setresgid", "setresuid", "setreuid",
	"setrlimit", "set_robust_list", "setsid", "setsockopt", "set_thread_area", "set_tid_address", "setuid",
	"setxattr", "shmat", "shmctl", "shmdt", "shmget", "shutdown", "sigaltstack", "signalfd", "signalfd4",
	"socketpair", "splice", "stat", "statfs", "statx", "symlink", "symlinkat", "sync", "sync_file_range", "syncfs",
	"sysinfo", "tee", "tgkill", "time", "timer_create", "timer_delete", "timer_getoverrun", "timer_gettime",
	"timer_settime", "timerfd_create", "timerfd_gettime", "timerfd_settime", "times", "tkill", "truncate", "umask",
	"uname", "unlink", "unlinkat", "utime", "utimensat", "utimes", "vfork", "vmsplice", "wait4", "waitid", "write",
	"writev", "process_vm_readv", "process_vm_writev", "ptrace", "arch_prctl", "modify_ldt",
}

// TestProfileDerivesFromMoby pins the differences from moby's list, so that
// any change to the allow-list shows up here and gets a reason in doc.go.
func TestProfileDerivesFromMoby(t *testing.T) {
	removed := []string{
		"adjtimex", "clock_adjtime", "execveat", "io_uring_enter", "io_uring_register", "io_uring_setup",
		"landlock_add_rule", "landlock_create_ruleset", "landlock_restrict_self", "memfd_create", "memfd_secret",
		"name_to_handle_at", "process_vm_readv", "process_vm_writev", "ptrace",
	}
	argFiltered := []string{"ioctl", "socketpair"}
	added := []string{"fchmodat2", "futex_requeue", "futex_wait", "futex_wake", "map_shadow_stack", "mseal"}

	var want []string
	for _, name := range mobyAllowed {
		if !slices.Contains(removed, name) && !slices.Contains(argFiltered, name) {
			want = append(want, name)
		}
	}
	want = append(want, added...)
	slices.Sort(want)
	got := slices.Clone(allowed)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("allowed differs from moby's list with the documented changes\nextra: %v\nmissing: %v",
			minus(got, want), minus(want, got))
	}
}

func minus(a, b []string) []string {
	var out []string
	for _, s := range a {
		if !slices.Contains(b, s) {
			out = append(out, s)
		}
	}
	return out
}

func mustBuild(t testing.TB, arch Arch) (target, []Insn) {
	t.Helper()
	tgt, err := targetFor(arch)
	if err != nil {
		t.Fatal(err)
	}
	prog, err := Build(Options{Arch: arch})
	if err != nil {
		t.Fatalf("Build(%s) = %v", arch, err)
	}
	return tgt, prog
}

func mustRun(t testing.TB, prog []Insn, d Data) Action {
	t.Helper()
	got, err := Run(prog, d)
	if err != nil {
		t.Fatalf("Run(%+v) = %v", d, err)
	}
	return got
}
