package sandbox

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/internal/enforce/cgroup"
	"github.com/airlock-sandbox/airlock/plan"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
)

var janitorOnce sync.Once

// limits is the cgroup side of one run: the group (nil when the policy
// accepted running without one), the downgrades taken and the plan's CPU
// budget for the tree.
type limits struct {
	done       sync.Once // finish runs once
	group      *cgroup.Group
	host       cgroup.Host
	downgrades []string
	maxCPU     time.Duration
}

// newLimits creates the run's cgroup with the plan's memory and pids
// limits. A missing controller, or no permission to use one (rootless
// without delegation), refuses the run unless the plan accepts the
// downgrade for every budget that would go unenforced.
func newLimits(lim plan.Limits, sink audit.Sink) (*limits, error) {
	h, err := cgroup.Detect()
	l := &limits{host: h, maxCPU: lim.CPU}
	if err == nil {
		janitorOnce.Do(func() {
			_, _ = cgroup.Janitor(h, nil) // best effort: leftovers of crashed supervisors
		})
		var name string
		name, err = cgroup.NewName(os.Getpid())
		if err == nil {
			l.group, err = cgroup.Create(h, cgroup.Config{Name: name, MemoryBytes: lim.Memory, Pids: lim.Pids})
		}
	}
	if err == nil {
		return l, nil
	}
	for _, d := range []policy.Downgrade{policy.DowngradeMemory, policy.DowngradePids} {
		if !lim.AcceptsDowngrade(d) {
			return nil, fmt.Errorf("cgroup limits for %s cannot be enforced here: %w; or add %q to allow_downgrade (--allow-downgrade %s) to run without them", d, err, d, d)
		}
	}
	l.downgrades = []string{string(policy.DowngradeMemory), string(policy.DowngradePids)}
	sink.Emit(audit.Event{Time: time.Now(), Kind: audit.Info, Layer: audit.LayerKernel, Rule: "allow_downgrade",
		Message: "running without cgroup memory and pids limits, as the policy allows: " + err.Error()})
	return l, nil
}

// watch polls the group's counters until stop closes and halts the run
// when a limit that the kernel enforces by refusing (pids) or by counting
// (cpu) is reached; OOM kills are read once more at the end.
func (l *limits) watch(r *run, stop <-chan struct{}, kill func()) {
	if l.group == nil {
		return
	}
	maxCPU := l.maxCPU
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		if ev, err := l.group.Events(); err == nil {
			if ev.PidsMaxHits > 0 {
				r.halt(budget.MaxPids, "the process tree reached max_pids and was killed")
				kill()
				return
			}
			if ev.OOMKills > 0 {
				r.halt(budget.MaxMemory, "a process reached max_memory and the run was killed")
				kill()
				return
			}
		}
		if u, err := l.group.Usage(); err == nil && u.CPU >= maxCPU {
			r.halt(budget.MaxCPU, "the process tree used max_cpu of CPU time and was killed")
			kill()
			return
		}
	}
}

// finish records usage and late halts, then removes the group. Only the
// first call does anything.
func (l *limits) finish(r *run) {
	if l.group == nil {
		return
	}
	l.done.Do(func() { l.finishOnce(r) })
}

func (l *limits) finishOnce(r *run) {
	// The kernel's own counters decide, once everything is dead: a run
	// that hit a limit is halted even when it ended before the watcher's
	// next look (a shell exits at once when a fork fails).
	if ev, err := l.group.Events(); err == nil {
		if ev.PidsMaxHits > 0 {
			r.halt(budget.MaxPids, "the process tree reached max_pids: a fork was refused, and the run was stopped")
		}
		if ev.OOMKills > 0 {
			r.halt(budget.MaxMemory, "a process reached max_memory and was killed by the kernel")
		}
	}
	if u, err := l.group.Usage(); err == nil {
		r.report.Usage.MaxMemoryBytes = u.MemoryPeak
		if u.CPU > 0 {
			r.report.Usage.CPUMS = u.CPU.Milliseconds()
		}
		if u.CPU >= l.maxCPU {
			r.halt(budget.MaxCPU, "the process tree used max_cpu of CPU time")
		}
	}
	if err := l.group.Destroy(); err != nil && !errors.Is(err, os.ErrNotExist) {
		r.log.Error("cgroup destroy", "err", err)
	}
}
