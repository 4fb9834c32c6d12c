package seccomp

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// Install loads prog as a seccomp filter on every thread of the calling
// process, with seccomp(SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC)
// (seccomp(2); Linux 3.17, and 4.14 for the SECCOMP_RET_KILL_PROCESS that
// Build emits). The filter cannot be removed and is inherited by every
// child and kept across execve.
//
// It first sets no_new_privs (prctl(2) PR_SET_NO_NEW_PRIVS, Linux 3.5) if
// it is not already set: the kernel requires it for an unprivileged
// filter, and it stops the sandboxed program from gaining privileges
// through set-user-ID binaries or file capabilities. TSYNC carries both the
// filter and no_new_privs to the other threads; Go's runtime has several.
//
// Preconditions:
//   - runs in the sandbox's init child (nsinit), never in the supervisor
//     or a test process: the filter is irreversible;
//   - runs after every other setup step (mounts, Landlock, capabilities,
//     rlimits), because the filter refuses the syscalls they need, and
//     immediately before execve of the command;
//   - prog comes from Build; it is validated again here.
func Install(prog []Insn) error {
	if err := Validate(prog); err != nil {
		return fmt.Errorf("seccomp: install filter: %w", err)
	}
	// prctl and seccomp must run on the same thread: no_new_privs is a
	// per-thread flag until TSYNC copies it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	filters, err := prepareThread(prog)
	if err != nil {
		return err
	}
	tid, err := setFilter(filters, unix.SECCOMP_FILTER_FLAG_TSYNC)
	if err != nil {
		return fmt.Errorf("seccomp: install filter: %w: the kernel must be Linux 3.17 or later with CONFIG_SECCOMP_FILTER", err)
	}
	if tid != 0 {
		// With TSYNC, a positive return is a thread whose existing filters
		// are not an ancestor of ours; nothing was installed anywhere.
		return fmt.Errorf("seccomp: install filter: thread %d could not be synchronized: it has a seccomp filter of its own; install from a process whose threads share one filter", tid)
	}
	return nil
}
