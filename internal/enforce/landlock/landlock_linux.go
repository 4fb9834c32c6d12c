package landlock

import (
	"errors"
	"fmt"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// ABI returns the kernel's Landlock ABI version, from
// landlock_create_ruleset(2) with LANDLOCK_CREATE_RULESET_VERSION (Linux
// 5.13). The error wraps ErrABI and the errno when Landlock is not built in
// (ENOSYS) or not enabled at boot (EOPNOTSUPP).
func ABI() (int, error) {
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 {
		return 0, fmt.Errorf("landlock: query ABI version: %w (%w): boot with lsm=...,landlock or use a kernel built with CONFIG_SECURITY_LANDLOCK", errno, ErrABI)
	}
	return int(v), nil
}

// Restrict confines the process to cfg for good: it compiles cfg for the
// kernel's ABI, creates the ruleset, adds one rule per path (opened with
// O_PATH, symlinks followed) and per port, sets no_new_privs, enforces the
// ruleset on every thread (or the calling one, with cfg.ThreadOnly) and then
// proves with SelfTest that cfg.SelfTestPath is denied.
//
// On error the caller must not start the command: the process may already
// be partly restricted.
//
// Preconditions:
//   - runs in the sandbox's init, after pivot_root, before seccomp and execve
//   - every cfg.Paths entry exists as the sandbox sees it
//   - with cfg.ThreadOnly, the command is started from the calling goroutine
//   - without cfg.ThreadOnly, the binary does not link cgo
func Restrict(cfg Config) (Status, error) {
	abi, err := ABI()
	if err != nil {
		return Status{}, err
	}
	rs, err := Compile(cfg, abi)
	if err != nil {
		return Status{}, err
	}
	fd, err := createRuleset(rs)
	if err != nil {
		return Status{}, fmt.Errorf("landlock: landlock_create_ruleset: %w: check the kernel's Landlock ABI", err)
	}
	defer unix.Close(fd)
	for _, r := range rs.Paths {
		if err := addPath(fd, rs, r); err != nil {
			return Status{}, err
		}
	}
	for _, p := range rs.Ports {
		if err := addPortRule(fd, p); err != nil {
			return Status{}, fmt.Errorf("landlock: add rule for TCP port %d: %w", p.Port, err)
		}
	}
	allThreads := !cfg.ThreadOnly
	if !allThreads {
		// Never unlocked: a goroutine that exits while locked takes its
		// thread with it, so no other goroutine ever runs restricted
		// by surprise, and the goroutine that execs stays restricted.
		runtime.LockOSThread()
	}
	// prctl(2) PR_SET_NO_NEW_PRIVS (Linux 3.5): landlock_restrict_self
	// needs it unless the caller has CAP_SYS_ADMIN, and the command must
	// never gain privileges through a setuid binary anyway.
	if err := threadsSyscall(allThreads, unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1); err != nil {
		return Status{}, fmt.Errorf("landlock: set no_new_privs: %w", err)
	}
	// landlock_restrict_self(2) (ABI 1; flags ABI 7) confines only the
	// calling thread before ABI 8, hence every thread in turn.
	if err := threadsSyscall(allThreads, unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(fd), uintptr(rs.Flags)); err != nil {
		return Status{}, fmt.Errorf("landlock: landlock_restrict_self: %w", err)
	}
	if err := SelfTest(rs.SelfTestPath); err != nil {
		return Status{}, err
	}
	return rs.status(allThreads), nil
}

// threadsSyscall makes a two-argument syscall on every OS thread of the
// process, or only on the calling one.
func threadsSyscall(allThreads bool, trap, a1, a2 uintptr) error {
	var errno syscall.Errno
	if allThreads {
		_, _, errno = syscall.AllThreadsSyscall6(trap, a1, a2, 0, 0, 0, 0)
		if errno == syscall.ENOTSUP {
			return fmt.Errorf("every thread: %w: the binary links cgo; build with CGO_ENABLED=0, or set ThreadOnly and execve from the calling goroutine", errno)
		}
	} else {
		_, _, errno = unix.Syscall6(trap, a1, a2, 0, 0, 0, 0)
	}
	if errno != 0 {
		return errno
	}
	return nil
}

// addPath opens r.Path and adds the rule for what kind of file it is.
func addPath(rulesetFD int, rs *Ruleset, r PathRule) error {
	// open(2) O_PATH (Linux 2.6.39) needs no read permission and has no
	// side effect on devices or fifos; fstat(2) on it works since 3.6.
	fd, err := unix.Open(r.Path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("landlock: open path rule %q: %w: create it in the sandbox or remove the rule", r.Path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("landlock: stat path rule %q: %w", r.Path, err)
	}
	if err := addPathRule(rulesetFD, fd, rs.PathAccess(r.Access, kindOf(st.Mode))); err != nil {
		return fmt.Errorf("landlock: add rule for %q (%v): %w", r.Path, r.Access, err)
	}
	return nil
}

func kindOf(mode uint32) Kind {
	switch mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return Dir
	case unix.S_IFCHR, unix.S_IFBLK:
		return Device
	default:
		return File
	}
}

// SelfTest reports whether Landlock denies reading denied, as it must once
// a ruleset that does not grant it is enforced: it returns nil only when
// open(2) fails with EACCES. If the open works, Landlock did not take effect
// and the run must stop. Any other error is returned too, because it proves
// nothing.
func SelfTest(denied string) error {
	// O_NONBLOCK so that a fifo cannot block; O_NOCTTY so that a terminal
	// cannot become the controlling one.
	fd, err := unix.Open(denied, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	switch {
	case err == nil:
		unix.Close(fd)
		return fmt.Errorf("landlock: self-test: %q opened for reading: landlock did not take effect: do not start the command", denied)
	case errors.Is(err, unix.EACCES):
		return nil
	default:
		return fmt.Errorf("landlock: self-test: open %q: %w: choose a SelfTestPath that exists and file permissions allow reading", denied, err)
	}
}
