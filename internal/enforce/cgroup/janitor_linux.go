package cgroup

import (
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"
)

// NewName returns a fresh group name for a supervisor with the given pid:
// "airlock-<pid>-<starttime>-<16 random hex digits>". The start time
// (proc(5) /proc/<pid>/stat field 22) lets OwnerAlive tell a live owner from
// a recycled pid.
func NewName(supervisorPid int) (string, error) {
	_, start, err := procStat(supervisorPid)
	if err != nil {
		return "", fmt.Errorf("cgroup: new name for pid %d: %w: pass a live process, usually os.Getpid()", supervisorPid, err)
	}
	var r [8]byte
	if _, err := rand.Read(r[:]); err != nil {
		return "", fmt.Errorf("cgroup: new name: %w", err)
	}
	return formatName(supervisorPid, start, r), nil
}

// procStat returns the state (field 3) and start time (field 22) of pid.
func procStat(pid int) (state byte, start uint64, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	start, err = parseStartTime(string(b))
	if err != nil {
		return 0, 0, err
	}
	return procState(string(b)), start, nil
}

// OwnerAlive reports whether the supervisor that NewName made name for is
// still running: its pid exists, is not a zombie, and has the start time
// recorded in the name. It reports true when it cannot tell (a name it
// does not parse, /proc unreadable), so that callers err on keeping a
// group. Pids are those of the caller's pid namespace.
func OwnerAlive(name string) bool {
	pid, start, ok := ParseName(name)
	if !ok {
		return true
	}
	state, got, err := procStat(pid)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH) {
		return false
	}
	if err != nil {
		return true
	}
	return got == start && state != 'Z' && state != 'X'
}

// Janitor removes groups whose owner is gone: every directory named by
// NewName (ParseName accepts it) directly below the supervisor's own cgroup
// in each hierarchy of h, for which alive reports false, is killed and
// removed like Destroy does. Nil alive means OwnerAlive. It returns the
// removed directories; failures are joined into the error and the rest
// still proceeds. Groups created below another supervisor's cgroup are not
// seen.
func Janitor(h Host, alive func(name string) bool) ([]string, error) {
	if alive == nil {
		alive = OwnerAlive
	}
	mounts := []string{}
	if h.Unified != "" {
		mounts = append(mounts, h.Unified) // cgroup2 first: it can kill
	}
	for _, c := range known {
		if m := h.Controllers[c]; m != "" && !slices.Contains(mounts, m) {
			mounts = append(mounts, m)
		}
	}
	found := map[string][]Dir{}
	var names []string
	var errs []error
	for _, m := range mounts {
		self := h.Self[m]
		if self == "" {
			continue
		}
		entries, err := os.ReadDir(self)
		if err != nil {
			errs = append(errs, fmt.Errorf("cgroup: janitor: list %s: %w", self, err))
			continue
		}
		var ctls []string
		for _, c := range known {
			if h.Controllers[c] == m {
				ctls = append(ctls, c)
			}
		}
		for _, e := range entries {
			if _, _, ok := ParseName(e.Name()); !ok || !e.IsDir() {
				continue
			}
			if _, seen := found[e.Name()]; !seen {
				names = append(names, e.Name())
			}
			found[e.Name()] = append(found[e.Name()], Dir{
				Path: filepath.Join(self, e.Name()), Parent: self, V2: m == h.Unified, Controllers: ctls,
			})
		}
	}
	var removed []string
	for _, name := range names {
		if alive(name) {
			continue
		}
		g := &Group{plan: Plan{Name: name, Dirs: found[name]}}
		if err := g.Destroy(); err != nil {
			errs = append(errs, fmt.Errorf("cgroup: janitor: %w", err))
			continue
		}
		for _, d := range found[name] {
			removed = append(removed, d.Path)
		}
	}
	return removed, errors.Join(errs...)
}
