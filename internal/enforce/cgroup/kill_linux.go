package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// Bounds on waiting for the kernel. The package polls with a short,
// growing interval; it never waits unboundedly.
const (
	killTimeout    = 5 * time.Second        // all of Kill
	cgroupKillWait = 2 * time.Second        // after cgroup.kill, before falling back to signals
	rmdirWait      = 500 * time.Millisecond // rmdir EBUSY retries per directory
	pollMax        = 10 * time.Millisecond  // longest single poll interval
)

// poller spends a bounded budget of waiting time in growing steps. It counts
// the time it slept instead of reading the clock.
type poller struct {
	left, step time.Duration
}

func newPoller(budget time.Duration) poller {
	return poller{left: budget, step: 100 * time.Microsecond}
}

// wait sleeps one step and reports whether budget was left to do so.
func (p *poller) wait() bool {
	if p.left <= 0 {
		return false
	}
	d := min(p.step, p.left)
	time.Sleep(d)
	p.left -= d
	p.step = min(2*p.step, pollMax)
	return true
}

// Kill kills every process in the group, nested groups included, and waits
// until the group is empty (at most about 5 seconds). It writes cgroup.kill
// (Linux 5.14) where the group has a cgroup2 directory; otherwise, or if
// processes remain, it freezes the group (cgroup.freeze or the v1 freezer)
// and sends SIGKILL to every listed process, again and again until none is
// left. Signals go through pidfds that are checked against a second reading
// of cgroup.procs, so a recycled pid outside the group is never signalled.
func (g *Group) Kill() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.kill()
}

func (g *Group) kill() error {
	if len(g.plan.Dirs) == 0 {
		return nil
	}
	// A group is usually empty by the time it is destroyed (its tree died
	// with its pid namespace). Writing cgroup.kill would then only wait
	// for the kernel's global cgroup_mutex, behind every other group's
	// mkdir, rmdir and move.
	if empty, err := g.empty(); err == nil && empty {
		return nil
	}
	p := newPoller(killTimeout)
	if d, ok := g.plan.cgroup2(); ok {
		err := g.write(filepath.Join(d.Path, "cgroup.kill"), "1")
		if err == nil {
			wait := newPoller(cgroupKillWait)
			for {
				empty, err := g.empty()
				if err == nil && empty {
					return nil
				}
				if !wait.wait() {
					break
				}
			}
			p.left -= cgroupKillWait - wait.left
		}
	}
	return g.signalLoop(&p)
}

// signalLoop freezes, lists, signals and thaws until the group is empty or
// the poller's budget is spent.
func (g *Group) signalLoop(p *poller) error {
	freeze, frozen, thawed := g.freezer()
	var lastErr error
	for {
		if freeze != "" {
			// A group that cannot be frozen is still killed; freezing only
			// stops it from forking while the list is being read.
			_ = g.write(freeze, frozen) // error ignored: see above
		}
		pids, err := g.procs()
		if err == nil && len(pids) == 0 {
			if freeze != "" {
				_ = g.write(freeze, thawed) // empty group: state no longer matters
			}
			return nil
		}
		if err != nil {
			lastErr = err
		}
		g.signal(pids)
		if freeze != "" {
			// Frozen v1 tasks die only once thawed.
			if err := g.write(freeze, thawed); err != nil && !errors.Is(err, unix.ENOENT) {
				lastErr = err
			}
		}
		if !p.wait() {
			return fmt.Errorf("cgroup: kill %s: %d processes still present after %v (last error: %v): retry Destroy or run Janitor", g.plan.Name, len(pids), killTimeout, lastErr)
		}
	}
}

// freezer returns the freeze control file and its frozen and thawed values.
func (g *Group) freezer() (file, frozen, thawed string) {
	if d, ok := g.plan.cgroup2(); ok && exists(filepath.Join(d.Path, "cgroup.freeze")) {
		return filepath.Join(d.Path, "cgroup.freeze"), "1", "0"
	}
	if d, ok := g.plan.dir(Freezer); ok {
		return filepath.Join(d.Path, "freezer.state"), "FROZEN", "THAWED"
	}
	return "", "", ""
}

// signal sends SIGKILL to each pid that is still in the group after a pidfd
// to it was opened (pidfd_open(2), Linux 5.3): if the pid was recycled in
// between, the fd refers to the dead process and the signal goes nowhere.
func (g *Group) signal(pids []int) {
	self := os.Getpid()
	fds := map[int]int{}
	for _, pid := range pids {
		if pid == self {
			continue // never kill the supervisor, even if someone added it
		}
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			if errors.Is(err, unix.ENOSYS) {
				fds[pid] = -1
			}
			continue // ESRCH: already gone
		}
		fds[pid] = fd
	}
	again, _ := g.procs() // on error nothing is confirmed and nothing signalled
	for _, pid := range again {
		fd, ok := fds[pid]
		switch {
		case !ok:
		case fd >= 0:
			_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0) // ESRCH: it died meanwhile
		default:
			// Kernels before 5.3: kill(2) after the second listing leaves
			// a short window for pid reuse; the group is frozen if it can be.
			_ = unix.Kill(pid, unix.SIGKILL)
		}
	}
	for _, fd := range fds {
		if fd >= 0 {
			_ = unix.Close(fd) // pidfd: nothing to flush
		}
	}
}

// procs lists the processes in every directory of the group and below it.
func (g *Group) procs() ([]int, error) {
	seen := map[int]bool{}
	var out []int
	for _, d := range g.plan.Dirs {
		dirs, err := g.walk(d.Path)
		if err != nil {
			return out, err
		}
		for _, sub := range dirs {
			name := filepath.Join(sub, "cgroup.procs")
			b, err := g.read(name)
			if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENODEV) {
				continue // removed meanwhile
			}
			if err != nil {
				return out, fmt.Errorf("cgroup: read %s: %w", name, err)
			}
			pids, err := pidList(name, string(b))
			if err != nil {
				return out, err
			}
			for _, p := range pids {
				if !seen[p] {
					seen[p] = true
					out = append(out, p)
				}
			}
		}
	}
	return out, nil
}

// empty reports whether no process is left in any hierarchy of the group.
func (g *Group) empty() (bool, error) {
	for _, d := range g.plan.Dirs {
		if !d.V2 {
			continue
		}
		// cgroup.events "populated" covers nested groups too.
		b, err := g.read(filepath.Join(d.Path, "cgroup.events"))
		if err == nil {
			if n, ok := keyed(string(b), "populated"); ok && n != 0 {
				return false, nil
			}
		}
	}
	pids, err := g.procs()
	return err == nil && len(pids) == 0, err
}
