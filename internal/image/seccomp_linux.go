package image

import (
	"fmt"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/enforce/seccomp"
	"github.com/airlock-sandbox/airlock/plan/spec"
)

// childSyscalls are all the unpack's child may call once it is confined,
// by group; every other syscall fails with EPERM. Landlock leaves a file's
// mode, owner, times and extended attributes to the file permissions, and
// without namespaces the child runs as the user: no syscall that changes
// them by path is here (fchmod on an fd the child opened beneath its root
// is), nor mount, ptrace, socket, or new processes.
var childSyscalls = []spec.SyscallGroup{
	{Name: "go runtime: memory", Names: []string{"mmap", "munmap", "mprotect", "madvise"}},
	{Name: "go runtime: threads and signals", Names: []string{"futex", "gettid", "getpid", "tgkill", "sched_yield", "sched_getaffinity",
		"set_robust_list", "rseq", "exit", "exit_group", "sigaltstack", "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "restart_syscall"}},
	{Name: "go runtime: time and randomness", Names: []string{"nanosleep", "clock_gettime", "clock_nanosleep", "gettimeofday", "getrandom"}},
	{Name: "go runtime: the poller", Names: []string{"epoll_create1", "epoll_ctl", "epoll_pwait", "epoll_pwait2", "epoll_wait", "eventfd2", "fcntl"}},
	{Name: "files beneath the entry's root, by fd", Names: []string{"read", "write", "pread64", "writev", "close", "dup", "lseek", "openat", "openat2",
		"newfstatat", "fstat", "statx", "getdents64", "mkdirat", "unlinkat", "symlinkat", "linkat", "fchmod"}},
	{Name: "the socket to the caller", Names: []string{"sendmsg", "recvmsg"}},
	{Name: "who it is", Names: []string{"getuid", "geteuid", "getgid", "getegid", "capget"}},
}

// childFilter builds the child's filter: childSyscalls, and clone for new
// threads only (CLONE_THREAD), the Go runtime's (clone3 answers ENOSYS).
func childFilter() ([]seccomp.Insn, error) {
	p := spec.Seccomp{Default: spec.ActEPERM}
	for _, g := range childSyscalls {
		for _, n := range g.Names {
			p.Syscalls = append(p.Syscalls, spec.Syscall{Name: n, Group: g.Name, Rules: []spec.SyscallRule{{Action: spec.ActAllow}}})
		}
	}
	const threads = "go runtime: threads and signals"
	p.Syscalls = append(p.Syscalls, spec.Syscall{Name: "clone", Group: threads, Rules: []spec.SyscallRule{{
		Action: spec.ActAllow, Conds: []spec.ArgCond{{Arg: 0, Mask: unix.CLONE_THREAD, Value: unix.CLONE_THREAD}},
	}}}, spec.Syscall{Name: "clone3", Group: threads, Why: "ENOSYS: its flags are in memory the filter cannot read; libc (a cgo build's threads) falls back to clone",
		Rules: []spec.SyscallRule{{Action: spec.ActENOSYS}}})
	slices.SortFunc(p.Syscalls, func(a, b spec.Syscall) int { return strings.Compare(a.Name, b.Name) })
	prog, err := seccomp.Build(p, seccomp.Options{})
	if err != nil {
		return nil, fmt.Errorf("the unpack's seccomp filter: %w", err)
	}
	return prog, nil
}
