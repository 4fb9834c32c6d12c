package nsinit

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/enforce/landlock"
	"github.com/airlock-sandbox/airlock/internal/enforce/seccomp"
	"github.com/airlock-sandbox/airlock/plan/spec"
)

// restrict applies, in order: Landlock, rlimits, capabilities, no_new_privs
// and seccomp. It returns the Landlock ABI enforced (0 = none, only when
// the plan accepts the downgrade) and, for transparent egress, the
// seccomp filter's listener, which the caller hands to the supervisor and
// closes (-1 otherwise).
//
// Preconditions:
//   - runs on the locked OS thread that will fork the command
//   - pivot_root is done: rule paths are the sandbox's
func restrict(pl *spec.Plan) (abi, listener int, err error) {
	abi, err = applyLandlock(pl)
	if err != nil {
		return 0, -1, fail("landlock", err)
	}
	if err := applyRlimits(pl.Rlimits); err != nil {
		return 0, -1, fail("rlimits", err)
	}
	if len(pl.Capabilities) != 0 {
		return 0, -1, fail("capabilities", fmt.Errorf("airlock bug: the plan keeps capabilities %v: the init can only drop every one", pl.Capabilities))
	}
	if err := dropCapabilities(); err != nil {
		return 0, -1, fail("capabilities", err)
	}
	// Not dumpable: the command cannot read this init's memory or fds via /proc.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return 0, -1, fail("dumpable", err)
	}
	if !pl.NoNewPrivileges {
		return 0, -1, fail("no_new_privs", errors.New("airlock bug: the plan does not set no_new_privs, which the seccomp filter needs"))
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return 0, -1, fail("no_new_privs", err)
	}
	listener = -1
	if pl.Transparent {
		// connect(2) goes to the supervisor: the same filter on every
		// thread, as installSeccomp does, with a listener (Linux 5.7).
		prog, err := seccomp.Build(pl.Seccomp, seccomp.Options{})
		if err == nil {
			listener, err = seccomp.InstallListenerAll(prog)
		}
		if err != nil {
			return 0, -1, fail("seccomp", err)
		}
		return abi, listener, nil
	}
	if err := installSeccomp(pl); err != nil {
		return 0, -1, fail("seccomp", err)
	}
	return abi, -1, nil
}

func applyLandlock(pl *spec.Plan) (int, error) {
	cfg := landlock.Config{
		// The network namespace holds only lo (setupNetwork verifies it), so
		// connect() can reach nothing but the sandbox's own servers and the
		// egress proxy: a port allow-list would only break local servers.
		AnyConnect:        true,
		ScopeSignals:      true,
		ScopeAbstractUnix: true,
		LogNewExec:        true,
		SelfTestPath:      "/",
		// The command is forked from this locked thread, so it inherits the
		// thread's domain; AllThreadsSyscall is unavailable in -race builds.
		ThreadOnly: true,
	}
	cfg.Paths = landlockPaths(pl)
	st, err := landlock.Restrict(cfg)
	if err != nil {
		if !pl.RequireLandlock && errors.Is(err, errors.ErrUnsupported) {
			return 0, nil // the policy accepted the downgrade; the report says so
		}
		return 0, err
	}
	return st.ABI, nil
}

// landlockPaths merges the plan's rules into one rule per path, skipping
// paths the root does not have (nothing to grant there).
func landlockPaths(pl *spec.Plan) []landlock.PathRule {
	var paths []landlock.PathRule
	seen := map[string]int{}
	for _, r := range pl.Rules {
		if _, err := os.Stat(r.Path); err != nil {
			continue
		}
		a := landlock.Access(0)
		if r.Access&spec.Read != 0 {
			a |= landlock.Read
		}
		if r.Access&spec.Write != 0 {
			a |= landlock.Write
		}
		if r.Access&spec.Execute != 0 {
			a |= landlock.Execute
		}
		if i, ok := seen[r.Path]; ok {
			paths[i].Access |= a
			continue
		}
		seen[r.Path] = len(paths)
		paths = append(paths, landlock.PathRule{Path: r.Path, Access: a})
	}
	return paths
}

var rlimitNames = map[string]int{
	"core":   unix.RLIMIT_CORE,
	"nofile": unix.RLIMIT_NOFILE,
	"fsize":  unix.RLIMIT_FSIZE,
	"cpu":    unix.RLIMIT_CPU,
	"nproc":  unix.RLIMIT_NPROC,
	"as":     unix.RLIMIT_AS,
}

// rlimit returns the resource and the limits setrlimit(2) gets for r.
func rlimit(r spec.Rlimit) (int, unix.Rlimit, error) {
	res, ok := rlimitNames[r.Resource]
	if !ok {
		return 0, unix.Rlimit{}, fmt.Errorf("airlock bug: unknown rlimit %q", r.Resource)
	}
	if r.Hard < r.Value {
		return 0, unix.Rlimit{}, fmt.Errorf("airlock bug: rlimit %s: hard %d below soft %d", r.Resource, r.Hard, r.Value)
	}
	return res, unix.Rlimit{Cur: r.Value, Max: r.Hard}, nil
}

func applyRlimits(rs []spec.Rlimit) error {
	for _, r := range rs {
		res, lim, err := rlimit(r)
		if err != nil {
			return err
		}
		var old unix.Rlimit
		if err := unix.Getrlimit(res, &old); err == nil && old.Max < lim.Max {
			// Hard limits can be lowered, never raised (no CAP_SYS_RESOURCE).
			lim.Max = old.Max
			lim.Cur = min(lim.Cur, old.Max)
		}
		if err := unix.Setrlimit(res, &lim); err != nil {
			return fmt.Errorf("setrlimit %s=%d: %w", r.Resource, r.Value, err)
		}
	}
	return nil
}

// dropCapabilities empties every capability set of the calling thread and
// locks the securebits so execve cannot grant any back (capabilities(7)).
func dropCapabilities() error {
	last := 40
	if b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			last = n
		}
	}
	for c := 0; c <= last; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	// SECBIT_NOROOT|_LOCKED, SECBIT_NO_SETUID_FIXUP|_LOCKED, SECBIT_KEEP_CAPS_LOCKED,
	// SECBIT_NO_CAP_AMBIENT_RAISE|_LOCKED (linux/securebits.h).
	const bits = 0x01 | 0x02 | 0x04 | 0x08 | 0x20 | 0x40 | 0x80
	if err := unix.Prctl(unix.PR_SET_SECUREBITS, bits, 0, 0, 0); err != nil {
		return fmt.Errorf("lock securebits: %w", err)
	}
	return dropHeldCapabilities()
}

// dropHeldCapabilities empties the calling thread's ambient, permitted,
// effective and inheritable sets, which needs no privilege.
func dropHeldCapabilities() error {
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}
