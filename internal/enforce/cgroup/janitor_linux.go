package cgroup

import (
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

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

// JanitorShared runs Janitor for every supervisor that creates its groups
// below the same cgroup, at most about once per cooldown, and reports
// whether this call ran a pass.
//
// Janitor reads /proc for the owner of every group it lists, so when N
// supervisors start together each pays for N and the burst for N²: 8.5%
// of all CPU during a burst of 200 runs on 2 cores (perf), and growing with
// N. One pass serves them all: the pass holds flock(2) on the supervisors'
// own cgroup directory (the first hierarchy's, cgroup2 where there is one)
// while it runs and for cooldown afterwards, or until its process exits;
// a call that finds the lock held returns at once. A group whose owner
// dies after a pass listed it is removed by the first pass after the
// cooldown: later, but not lost. If the directory cannot be locked the
// pass runs unshared.
//
// Any process that can open that directory can hold the lock too and so
// postpone passes: that delays the removal of dead owners' groups, and
// changes no limit of any live group.
func JanitorShared(h Host, cooldown time.Duration) (bool, []string, error) {
	mounts := janitorMounts(h)
	if len(mounts) > 0 {
		if self := h.Self[mounts[0]]; self != "" {
			fd, err := unix.Open(self, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err == nil {
				if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); errors.Is(err, unix.EWOULDBLOCK) {
					unix.Close(fd) // a directory: nothing to flush
					return false, nil, nil
				}
				// Locked, or flock unsupported (then unshared). The deferred
				// call starts the cooldown once the pass is over; closing
				// the directory then releases the lock and loses nothing.
				defer time.AfterFunc(max(cooldown, 0), func() { unix.Close(fd) })
			}
		}
	}
	removed, err := Janitor(h, nil)
	return true, removed, err
}

// janitorMounts lists the hierarchies Janitor scans, cgroup2 first.
func janitorMounts(h Host) []string {
	mounts := []string{}
	if h.Unified != "" {
		mounts = append(mounts, h.Unified) // cgroup2 first: it can kill
	}
	for _, c := range known {
		if m := h.Controllers[c]; m != "" && !slices.Contains(mounts, m) {
			mounts = append(mounts, m)
		}
	}
	return mounts
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
	mounts := janitorMounts(h)
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
		// Under a burst, most dead owners were alive at the listing and
		// removed their group before exiting: skip those at the cost of
		// one lstat per directory instead of a whole Destroy.
		dirs := slices.DeleteFunc(found[name], func(d Dir) bool { return !exists(d.Path) })
		if len(dirs) == 0 {
			continue
		}
		g := &Group{plan: Plan{Name: name, Dirs: dirs}}
		if err := g.Destroy(); err != nil {
			errs = append(errs, fmt.Errorf("cgroup: janitor: %w", err))
			continue
		}
		for _, d := range dirs {
			removed = append(removed, d.Path)
		}
	}
	return removed, errors.Join(errs...)
}
