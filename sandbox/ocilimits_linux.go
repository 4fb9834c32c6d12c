package sandbox

import (
	"time"

	"github.com/airlock-sandbox/airlock/internal/enforce/cgroup"
	"github.com/airlock-sandbox/airlock/policy/budget"
)

// An OCI container's max_memory and max_pids are cgroup limits the runtime
// sets on the container's own cgroups: the kernel kills the process that
// passes max_memory and refuses the fork past max_pids. As with airlock's
// own cgroup (cgroup_linux.go), the run is then halted and everything in
// it killed: the supervisor reads the kernel's counters in the container's
// cgroups while it runs, and once more when it is over.

// ociLimitPoll is how often the container's counters are read: a run
// that blew a limit is halted within it (the kernel has already refused
// the fork or killed the process), and an idle session is not woken 20
// times a second to read a dozen files (as stage.watch, for the same
// reason).
const ociLimitPoll = 250 * time.Millisecond

// watchOCILimits halts b and kills the container when its cgroups count an
// OOM kill or a refused fork, until stop closes.
func watchOCILimits(b *box, id string, stop <-chan struct{}) {
	t := time.NewTicker(ociLimitPoll)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		if ociLimitHit(b, id) {
			b.kill()
			return
		}
	}
}

// ociLimitHit halts b if the container's cgroups counted a refused fork or
// an OOM kill, and reports whether they did.
func ociLimitHit(b *box, id string) bool {
	ev := cgroup.EventsIn(ociCgroupDirs(id))
	switch {
	case ev.PidsMaxHits > 0:
		b.halt(budget.MaxPids, "the process tree reached max_pids: a fork was refused, and the sandbox was stopped")
	case ev.OOMKills > 0:
		b.halt(budget.MaxMemory, "a process reached max_memory and was killed by the kernel, and the sandbox was stopped")
	default:
		return false
	}
	return true
}
