package sandbox

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/internal/enforce/cgroup"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
)

var janitorOnce sync.Once

// limits is the cgroup side of one run: the group (nil when the policy
// accepted running without one) and the downgrades taken.
type limits struct {
	done       sync.Once // finish runs once
	group      *cgroup.Group
	host       cgroup.Host
	downgrades []string
}

// newLimits creates the run's cgroup with memory and pids limits. A missing
// controller, or no permission to use one (rootless without delegation),
// refuses the run unless the policy accepts the downgrade for every budget
// that would go unenforced.
func newLimits(p *policy.Policy, sink audit.Sink) (*limits, error) {
	h, err := cgroup.Detect()
	l := &limits{host: h}
	if err == nil {
		janitorOnce.Do(func() {
			_, _ = cgroup.Janitor(h, nil) // best effort: leftovers of crashed supervisors
		})
		var name string
		name, err = cgroup.NewName(os.Getpid())
		if err == nil {
			b := p.Budget()
			l.group, err = cgroup.Create(h, cgroup.Config{Name: name, MemoryBytes: b.Memory, Pids: b.Pids})
		}
	}
	if err == nil {
		return l, nil
	}
	for _, d := range []policy.Downgrade{policy.DowngradeMemory, policy.DowngradePids} {
		if !p.AcceptsDowngrade(d) {
			return nil, fmt.Errorf("cgroup limits for %s cannot be enforced here: %w; or add %q to allow_downgrade (--allow-downgrade %s) to run without them", d, err, d, d)
		}
	}
	l.downgrades = []string{string(policy.DowngradeMemory), string(policy.DowngradePids)}
	sink.Emit(audit.Event{Time: time.Now(), Kind: audit.Info, Layer: audit.LayerKernel, Rule: "allow_downgrade",
		Message: "running without cgroup memory and pids limits, as the policy allows: " + err.Error()})
	return l, nil
}

// watch polls the group's counters until stop closes and halts the box
// when a limit that the kernel enforces by refusing (pids) or by counting
// (cpu) is reached; the counters are read once more at the end (finish).
func (l *limits) watch(b *box, stop <-chan struct{}, kill func()) {
	if l.group == nil {
		return
	}
	maxCPU := b.cfg.Policy.Budget().CPU
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
				b.halt(budget.MaxPids, "the process tree reached max_pids and was killed")
				kill()
				return
			}
			if ev.OOMKills > 0 {
				b.halt(budget.MaxMemory, "a process reached max_memory and the sandbox was killed")
				kill()
				return
			}
		}
		if u, err := l.group.Usage(); err == nil && u.CPU >= maxCPU {
			b.halt(budget.MaxCPU, "the process tree used max_cpu of CPU time and was killed")
			kill()
			return
		}
	}
}

// usage returns the group's CPU time and peak memory so far; false
// without a group.
func (l *limits) usage() (Usage, bool) {
	if l == nil || l.group == nil {
		return Usage{}, false
	}
	u, err := l.group.Usage()
	if err != nil {
		return Usage{}, false
	}
	return Usage{CPUMS: u.CPU.Milliseconds(), MaxMemoryBytes: u.MemoryPeak}, true
}

// cpu returns the group's CPU time so far in milliseconds (0 without one).
func (l *limits) cpu() int64 {
	u, _ := l.usage()
	return u.CPUMS
}

// finish decides the late halts from the kernel's counters, returns the
// final usage and removes the group. Only the first call does anything.
func (l *limits) finish(b *box) Usage {
	var u Usage
	if l == nil || l.group == nil {
		return u
	}
	l.done.Do(func() { u = l.finishOnce(b) })
	return u
}

func (l *limits) finishOnce(b *box) Usage {
	// The kernel's own counters decide, once everything is dead: a run
	// that hit a limit is halted even when it ended before the watcher's
	// next look (a shell exits at once when a fork fails).
	if ev, err := l.group.Events(); err == nil {
		if ev.PidsMaxHits > 0 {
			b.halt(budget.MaxPids, "the process tree reached max_pids: a fork was refused, and the sandbox was stopped")
		}
		if ev.OOMKills > 0 {
			b.halt(budget.MaxMemory, "a process reached max_memory and was killed by the kernel")
		}
	}
	u, ok := l.usage()
	if ok && u.CPUMS >= b.cfg.Policy.Budget().CPU.Milliseconds() {
		b.halt(budget.MaxCPU, "the process tree used max_cpu of CPU time")
	}
	if err := l.group.Destroy(); err != nil && !errors.Is(err, os.ErrNotExist) {
		b.log.Error("cgroup destroy", "err", err)
	}
	return u
}
