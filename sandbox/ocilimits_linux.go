package sandbox

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/airlock-sandbox/airlock/policy/budget"
)

// An OCI container's max_memory and max_pids are cgroup limits the runtime
// sets on the container's own cgroups: the kernel kills the process that
// passes max_memory and refuses the fork past max_pids. As with airlock's
// own cgroup (cgroup_linux.go), the run is then halted and everything in
// it killed: the supervisor reads the kernel's counters in the container's
// cgroups while it runs, and once more when it is over.

// ociLimitPoll is how often the container's counters are read.
const ociLimitPoll = 50 * time.Millisecond

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
	oom, pidsMax := ociEvents(id)
	switch {
	case pidsMax > 0:
		b.halt(budget.MaxPids, "the process tree reached max_pids: a fork was refused, and the sandbox was stopped")
	case oom > 0:
		b.halt(budget.MaxMemory, "a process reached max_memory and was killed by the kernel, and the sandbox was stopped")
	default:
		return false
	}
	return true
}

// ociEvents sums what the container's cgroups in every hierarchy counted:
// OOM kills (memory.events on cgroup v2, memory.oom_control on v1, both
// counting the group's descendants) and refused forks (pids.events).
func ociEvents(id string) (oom, pidsMax int64) {
	for _, d := range ociCgroupDirs(id) {
		oom += eventCount(filepath.Join(d, "memory.events"), "oom_kill")
		oom += eventCount(filepath.Join(d, "memory.oom_control"), "oom_kill")
		pidsMax += eventCount(filepath.Join(d, "pids.events"), "max")
	}
	return oom, pidsMax
}

// eventCount is the value of key in a cgroup file of "key value" lines,
// 0 when the file or the key is absent.
func eventCount(path, key string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, l := range bytes.Split(b, []byte("\n")) {
		if k, v, ok := bytes.Cut(l, []byte(" ")); ok && string(k) == key {
			n, _ := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
			return n
		}
	}
	return 0
}
