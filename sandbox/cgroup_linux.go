package sandbox

import (
	"errors"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/internal/enforce/cgroup"
	"github.com/airlock-sandbox/airlock/plan"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
)

// janitorCooldown is how long one supervisor's janitor pass spares the
// others below the same cgroup theirs (cgroup.JanitorShared), and how long
// a supervisor waits before it tries again.
const janitorCooldown = time.Second

// janitorNext is when this process next tries a janitor pass (UnixNano).
var janitorNext atomic.Int64

// sweep removes, at most once per janitorCooldown per process, the groups
// of supervisors that died without removing theirs. A long-lived
// supervisor (airlock serve) keeps sweeping: a pass that another
// supervisor's recent one made it skip does not cover the owners that
// died since (before, each process swept once).
func sweep(h cgroup.Host) {
	now := time.Now().UnixNano()
	next := janitorNext.Load()
	if now < next || !janitorNext.CompareAndSwap(next, now+int64(janitorCooldown)) {
		return
	}
	_, _, _ = cgroup.JanitorShared(h, janitorCooldown) // best effort: leftovers of crashed supervisors
}

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
	g, h, err := newGroup(cgroup.Config{MemoryBytes: lim.Memory, Pids: lim.Pids})
	return decideLimits(lim, sink, g, h, err)
}

// newGroup makes a cgroup below the supervisor's own with cfg's limits
// (cfg.Name is picked here), and returns the host's layout with it.
func newGroup(cfg cgroup.Config) (*cgroup.Group, cgroup.Host, error) {
	h, err := cgroup.Detect()
	if err != nil {
		return nil, h, err
	}
	sweep(h)
	if cfg.Name, err = cgroup.NewName(os.Getpid()); err != nil {
		return nil, h, err
	}
	g, err := cgroup.Create(h, cfg)
	return g, h, err
}

// cgroupLayers are the budgets the run's cgroup enforces.
var cgroupLayers = []policy.Downgrade{policy.DowngradeMemory, policy.DowngradePids, policy.DowngradeCPU}

// downgradeRlimits returns what stands in for the cgroup's limits that the
// downgrades taken give up: RLIMIT_NPROC for max_pids. (max_cpu's
// RLIMIT_CPU is in every plan; nothing stands in for max_memory: an
// RLIMIT_AS would bind airlock's own init, whose limits the command
// inherits, and its Go runtime reserves more address space than a budget.)
func downgradeRlimits(lim plan.Limits, downgrades []string) []plan.Rlimit {
	var rl []plan.Rlimit
	if slices.Contains(downgrades, string(policy.DowngradePids)) && lim.Pids > 0 {
		rl = append(rl, plan.Rlimit{Resource: "nproc", Value: uint64(lim.Pids), Hard: uint64(lim.Pids),
			Why: "max_pids without a pids cgroup: the processes and threads of the sandbox's uid (allow_downgrade: max_pids)"})
	}
	return rl
}

// decideLimits makes the run's limits from the group g, or, when making it
// failed with err, refuses the run or accepts the downgrades the plan
// allows.
func decideLimits(lim plan.Limits, sink audit.Sink, g *cgroup.Group, h cgroup.Host, err error) (*limits, error) {
	l := &limits{host: h, maxCPU: lim.CPU}
	if err == nil {
		l.group = g
		return l, nil
	}
	// Without the group nothing counts the tree's CPU time (RLIMIT_CPU
	// counts each process's), so max_cpu is a downgrade too.
	var missing unenforceable
	for _, d := range cgroupLayers {
		if !lim.AcceptsDowngrade(d) {
			missing.add(d, err.Error())
		}
	}
	if len(missing.layers) > 0 {
		return nil, &missing
	}
	for _, d := range cgroupLayers {
		l.downgrades = append(l.downgrades, string(d))
	}
	sink.Emit(audit.Event{Time: time.Now(), Kind: audit.Info, Layer: audit.LayerKernel, Rule: "allow_downgrade",
		Message: "running without cgroup memory, pids and cpu limits, as the policy allows: " + err.Error()})
	return l, nil
}

// How watch paces its reads of the group's counters.
//
// Every wake-up costs the supervisor CPU for as long as the run lives, so
// its rate decides whether a run's cost grows with the load: reading six
// control files every 50 ms cost an idle run 8.5 ms of CPU per second, and
// under a burst of 200 runs on 2 cores (at half a CPU) a run's CPU grew
// from 19 ms to 48 ms. So watch wakes for the kernel's own announcements
// (cgroup.Notifier) and otherwise at most every watchMax, sooner only when
// max_cpu could be reached before then: 0.9 ms per second.
const (
	// watchMin is the shortest pause between two reads, close to max_cpu:
	// the tree may overrun max_cpu by at most this much times the number
	// of CPUs, as before.
	watchMin = 50 * time.Millisecond
	// watchMax is the longest pause: how late a halt for a counter the
	// kernel does not announce (cgroup v1 pids.events) can come. The
	// limit itself is enforced by the kernel all along; finish reads the
	// counters again after the run, so no hit goes unreported.
	watchMax = 500 * time.Millisecond
)

// nextWatch returns how long watch may wait before it reads the counters
// again, with cpuLeft of max_cpu left: the tree cannot spend more than
// ncpu seconds of CPU per second, so no later read can be too late.
func nextWatch(cpuLeft time.Duration, ncpu int) time.Duration {
	if cpuLeft <= 0 {
		return watchMin
	}
	return min(max(cpuLeft/time.Duration(max(ncpu, 1)), watchMin), watchMax)
}

// watch reads the group's counters until stop closes and halts the box
// when a limit that the kernel enforces by refusing (pids) or by counting
// (cpu) is reached, or when the OOM killer struck; finish reads them once
// more at the end.
func (l *limits) watch(b *box, stop <-chan struct{}, kill func()) {
	if l.group == nil {
		return
	}
	maxCPU := l.maxCPU
	ncpu := possibleCPUs()
	n, err := l.group.Notify() // nil on error: the timer alone paces the reads
	if err != nil {
		b.log.Debug("cgroup notifications unavailable; reading counters on a timer", "err", err)
	}
	defer n.Close()
	t := time.NewTimer(nextWatch(maxCPU, ncpu))
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		case <-n.C():
		}
		if l.limitHit(b) {
			kill()
			return
		}
		used, err := l.group.CPU()
		if err == nil && used >= maxCPU {
			b.halt(budget.MaxCPU, "the process tree used max_cpu of CPU time and was killed")
			kill()
			return
		}
		t.Reset(nextWatch(maxCPU-used, ncpu))
	}
}

// limitHit halts the box if the kernel counted a refused fork or an OOM
// kill in the group, and reports whether it did.
func (l *limits) limitHit(b *box) bool {
	ev, err := l.group.Events()
	switch {
	case err != nil:
		return false
	case ev.PidsMaxHits > 0:
		b.halt(budget.MaxPids, "the process tree reached max_pids and was killed")
	case ev.OOMKills > 0:
		b.halt(budget.MaxMemory, "a process reached max_memory and the sandbox was killed")
	default:
		return false
	}
	return true
}

// possibleCPUs returns how many CPUs the kernel may ever run the sandbox
// on (/sys/devices/system/cpu/possible, read once per process): an upper
// bound, since the sandbox may widen its own affinity. When the list
// cannot be read it returns 1024, which only makes watch read sooner.
var possibleCPUs = sync.OnceValue(readPossibleCPUs)

func readPossibleCPUs() int {
	b, err := os.ReadFile("/sys/devices/system/cpu/possible")
	if err != nil {
		return 1024
	}
	n, ok := countCPUList(string(b))
	if !ok {
		return 1024
	}
	return max(n, runtime.NumCPU(), 1)
}

// countCPUList counts the CPUs of a kernel CPU list such as "0-3,8-11\n"
// (cpuset(7), "List format").
func countCPUList(list string) (int, bool) {
	n := 0
	for _, part := range strings.Split(strings.TrimSpace(list), ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		if !isRange {
			hi = lo
		}
		a, err1 := strconv.Atoi(lo)
		z, err2 := strconv.Atoi(hi)
		if err1 != nil || err2 != nil || a < 0 || z < a || z-a >= 1<<20 {
			return 0, false
		}
		n += z - a + 1
	}
	return n, n > 0
}

// usage returns the group's CPU time and peak memory so far; false
// without a group.
func (l *limits) usage() (Usage, bool) {
	if l == nil || l.group == nil {
		return Usage{}, false
	}
	peak, cpu, err := l.group.MemoryCPU()
	if err != nil {
		return Usage{}, false
	}
	return Usage{CPUMS: cpu.Milliseconds(), MaxMemoryBytes: peak}, true
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
	if ok && u.CPUMS >= l.maxCPU.Milliseconds() {
		b.halt(budget.MaxCPU, "the process tree used max_cpu of CPU time")
	}
	if err := l.group.Destroy(); err != nil && !errors.Is(err, os.ErrNotExist) {
		b.log.Error("cgroup destroy", "err", err)
	}
	return u
}
