package plan

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"
)

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
	var got []string
	for _, g := range allowed {
		got = append(got, g.names...)
	}
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

// TestRefusedHaveNoAllowRule checks the profile as data, which is what an
// OCI export sees: no rule for a syscall explain calls refused allows it.
func TestRefusedHaveNoAllowRule(t *testing.T) {
	s := DefaultSeccomp()
	if err := s.Validate(); err != nil {
		t.Fatalf("DefaultSeccomp().Validate() = %v", err)
	}
	seen := map[string]bool{}
	for _, g := range s.Refused {
		for _, name := range g.Names {
			if seen[name] {
				t.Errorf("%s is in two refused groups", name)
			}
			seen[name] = true
		}
	}
	for _, sc := range s.Syscalls {
		if sc.Group == "" {
			t.Errorf("syscall %s has no group: explain cannot place it", sc.Name)
		}
		if !seen[sc.Name] {
			continue
		}
		for _, r := range sc.Rules {
			if r.Action == ActAllow {
				t.Errorf("DefaultSeccomp has an allow rule for %s, which it lists as refused", sc.Name)
			}
		}
	}
}

// TestSeccompJSON: the compact wire form nsinit reads gives back the same
// profile, refuses what it does not know, and a name listed both ways
// does not validate.
func TestSeccompJSON(t *testing.T) {
	s := DefaultSeccomp()
	js, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var back Seccomp
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, s) {
		t.Fatal("DefaultSeccomp does not survive JSON")
	}
	for name, bad := range map[string]string{
		"unknown-field": `{"default":"errno(1)","allow":[],"syscalls":[],"extra":1}`,
		"bad-action":    `{"default":"trap","allow":[],"syscalls":[]}`,
	} {
		if err := json.Unmarshal([]byte(bad), &back); err == nil {
			t.Errorf("%s: Unmarshal(%s) = nil error, want an error", name, bad)
		}
	}
	twice := `{"default":"errno(1)","allow":[{"name":"g","names":["read"]}],"syscalls":[{"name":"read","rules":[{"action":"errno(1)"}]}]}`
	if err := json.Unmarshal([]byte(twice), &back); err != nil {
		t.Fatal(err)
	}
	if err := back.Validate(); err == nil {
		t.Error("a syscall both allowed by group and listed with rules validates")
	}
}

// TestDefaultSeccompCopies: each DefaultSeccomp is a copy that shares no
// slice with the cached profile or another copy.
func TestDefaultSeccompCopies(t *testing.T) {
	a, b := DefaultSeccomp(), DefaultSeccomp()
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two DefaultSeccomp calls differ")
	}
	a.Syscalls[0].Name = "changed"
	for i := range a.Syscalls {
		if len(a.Syscalls[i].Rules) > 0 {
			a.Syscalls[i].Rules[0].Action = ActKillProcess
			if len(a.Syscalls[i].Rules[0].Conds) > 0 {
				a.Syscalls[i].Rules[0].Conds[0].Value = 12345
			}
		}
	}
	a.Refused[0].Names[0] = "changed"
	if c := DefaultSeccomp(); !reflect.DeepEqual(b, c) {
		t.Error("changing one DefaultSeccomp changed the next")
	}
}
