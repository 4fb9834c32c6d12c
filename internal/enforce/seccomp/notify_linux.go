package seccomp

import (
	"errors"
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// InstallListener loads prog as a seccomp filter on the calling thread
// only, with seccomp(SECCOMP_SET_MODE_FILTER,
// SECCOMP_FILTER_FLAG_NEW_LISTENER) (seccomp(2), seccomp_unotify(2);
// Linux 5.0), and returns the filter's notification listener: the fd on
// which a supervisor receives every syscall for which prog returns
// SECCOMP_RET_USER_NOTIF (plan.ActNotify) and answers it (see
// internal/enforce/connbroker). The kernel creates the fd close-on-exec;
// the caller owns it and must hand it to the supervisor and then close its
// own copy, because the sandboxed program must never hold a listener for
// its own filter.
//
// Unlike Install it does not use SECCOMP_FILTER_FLAG_TSYNC: the kernel
// refuses TSYNC together with NEW_LISTENER unless TSYNC_ESRCH is also
// given, and the backend that uses it filters one thread, which then
// starts the sandboxed program with execve (a filter is inherited by every
// child and kept across execve). It sets no_new_privs (prctl(2)
// PR_SET_NO_NEW_PRIVS, Linux 3.5) on the calling thread first if it is not
// already set, as Install does.
//
// The kernel allows one listener per filter chain: it fails with EBUSY
// when the thread already has a filter with a listener.
//
// Preconditions:
//   - runs in a process that will execve the sandboxed program (or in a
//     test's child), never in the supervisor or a test process: the
//     filter is irreversible;
//   - InstallListener locks the calling goroutine to its OS thread and
//     never unlocks it; the caller must not undo that lock (no extra
//     runtime.UnlockOSThread). The thread is tainted for good: when the
//     goroutine exits the Go runtime ends the thread instead of reusing
//     it, and a locked thread never clones new runtime threads, so the
//     filter stays on this thread and its future children only;
//   - the syscalls that must happen under the filter (connect, execve) run
//     on this goroutine;
//   - prog comes from Build; it is validated again here.
func InstallListener(prog []Insn) (int, error) {
	if err := Validate(prog); err != nil {
		return -1, fmt.Errorf("seccomp: install filter with listener: %w", err)
	}
	// Never unlocked: see Preconditions. Locking first also makes the
	// runtime start its template thread now, from an unfiltered thread,
	// so threads created later are never cloned from this one.
	runtime.LockOSThread()
	filters, err := prepareThread(prog)
	if err != nil {
		return -1, err
	}
	fd, err := setFilter(filters, unix.SECCOMP_FILTER_FLAG_NEW_LISTENER)
	switch {
	case errors.Is(err, unix.EBUSY):
		return -1, fmt.Errorf("seccomp: install filter with listener: %w: the thread already has a filter with a listener; install one listener per thread", err)
	case err != nil:
		return -1, fmt.Errorf("seccomp: install filter with listener: %w: the kernel must be Linux 5.0 or later with CONFIG_SECCOMP_FILTER", err)
	}
	return int(fd), nil
}

// InstallListenerAll is InstallListener on every thread of the process:
// seccomp(SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC |
// SECCOMP_FILTER_FLAG_TSYNC_ESRCH | SECCOMP_FILTER_FLAG_NEW_LISTENER)
// (Linux 5.7), so that, as with Install, no thread of the process is left
// unfiltered, and the filter's listener comes back as with
// InstallListener. It fails (installing nothing) when a thread cannot be
// synchronized, and on kernels that refuse the flags together.
//
// Preconditions: those of Install, and the caller owns the listener as
// with InstallListener.
func InstallListenerAll(prog []Insn) (int, error) {
	if err := Validate(prog); err != nil {
		return -1, fmt.Errorf("seccomp: install filter with listener: %w", err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	filters, err := prepareThread(prog)
	if err != nil {
		return -1, err
	}
	fd, err := setFilter(filters, unix.SECCOMP_FILTER_FLAG_TSYNC|unix.SECCOMP_FILTER_FLAG_TSYNC_ESRCH|unix.SECCOMP_FILTER_FLAG_NEW_LISTENER)
	switch {
	case errors.Is(err, unix.ESRCH):
		return -1, fmt.Errorf("seccomp: install filter with listener: a thread could not be synchronized: it has a seccomp filter of its own; install from a process whose threads share one filter")
	case errors.Is(err, unix.EBUSY):
		return -1, fmt.Errorf("seccomp: install filter with listener: %w: a thread already has a filter with a listener", err)
	case err != nil:
		return -1, fmt.Errorf("seccomp: install filter with listener on every thread: %w: the kernel must be Linux 5.7 or later with CONFIG_SECCOMP_FILTER", err)
	}
	return int(fd), nil
}

// prepareThread sets no_new_privs on the calling thread, which the caller
// has locked, if it is not set yet, and returns prog as the kernel's
// struct sock_filter array.
func prepareThread(prog []Insn) ([]unix.SockFilter, error) {
	nnp, err := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0)
	if err != nil {
		return nil, fmt.Errorf("seccomp: read no_new_privs: %w: the kernel must be Linux 3.5 or later", err)
	}
	if nnp != 1 {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return nil, fmt.Errorf("seccomp: set no_new_privs: %w", err)
		}
	}
	filters := make([]unix.SockFilter, len(prog))
	for i, in := range prog {
		filters[i] = unix.SockFilter{Code: in.Code, Jt: in.Jt, Jf: in.Jf, K: in.K}
	}
	return filters, nil
}
