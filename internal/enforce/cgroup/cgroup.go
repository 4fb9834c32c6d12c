package cgroup

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"
)

// Controller names as the kernel spells them.
const (
	Memory  = "memory"
	Pids    = "pids"
	CPU     = "cpu"
	CPUAcct = "cpuacct" // v1 only: CPU usage where no cgroup2 cpu.stat exists
	Freezer = "freezer" // v1 only: stops a tree before it is killed
)

// Host versions reported by Detect.
const (
	V1     = "v1"     // only cgroup v1 controller hierarchies
	V2     = "v2"     // one cgroup2 hierarchy holding the controllers
	Hybrid = "hybrid" // v1 controllers plus a cgroup2 mount (usually without controllers)
)

// ErrNoController reports that a limit was requested whose controller the
// host does not offer. It is always wrapped in a *ControllerError naming the
// controller; the caller decides whether the policy accepts the downgrade.
var ErrNoController = errors.New("cgroup: controller unavailable")

// ControllerError names the controller a requested limit needs and the host
// lacks (or refused to enable).
type ControllerError struct {
	Controller string // "memory", "pids" or "cpu"
	Reason     string // why it is unavailable, for the report
	Err        error  // underlying errno, nil when the controller is simply absent
}

func (e *ControllerError) Error() string {
	msg := "cgroup: " + e.Controller + " controller unavailable: " + e.Reason
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Is reports whether target is ErrNoController.
func (e *ControllerError) Is(target error) bool { return target == ErrNoController }

// Unwrap returns the underlying errno, if any.
func (e *ControllerError) Unwrap() error { return e.Err }

// Host describes the cgroup layout the supervisor sees. The zero Host has
// no controller and no cgroup2 mount: Create refuses every limit with
// ErrNoController and creates nothing.
type Host struct {
	// Version is V1, V2 or Hybrid; empty when no cgroup filesystem is mounted.
	Version string

	// Controllers maps each usable controller (memory, pids, cpu, cpuacct,
	// freezer) to the mount directory of its hierarchy. A controller whose
	// directory equals Unified is a cgroup v2 controller. Nil means none.
	Controllers map[string]string

	// Unified is the cgroup2 mount directory, "" if there is none.
	Unified string

	// Self maps each mount directory (of Controllers and Unified) to the
	// supervisor's own cgroup directory in it, from /proc/self/cgroup.
	// Groups are created there. A mount without an entry is unusable.
	Self map[string]string

	// KillFile reports whether the cgroup2 hierarchy offers cgroup.kill
	// (Linux 5.14). False means Kill freezes and signals instead.
	KillFile bool

	// Problems lists what Detect found but could not use, for doctor output.
	Problems []string
}

// Config describes one group. The zero Config is invalid: Name is required.
type Config struct {
	// Name is the directory name of the group in every hierarchy. It must
	// start with "airlock-" and be a plain name; use NewName so that
	// Janitor can tell whether its owner is alive.
	Name string

	// MemoryBytes limits memory use, swap excluded (memory.memsw or
	// memory.swap.max = 0, or swappiness 0 where v1 has no swap
	// accounting; Status says which). Zero means no memory limit.
	MemoryBytes int64

	// Pids limits the number of tasks (processes and threads). Zero means
	// no pids limit.
	Pids int64

	// CPUQuota limits CPU time, in cores (0.5 = half of one CPU). Zero
	// means unlimited.
	CPUQuota float64
}

// cpuPeriodUS is the CFS period in microseconds used for CPUQuota.
const cpuPeriodUS = 100000

// minQuotaUS is the smallest CFS quota the kernel accepts (1 ms).
const minQuotaUS = 1000

// validate checks cfg before anything touches the filesystem.
func (cfg Config) validate() error {
	if !strings.HasPrefix(cfg.Name, namePrefix) || len(cfg.Name) == len(namePrefix) {
		return fmt.Errorf("cgroup: name %q: must start with %q and not end there: use NewName", cfg.Name, namePrefix)
	}
	if len(cfg.Name) > 200 {
		return fmt.Errorf("cgroup: name %q: longer than 200 bytes: use NewName", cfg.Name)
	}
	for _, c := range cfg.Name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("cgroup: name %q: character %q not allowed: use letters, digits, '-', '_' and '.'", cfg.Name, c)
		}
	}
	if cfg.MemoryBytes < 0 {
		return fmt.Errorf("cgroup: memory limit %d: negative: use 0 for no limit", cfg.MemoryBytes)
	}
	if cfg.Pids < 0 {
		return fmt.Errorf("cgroup: pids limit %d: negative: use 0 for no limit", cfg.Pids)
	}
	q := cfg.CPUQuota
	if math.IsNaN(q) || math.IsInf(q, 0) || q < 0 {
		return fmt.Errorf("cgroup: cpu quota %v: not a non-negative number of cores: use 0 for no limit", q)
	}
	if q > 0 && quotaUS(q) < minQuotaUS {
		return fmt.Errorf("cgroup: cpu quota %v: below %v cores, the kernel's minimum", q, float64(minQuotaUS)/cpuPeriodUS)
	}
	if q > 1<<20 {
		return fmt.Errorf("cgroup: cpu quota %v: more than %d cores", q, 1<<20)
	}
	return nil
}

func quotaUS(cores float64) int64 { return int64(math.Round(cores * cpuPeriodUS)) }

// Usage is what a group consumed. A field is zero when the host has no
// controller to measure it.
type Usage struct {
	MemoryPeak int64         // highest memory use in bytes (memory.peak, memory.max_usage_in_bytes)
	CPU        time.Duration // CPU time of all tasks, user plus system
	Pids       int64         // tasks in the group now (pids.current)
	PidsPeak   int64         // most tasks at once (pids.peak), 0 on kernels without it
}

// Events counts limit hits in a group. A field is zero when the host has no
// controller to count it.
type Events struct {
	OOMKills    int64 // processes the OOM killer killed inside the group
	PidsMaxHits int64 // forks refused because pids.max was reached
}

// Swap modes reported in Status.
const (
	SwapMemsw      = "memsw"      // v1 memory.memsw.limit_in_bytes equals the memory limit
	SwapMax        = "swap.max"   // v2 memory.swap.max is 0
	SwapSwappiness = "swappiness" // v1 without swap accounting: memory.swappiness 0 only
)

// Status says how a group was set up.
type Status struct {
	Dirs []string // the group's directory in every hierarchy, kill-capable first
	Swap string   // how swap is kept out of the memory limit; "" without a memory limit
	Kill string   // "cgroup.kill", or "freeze+sigkill" / "sigkill" where it is missing
}

// Group is a created cgroup in every hierarchy it needs. The zero Group has
// no directories; its methods do nothing and Destroy returns nil.
type Group struct {
	plan Plan

	mu        sync.Mutex
	fds       []int  // guarded by mu; O_PATH fd of each plan.Dirs entry (-1: none), nil without
	swap      string // guarded by mu; Status.Swap
	destroyed bool   // guarded by mu
}

// Name returns the group's directory name.
func (g *Group) Name() string { return g.plan.Name }
