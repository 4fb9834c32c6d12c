package plan

import (
	"sort"
	"sync"
)

// allowed lists the syscalls the filter lets through whatever their
// arguments, by group. It is moby's default allow-list restricted to the
// names amd64 or arm64 have (the 32-bit-only names such as mmap2 or
// socketcall can only come through the compat ABIs, which the arch check
// kills), with the removals listed in refused. Names only one of the two
// architectures has are skipped on the other.
var allowed = []struct {
	group string
	names []string
}{
	// Which paths they reach is Landlock's and the mount namespace's
	// business, not the filter's.
	{"files and directories", []string{
		"access", "chdir", "chmod", "chown", "close", "close_range",
		"copy_file_range", "creat", "dup", "dup2", "dup3", "faccessat",
		"faccessat2", "fadvise64", "fallocate", "fchdir", "fchmod", "fchmodat",
		"fchown", "fchownat", "fcntl", "fdatasync", "flock", "fstat", "fstatfs",
		"fsync", "ftruncate", "futimesat", "getcwd", "getdents", "getdents64",
		"lchown", "link", "linkat", "lseek", "lstat", "mkdir", "mkdirat", "mknod",
		"mknodat", "newfstatat", "open", "openat", "openat2", "pipe", "pipe2",
		"pread64",
		"preadv", "preadv2", "pwrite64", "pwritev", "pwritev2", "read",
		"readahead", "readlink", "readlinkat", "readv", "rename", "renameat",
		"renameat2", "rmdir", "sendfile", "splice", "stat", "statfs", "statx",
		"symlink", "symlinkat", "sync", "sync_file_range", "syncfs", "tee",
		"truncate", "umask", "unlink", "unlinkat", "utime", "utimensat",
		"utimes", "vmsplice", "write", "writev",
		// fchmodat2 (Linux 6.6) is newer than moby's list. glibc 2.39 uses it
		// for fchmodat(AT_SYMLINK_NOFOLLOW) and falls back only on ENOSYS, so
		// EPERM would break chmod.
		"fchmodat2",
	}},

	{"extended attributes", []string{
		"fgetxattr", "flistxattr", "fremovexattr", "fsetxattr", "getxattr",
		"lgetxattr", "listxattr", "llistxattr", "lremovexattr", "lsetxattr",
		"removexattr", "setxattr",
	}},

	// fanotify_init needs CAP_SYS_ADMIN and is not allowed, so
	// fanotify_mark has nothing to act on; moby lists it.
	{"change notification", []string{
		"fanotify_mark", "inotify_add_watch", "inotify_init", "inotify_init1",
		"inotify_rm_watch",
	}},

	{"waiting for events on descriptors", []string{
		"epoll_create", "epoll_create1", "epoll_ctl", "epoll_ctl_old",
		"epoll_pwait", "epoll_pwait2", "epoll_wait", "epoll_wait_old",
		"eventfd", "eventfd2", "poll", "ppoll", "pselect6", "select",
		"signalfd", "signalfd4", "timerfd_create", "timerfd_gettime",
		"timerfd_settime",
	}},

	// io_uring is not here: see refused.
	{"POSIX AIO", []string{
		"io_cancel", "io_destroy", "io_getevents", "io_pgetevents", "io_setup",
		"io_submit",
	}},

	// map_shadow_stack (Linux 6.6, glibc's x86 shadow stacks) and mseal
	// (Linux 6.10) are newer than moby's list and only ever take something
	// away from the caller.
	{"memory", []string{
		"brk", "madvise", "membarrier", "mincore", "mlock", "mlock2",
		"mlockall", "mmap", "mprotect", "mremap", "msync", "munlock",
		"munlockall", "munmap", "pkey_alloc", "pkey_free", "pkey_mprotect",
		"remap_file_pages", "map_shadow_stack", "mseal",
	}},

	// clone is in conditional(); clone3 answers ENOSYS there. execve stays;
	// execveat does not (refused).
	{"processes and threads", []string{
		"execve", "exit", "exit_group", "fork", "vfork", "wait4", "waitid",
		"kill", "tgkill", "tkill", "pidfd_open", "pidfd_send_signal",
		"process_mrelease", "getpid", "getppid", "gettid", "getpgid", "getpgrp",
		"getsid", "setpgid", "setsid", "set_tid_address", "get_robust_list",
		"set_robust_list", "rseq", "restart_syscall",
		// prctl stays whole: runtimes need PR_SET_NAME, PR_SET_PDEATHSIG,
		// PR_SET_NO_NEW_PRIVS and friends, and what it could loosen needs
		// capabilities the sandbox has dropped. PR_SET_SECCOMP and
		// seccomp(2) stay too: a nested filter is stacked under ours, and
		// the kernel applies the strictest answer of all filters, so it can
		// only take more away (seccomp(2), "multiple filters").
		"prctl", "seccomp",
		// x86 TLS and segment setup, as in moby's amd64 list.
		"arch_prctl", "modify_ldt", "get_thread_area", "set_thread_area",
	}},

	// futex_wait, futex_wake and futex_requeue (Linux 6.7) are newer than
	// moby's list and do what futex already does.
	{"futexes", []string{"futex", "futex_waitv", "futex_wait", "futex_wake", "futex_requeue"}},

	{"signals", []string{
		"pause", "rt_sigaction", "rt_sigpending", "rt_sigprocmask",
		"rt_sigqueueinfo", "rt_sigreturn", "rt_sigsuspend", "rt_sigtimedwait",
		"rt_tgsigqueueinfo", "sigaltstack",
	}},

	// The sandbox's user namespace maps a single id and the capabilities
	// are dropped before the filter, so these cannot gain anything; capset
	// can only lower what is left.
	{"credentials", []string{
		"capget", "capset", "getegid", "geteuid", "getgid", "getgroups",
		"getresgid", "getresuid", "getuid", "setfsgid", "setfsuid", "setgid",
		"setgroups", "setregid", "setresgid", "setresuid", "setreuid", "setuid",
	}},

	// Reading them; setting is refused.
	{"clocks and timers", []string{
		"alarm", "clock_getres", "clock_gettime", "clock_nanosleep",
		"getitimer", "gettimeofday", "nanosleep", "setitimer", "time", "times",
		"timer_create", "timer_delete", "timer_getoverrun", "timer_gettime",
		"timer_settime",
	}},

	// Raising a hard limit needs CAP_SYS_RESOURCE, which the sandbox does
	// not have.
	{"scheduling and resource limits", []string{
		"getcpu", "getpriority", "setpriority", "getrlimit", "setrlimit",
		"prlimit64", "getrusage", "ioprio_get", "ioprio_set",
		"sched_getaffinity", "sched_getattr", "sched_getparam",
		"sched_get_priority_max", "sched_get_priority_min",
		"sched_getscheduler", "sched_rr_get_interval", "sched_setaffinity",
		"sched_setattr", "sched_setparam", "sched_setscheduler", "sched_yield",
	}},

	{"system information", []string{"getrandom", "sysinfo", "uname"}},

	// socket and socketpair are in conditional().
	{"sockets, once made", []string{
		"accept", "accept4", "bind", "connect", "getpeername", "getsockname",
		"getsockopt", "listen", "recvfrom", "recvmmsg", "recvmsg", "sendmmsg",
		"sendmsg", "sendto", "setsockopt", "shutdown",
	}},

	// Private to the sandbox's IPC namespace.
	{"System V IPC and POSIX message queues", []string{
		"msgctl", "msgget", "msgrcv", "msgsnd", "semctl", "semget", "semop",
		"semtimedop", "shmat", "shmctl", "shmdt", "shmget", "mq_getsetattr",
		"mq_notify", "mq_open", "mq_timedreceive", "mq_timedsend", "mq_unlink",
	}},
}

// refused lists, by group, what the profile keeps out on purpose: what
// moby's default allows but airlock removes, and the notable part of what
// moby grants only with capabilities or never allowed. Every other syscall
// is refused too (the filter is an allow-list); these are named so that
// explain can say what is gone and a test can check that it is.
var refused = []SyscallGroup{
	{Name: "io_uring", Why: "a large, fast-moving kernel surface that also performs I/O seccomp never sees",
		Names: []string{"io_uring_setup", "io_uring_enter", "io_uring_register"}},
	{Name: "code that was never on disk", Why: "memfd plus execveat(AT_EMPTY_PATH) execs code out of reach of Landlock's execute rights; execve stays",
		Names: []string{"memfd_create", "memfd_secret", "execveat"}},
	{Name: "other processes", Why: "reading and writing other processes' memory and descriptors",
		Names: []string{"ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "kcmp", "pidfd_getfd"}},
	{Name: "file handles", Why: "file handles bypass path-based checks",
		Names: []string{"name_to_handle_at", "open_by_handle_at"}},
	{Name: "namespaces and mounts", Why: "the sandbox's namespaces and root are fixed before the command starts",
		Names: []string{"unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "fsopen", "fsconfig", "fsmount", "fspick",
			"move_mount", "open_tree", "open_tree_attr", "mount_setattr", "listmount", "statmount"}},
	{Name: "eBPF and perf", Why: "kernel attack surface with a record of privilege escalation",
		Names: []string{"bpf", "perf_event_open"}},
	{Name: "keyrings", Why: "the kernel keyrings are not namespaced",
		Names: []string{"keyctl", "add_key", "request_key"}},
	{Name: "userfaultfd", Why: "it widens race windows in kernel exploits",
		Names: []string{"userfaultfd"}},
	{Name: "the kernel itself", Why: "modules, kexec and obsolete module interfaces",
		Names: []string{"init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
			"create_module", "get_kernel_syms", "query_module"}},
	{Name: "the clock and the host", Why: "the sandbox has no business with the clock, the host's name or its administration",
		Names: []string{"adjtimex", "clock_adjtime", "settimeofday", "clock_settime", "sethostname", "setdomainname",
			"acct", "swapon", "swapoff", "reboot", "quotactl", "quotactl_fd", "lookup_dcookie", "vhangup",
			"iopl", "ioperm", "syslog", "nfsservctl", "uselib", "fanotify_init", "mbind", "set_mempolicy"}},
}

// Linux ABI constants for the argument rules, from the uapi headers. amd64
// and arm64 share them; the seccomp package's Linux tests check them
// against x/sys.
const (
	// clone flags that create namespaces (linux/sched.h). CLONE_NEWTIME
	// (0x80) overlaps the exit-signal byte of clone(2); no valid signal
	// number has that bit, so refusing it costs nothing.
	cloneNewTime   = 0x00000080
	cloneNewNS     = 0x00020000
	cloneNewCgroup = 0x02000000
	cloneNewUTS    = 0x04000000
	cloneNewIPC    = 0x08000000
	cloneNewUser   = 0x10000000
	cloneNewPID    = 0x20000000
	cloneNewNet    = 0x40000000
	cloneNamespace = cloneNewTime | cloneNewNS | cloneNewCgroup | cloneNewUTS |
		cloneNewIPC | cloneNewUser | cloneNewPID | cloneNewNet

	afUnix  = 1  // AF_UNIX
	afInet  = 2  // AF_INET
	afInet6 = 10 // AF_INET6

	sockStream   = 1   // SOCK_STREAM
	sockDgram    = 2   // SOCK_DGRAM
	sockTypeMask = 0xf // SOCK_TYPE_MASK (linux/net.h): the type without SOCK_NONBLOCK or SOCK_CLOEXEC

	ipprotoIP  = 0  // IPPROTO_IP: the family's default protocol for the type
	ipprotoTCP = 6  // IPPROTO_TCP
	ipprotoUDP = 17 // IPPROTO_UDP

	tiocsti   = 0x5412 // TIOCSTI: push a byte into a terminal's input queue
	tioclinux = 0x541c // TIOCLINUX: virtual console requests, including selection paste

	all64 = ^uint64(0) // compare the whole register
	low32 = 0xffffffff // compare the half the kernel reads for a 32-bit argument
)

// conditional returns the syscalls allowed only for some arguments, or
// answered with an errno of their own.
func conditional() []Syscall {
	eq := func(arg int, v uint64) ArgCond { return ArgCond{Arg: arg, Mask: all64, Value: v} }
	allowIf := func(conds ...ArgCond) SyscallRule { return SyscallRule{Action: ActAllow, Conds: conds} }

	// socket: AF_UNIX for anything; AF_INET and AF_INET6 only for plain
	// TCP and UDP. An allow-list of (type, protocol) rather than a
	// deny-list: it refuses IPPROTO_MPTCP (262), which Landlock's TCP rules
	// do not cover, SOCK_RAW and SOCK_PACKET, and also SCTP, ICMP and
	// anything added later. The type is compared under SOCK_TYPE_MASK,
	// which is how __sys_socket reads it. Domain and protocol are ints
	// compared on the whole register (high half zero). Other families
	// (netlink, packet, vsock, bluetooth, ...) get the default EPERM.
	socket := []SyscallRule{allowIf(eq(0, afUnix))}
	for _, family := range []uint64{afInet, afInet6} {
		for _, tp := range []struct{ typ, proto uint64 }{
			{sockStream, ipprotoIP}, {sockStream, ipprotoTCP},
			{sockDgram, ipprotoIP}, {sockDgram, ipprotoUDP},
		} {
			socket = append(socket, allowIf(eq(0, family),
				ArgCond{Arg: 1, Mask: sockTypeMask, Value: tp.typ}, eq(2, tp.proto)))
		}
	}

	// personality: the values moby allows. 0 is PER_LINUX, 8 PER_LINUX32,
	// 0x20000 UNAME26 and 0xffffffff the query. Flags such as
	// ADDR_NO_RANDOMIZE (switching off ASLR) or READ_IMPLIES_EXEC are not.
	var personality []SyscallRule
	for _, v := range []uint64{0x0, 0x8, 0x20000, 0x20008, 0xffffffff} {
		personality = append(personality, allowIf(eq(0, v)))
	}

	// Landlock: the sandbox is already inside a ruleset, and a nested one
	// could only restrict more, but it is kernel attack surface a
	// sandboxed program does not need. ENOSYS rather than EPERM, so a
	// program that sandboxes itself when it can reads "no Landlock here"
	// and carries on, as on a kernel before 5.13.
	const noLandlock = "ENOSYS: the sandbox is already inside a Landlock ruleset; a program that sandboxes itself reads \"no Landlock here\" and carries on"
	enosys := []SyscallRule{{Action: ActENOSYS}}

	return []Syscall{
		// clone: no namespace flags. The kernel reads only the low 32 bits
		// of the flags (kernel_clone_args uses lower_32_bits), as do we.
		// clone3 keeps its flags in memory a filter cannot read, so it
		// answers ENOSYS and glibc and Go fall back to clone.
		{Name: "clone", Group: "processes and threads", Why: "allowed without namespace flags (CLONE_NEW*)",
			Rules: []SyscallRule{allowIf(ArgCond{Arg: 0, Mask: cloneNamespace, Value: 0})}},
		{Name: "clone3", Group: "processes and threads", Why: "ENOSYS: its flags are in memory the filter cannot read; libc falls back to clone",
			Rules: enosys},

		{Name: "socket", Group: "sockets", Why: "AF_UNIX, or plain TCP and UDP over AF_INET and AF_INET6 (no raw, packet, netlink, MPTCP, SCTP or ICMP)",
			Rules: socket},
		// socketpair only makes connected pairs; AF_UNIX is the only family
		// that has them.
		{Name: "socketpair", Group: "sockets", Why: "AF_UNIX only",
			Rules: []SyscallRule{allowIf(eq(0, afUnix))}},

		// ioctl: all requests but TIOCSTI, which types into the terminal
		// the sandbox shares with its caller (CVE-2017-5226), and
		// TIOCLINUX, whose selection paste does the same on a virtual
		// console (CVE-2023-1523). The request is an unsigned int: the
		// kernel drops the high half, so the rule ignores it too.
		{Name: "ioctl", Group: "files and directories", Why: "every request but TIOCSTI and TIOCLINUX, which type into the caller's terminal",
			Rules: []SyscallRule{
				{Action: ActEPERM, Conds: []ArgCond{{Arg: 1, Mask: low32, Value: tiocsti}}},
				{Action: ActEPERM, Conds: []ArgCond{{Arg: 1, Mask: low32, Value: tioclinux}}},
				{Action: ActAllow},
			}},

		{Name: "personality", Group: "processes and threads", Why: "moby's values only: no ADDR_NO_RANDOMIZE or READ_IMPLIES_EXEC",
			Rules: personality},

		{Name: "landlock_create_ruleset", Group: "landlock", Why: noLandlock, Rules: enosys},
		{Name: "landlock_add_rule", Group: "landlock", Why: noLandlock, Rules: enosys},
		{Name: "landlock_restrict_self", Group: "landlock", Why: noLandlock, Rules: enosys},
	}
}

// DefaultSeccomp returns airlock's profile: the container runtimes' default
// allow-list (moby's profiles/seccomp/default.json, the unprivileged part)
// minus the syscalls in refused, with argument rules for clone, socket,
// socketpair, ioctl and personality. Each call returns a fresh copy the
// caller may modify.
func DefaultSeccomp() Seccomp { return defaultSeccomp().Copy() }

// defaultSeccomp builds the profile once: building and sorting it was a
// fifth of a plan's compile time.
var defaultSeccomp = sync.OnceValue(buildDefaultSeccomp)

func buildDefaultSeccomp() Seccomp {
	s := Seccomp{Default: ActEPERM}
	for _, g := range allowed {
		for _, name := range g.names {
			s.Syscalls = append(s.Syscalls, Syscall{Name: name, Group: g.group, Rules: []SyscallRule{{Action: ActAllow}}})
		}
	}
	s.Syscalls = append(s.Syscalls, conditional()...)
	sort.Slice(s.Syscalls, func(i, j int) bool { return s.Syscalls[i].Name < s.Syscalls[j].Name })
	for _, g := range refused {
		s.Refused = append(s.Refused, SyscallGroup{Name: g.Name, Why: g.Why, Names: append([]string(nil), g.Names...)})
	}
	return s
}
