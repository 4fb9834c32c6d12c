package spec

import (
	"slices"
	"time"

	"github.com/airlock-sandbox/airlock/policy/budget"
	"github.com/airlock-sandbox/airlock/policy/downgrade"
)

// Limits is the budget the runtime enforces around the command, from the
// policy's budget. The supervisor puts the sandbox in a cgroup of Memory
// and Pids and watches its CPU counter; export/oci writes Memory and Pids
// as linux.resources, export/k8s all of them as the Pod's resources and
// deadline. Everything else is counted by the supervisor (or, for an
// export, by whoever runs it).
type Limits struct {
	// Memory is the cgroup memory limit in bytes (max_memory), with no swap.
	Memory int64 `json:"memory_bytes"`
	// Pids is the cgroup limit on tasks at once (max_pids).
	Pids int64 `json:"pids"`
	// CPU is the CPU time of the whole process tree (max_cpu): the
	// supervisor halts the run when the cgroup's counter reaches it, and
	// RLIMIT_CPU (Rlimits) bounds each process.
	CPU time.Duration `json:"cpu_ns"`
	// Wall is the deadline from the start (max_wall).
	Wall time.Duration `json:"wall_ns"`
	// Output bounds the stdout and stderr bytes captured (max_output_bytes).
	Output int64 `json:"output_bytes"`
	// Ops bounds the boundary crossings: proxy connections, file API
	// operations (max_ops).
	Ops int64 `json:"ops"`
	// Write bounds the bytes added to fs_write grants: the size of the
	// stage (max_write).
	Write int64 `json:"write_bytes"`
	// Scratch is the size of the /tmp tmpfs (max_scratch).
	Scratch int64 `json:"scratch_bytes"`
	// Downgrades are the cgroup limits (max_memory, max_pids, max_cpu)
	// the policy accepts running without when the host cannot enforce
	// them (allow_downgrade). Empty: a run that cannot have them is
	// refused.
	Downgrades []downgrade.Layer `json:"downgrades,omitempty"`
}

// Budget returns the limits as the budget meter takes them
// (budget.NewMeter).
func (l Limits) Budget() budget.Limits {
	return budget.Limits{Wall: l.Wall, OutputBytes: l.Output, Ops: l.Ops, Memory: l.Memory, CPU: l.CPU, Pids: l.Pids, Scratch: l.Scratch, Write: l.Write}
}

// AcceptsDowngrade reports whether the policy accepts running without the
// cgroup limit d.
func (l Limits) AcceptsDowngrade(d downgrade.Layer) bool { return slices.Contains(l.Downgrades, d) }
