package cgroup

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Detect reads /proc/self/mountinfo and the calling thread's cgroups
// (/proc/thread-self/cgroup: proc(5), cgroups(7)) and, for cgroup2, the
// supervisor cgroup's cgroup.controllers
// and cgroup.subtree_control. It never writes. What it cannot use is listed
// in Host.Problems rather than returned as an error.
func Detect() (Host, error) {
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return Host{}, fmt.Errorf("cgroup: detect: %w: mount /proc", err)
	}
	// The thread's own, not /proc/self/cgroup: that file shows the thread
	// group leader's, and the leader may be the thread that Start moves
	// into a sandbox's v1 groups for a moment. A group made below that one
	// would be nested in another sandbox's, and its Start's thread would
	// "return" into it. Every other thread of the supervisor stays in the
	// supervisor's cgroups (Start's thread creates no thread: the runtime
	// creates threads for a locked one from its template thread).
	pc, err := os.ReadFile("/proc/thread-self/cgroup")
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
	return created, g.writeLimits(g.plan.Limits)
}

// writeLimits makes the limit writes ws. The caller holds g.mu or owns g
// alone.
func (g *Group) writeLimits(ws []Write) error {
	for _, w := range ws {
		err := g.write(w.Path, w.Value)
		if errors.Is(err, unix.ENOENT) && w.IfMissing != nil {
			w = *w.IfMissing
			err = g.write(w.Path, w.Value)
		}
		if err != nil {
			return err
		}
		if w.Swap != "" {
			g.swap = w.Swap
		}
	}
	return nil
}

// Limit sets cfg's limits (cfg.Name is ignored) on a group that Create
// made without them: a group made ahead of its sandbox, for a warm init
// (sandbox.Pool), gets the limits of the sandbox it is given to before
// anything runs in it. A limit whose controller the group lacks, or that
// cgroup v2 did not enable in it, is a *ControllerError (errors.Is
// ErrNoController); on any error the limits written so far stay and the
// caller destroys the group.
//
// Preconditions:
//   - nothing but a process waiting for its plan runs in the group
func (g *Group) Limit(cfg Config) error {
	cfg.Name = g.plan.Name
	if err := cfg.validate(); err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.destroyed {
		return fmt.Errorf("cgroup: limit %s: group is destroyed: Create a new one", g.plan.Name)
	}
	ws, err := g.plan.limitWrites(cfg)
	if err != nil {
		return err
	}
	err = g.writeLimits(ws)
	if errors.Is(err, unix.ENOENT) {
		// A v2 controller no limit asked for at Create is enabled only if
		// the parent allows it: its files are missing otherwise.
		return &ControllerError{Controller: controllerOf(err), Reason: "not enabled in this group (the parent cgroup did not delegate it)", Err: err}
	}
	return err
}

// controllerOf names the controller of the control file in err's path.
func controllerOf(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		base := filepath.Base(pe.Path)
		if c, _, ok := strings.Cut(base, "."); ok {
			return c
		}
	}
	return "unknown"
}

// Start starts cmd inside the group in every hierarchy: the process is in
// the group from its first instruction, so it cannot fork anything outside
// it, and no process is ever moved between groups.
//
// How: the cgroup2 directory is given to clone3 (SysProcAttr.UseCgroupFD,
// CLONE_INTO_CGROUP, Linux 5.7). For cgroup v1, which has no such flag,
// the calling thread moves itself into each v1 directory (it writes "0" to
// the tasks file: cgroups(7)), starts cmd, which inherits the thread's
// groups, and moves itself back to its own cgroup. A thread moving itself
// is what the kernel does without cgroup_threadgroup_rwsem, a global lock
// that writing another process's pid to cgroup.procs takes for writing:
// that write waits for an RCU grace period (10 to 20 ms for three v1
// hierarchies on the development VM, against 0.2 ms for the thread's
// round trip) and holds up every fork and exit on the host meanwhile.
// While the thread is inside, the group counts it in pids.current and
// charges its CPU time to the group; nothing else runs on it.
//
// Start locks the calling goroutine to its thread for the move (nested
// with a lock the caller may hold: the thread that forks is the one
// SysProcAttr.Pdeathsig is tied to). If the thread cannot move back, it is
// left locked, so the Go runtime ends it with its goroutine rather than
// reuse a thread that sits in a sandbox's group, and Start returns the
// error with cmd started: the caller kills it and destroys the group, which
// succeeds once the goroutine has ended (or Janitor's next pass).
//
// Preconditions:
//   - cmd.Process is nil (cmd was not started)
//   - cmd.SysProcAttr does not set UseCgroupFD itself
func (g *Group) Start(cmd *exec.Cmd) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.destroyed || len(g.plan.Dirs) == 0 {
		return fmt.Errorf("cgroup: start %s in %s: group is destroyed or empty: Create a new one", cmd.Path, g.plan.Name)
	}
	if d, ok := g.plan.cgroup2(); ok {
		fd, ok := g.fdOf(d.Path)
		if !ok {
			return fmt.Errorf("cgroup: start %s in %s: airlock bug: the cgroup2 directory is not held open", cmd.Path, g.plan.Name)
		}
		if cmd.SysProcAttr == nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{}
		}
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, fd
	}
	runtime.LockOSThread()
	entered, err := g.enterThread()
	if err == nil {
		err = cmd.Start()
	}
	if lerr := g.leaveThread(entered); lerr != nil {
		// Keep the thread locked: it dies with its goroutine.
		return errors.Join(err, lerr)
	}
	runtime.UnlockOSThread()
	return err
}

// enterThread moves the calling thread into the group's v1 directories
// and returns the ones it entered. The caller holds g.mu and the thread.
func (g *Group) enterThread() (entered []int, err error) {
	for i, d := range g.plan.Dirs {
		if d.V2 {
			continue
		}
		if err := g.write(filepath.Join(d.Path, "tasks"), "0"); err != nil {
			return entered, err
		}
		entered = append(entered, i)
	}
	return entered, nil
}

// leaveThread moves the calling thread back from the v1 directories it
// entered to the supervisor's own cgroup in each. The caller holds g.mu
// and the thread.
func (g *Group) leaveThread(entered []int) error {
	var err error
	for _, i := range entered {
		d := g.plan.Dirs[i]
		if werr := g.write(filepath.Join(d.Parent, "tasks"), "0"); werr != nil {
			err = errors.Join(err, fmt.Errorf("cgroup: the supervisor's thread could not leave %s: %w", d.Path, werr))
		}
	}
	return err
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
