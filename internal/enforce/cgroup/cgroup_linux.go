package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Detect reads /proc/self/mountinfo and /proc/self/cgroup (proc(5),
// cgroups(7)) and, for cgroup2, the supervisor cgroup's cgroup.controllers
// and cgroup.subtree_control. It never writes. What it cannot use is listed
// in Host.Problems rather than returned as an error.
func Detect() (Host, error) {
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return Host{}, fmt.Errorf("cgroup: detect: %w: mount /proc", err)
	}
	pc, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return Host{}, fmt.Errorf("cgroup: detect: %w: the kernel needs CONFIG_CGROUPS", err)
	}
	return buildHost(string(mi), string(pc), detectEnv{
		readFile:   os.ReadFile,
		exists:     exists,
		killAtRoot: kernelAtLeast(5, 14),
	})
}

func exists(name string) bool {
	_, err := os.Lstat(name)
	return err == nil
}

// kernelAtLeast reports whether uname(2)'s release is major.minor or later.
func kernelAtLeast(major, minor int) bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	rel := unix.ByteSliceToString(u.Release[:])
	f := strings.FieldsFunc(rel, func(r rune) bool { return r < '0' || r > '9' })
	if len(f) < 2 {
		return false
	}
	ma, _ := strconv.Atoi(f[0])
	mi, _ := strconv.Atoi(f[1])
	return ma > major || ma == major && mi >= minor
}

// Create makes the group in every hierarchy its plan needs (see NewPlan),
// below the supervisor's own cgroup, and writes the limits. A limit whose
// controller is missing, or that cgroup v2 refuses to enable, yields a
// *ControllerError (errors.Is ErrNoController). On any error Create removes
// the directories it made; "+controller" writes to a parent's
// cgroup.subtree_control are left in place, as other groups may rely on them.
//
// Preconditions:
//   - the caller may create directories in the supervisor's cgroups (root,
//     or a delegated cgroup2 subtree)
func Create(h Host, cfg Config) (*Group, error) {
	p, err := NewPlan(h, cfg)
	if err != nil {
		return nil, err
	}
	g := &Group{plan: p}
	created, err := g.apply()
	if err != nil {
		g.closeFDs()
		for i := len(created) - 1; i >= 0; i-- {
			if rerr := unix.Rmdir(created[i]); rerr != nil && !errors.Is(rerr, unix.ENOENT) {
				err = errors.Join(err, fmt.Errorf("cgroup: undo: rmdir %s: %w", created[i], rerr))
			}
		}
		return nil, err
	}
	return g, nil
}

// apply runs the plan and returns the directories it created.
func (g *Group) apply() (created []string, err error) {
	for _, w := range g.plan.Enable {
		if err := g.write(w.Path, w.Value); err != nil {
			if w.Optional {
				continue // accounting only: Usage reports zero for it
			}
			return nil, &ControllerError{
				Controller: strings.TrimPrefix(w.Value, "+"),
				Reason:     "cannot enable it in " + w.Path + " (the parent cgroup holds processes or did not delegate it)",
				Err:        err,
			}
		}
	}
	for _, d := range g.plan.Dirs {
		if err := unix.Mkdir(d.Path, 0o755); err != nil {
			if errors.Is(err, unix.EEXIST) {
				return created, fmt.Errorf("cgroup: mkdir %s: %w: a group of that name exists, use NewName", d.Path, err)
			}
			return created, fmt.Errorf("cgroup: mkdir %s: %w: run as root or in a delegated cgroup", d.Path, err)
		}
		created = append(created, d.Path)
	}
	if err := g.openDirs(len(created)); err != nil {
		return created, err
	}
	for _, w := range g.plan.Limits {
		err := g.write(w.Path, w.Value)
		if errors.Is(err, unix.ENOENT) && w.IfMissing != nil {
			w = *w.IfMissing
			err = g.write(w.Path, w.Value)
		}
		if err != nil {
			return created, err
		}
		if w.Swap != "" {
			g.swap = w.Swap
		}
	}
	return created, nil
}

// Add moves pid (with all its threads) into the group in every hierarchy,
// the cgroup2 directory first.
//
// A process forking between two of these writes leaves its child behind in
// some hierarchies. Start the process blocked (waiting on a pipe) and
// release it only after Add returns; where UnifiedFD is available, also
// start it with SysProcAttr.UseCgroupFD so it is in the killable cgroup2
// group from its first instruction.
//
// Preconditions:
//   - pid is not the calling process (the supervisor must stay outside)
func (g *Group) Add(pid int) error {
	if pid <= 0 || pid == os.Getpid() {
		return fmt.Errorf("cgroup: add pid %d to %s: not a child process: pass the sandbox's pid", pid, g.plan.Name)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.destroyed || len(g.plan.Dirs) == 0 {
		return fmt.Errorf("cgroup: add pid %d to %s: group is destroyed or empty: Create a new one", pid, g.plan.Name)
	}
	for _, d := range g.plan.Dirs {
		if err := g.write(filepath.Join(d.Path, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
			return err
		}
	}
	return nil
}

// AddCloned is Add for a process started with UnifiedFD
// (SysProcAttr.UseCgroupFD, clone3 CLONE_INTO_CGROUP): it is in the
// cgroup2 directory since its first instruction, so only the v1
// hierarchies are written. Each cgroup.procs write takes the kernel's
// global cgroup_threadgroup_rwsem for writing, which holds up every fork
// and exit on the host meanwhile; the write that would change nothing is
// not made. Without a cgroup2 directory it is Add.
//
// Preconditions: as for Add, and pid was started with this group's
// UnifiedFD.
func (g *Group) AddCloned(pid int) error {
	if pid <= 0 || pid == os.Getpid() {
		return fmt.Errorf("cgroup: add pid %d to %s: not a child process: pass the sandbox's pid", pid, g.plan.Name)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.destroyed || len(g.plan.Dirs) == 0 {
		return fmt.Errorf("cgroup: add pid %d to %s: group is destroyed or empty: Create a new one", pid, g.plan.Name)
	}
	for _, d := range g.plan.Dirs {
		if d.V2 {
			continue
		}
		if err := g.write(filepath.Join(d.Path, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
			return err
		}
	}
	return nil
}

// UnifiedFD returns an O_PATH directory fd of the group's cgroup2
// directory, for SysProcAttr.UseCgroupFD / clone3 CLONE_INTO_CGROUP
// (clone(2), Linux 5.7). It reports false when the host has no cgroup2
// mount. The group owns the fd: do not close it; Destroy does.
func (g *Group) UnifiedFD() (int, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if d, ok := g.plan.cgroup2(); ok {
		return g.fdOf(d.Path)
	}
	return -1, false
}

// Status says where the group lives, how swap is excluded and how Kill
// works.
func (g *Group) Status() Status {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := Status{Swap: g.swap, Kill: "sigkill"}
	for _, d := range g.plan.Dirs {
		s.Dirs = append(s.Dirs, d.Path)
		if d.has(Freezer) {
			s.Kill = "freeze+sigkill"
		}
	}
	if d, ok := g.plan.cgroup2(); ok {
		switch {
		case exists(filepath.Join(d.Path, "cgroup.kill")):
			s.Kill = "cgroup.kill"
		case exists(filepath.Join(d.Path, "cgroup.freeze")):
			s.Kill = "freeze+sigkill"
		}
	}
	return s
}

// Destroy kills every process in the group, waits until it is empty (at
// most about 5 seconds) and removes its directories, nested ones included,
// in every hierarchy. It is idempotent: after one call succeeds, later ones
// return nil. On error the group is left for a retry or for Janitor.
func (g *Group) Destroy() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.destroyed {
		return nil
	}
	err := g.kill()
	for i := len(g.plan.Dirs) - 1; i >= 0; i-- {
		if rerr := g.removeTree(g.plan.Dirs[i].Path); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}
	if err != nil {
		return err
	}
	g.closeFDs()
	g.destroyed = true
	return nil
}

// removeTree removes dir and the cgroups nested in it, deepest first. A
// cgroup directory is removed with rmdir(2) even though it lists control
// files; EBUSY means it still holds a task, so rmdir is retried briefly.
// The caller holds g.mu.
func (g *Group) removeTree(dir string) error {
	dirs, err := g.walk(dir)
	if err != nil {
		return err
	}
	for _, d := range dirs {
		p := newPoller(rmdirWait)
		for {
			err := unix.Rmdir(d)
			if err == nil || errors.Is(err, unix.ENOENT) {
				break
			}
			if !errors.Is(err, unix.EBUSY) || !p.wait() {
				return fmt.Errorf("cgroup: rmdir %s: %w: processes may remain; run Janitor later", d, err)
			}
		}
	}
	return nil
}

// maxDepth bounds how deep walk follows nested cgroups.
const maxDepth = 16

// walk returns dir and every directory below it, children before parents.
// A dir that does not exist yields nothing. The caller holds g.mu.
func (g *Group) walk(dir string) ([]string, error) {
	var out []string
	var visit func(d string, depth int) error
	visit = func(d string, depth int) error {
		if depth > maxDepth {
			return fmt.Errorf("cgroup: %s: nested deeper than %d: remove it by hand", d, maxDepth)
		}
		subs, ok, err := g.subdirs(d)
		if err != nil || !ok {
			return err
		}
		for _, sub := range subs {
			if err := visit(sub, depth+1); err != nil {
				return err
			}
		}
		out = append(out, d)
		return nil
	}
	return out, visit(dir, 0)
}
