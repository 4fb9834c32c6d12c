package cgroup

import (
	"fmt"
	"path/filepath"
	"strconv"
)

// Dir is the group's directory in one hierarchy.
type Dir struct {
	Path   string // the group directory: Parent joined with the group name
	Parent string // the supervisor's own cgroup directory in this hierarchy
	// V2 reports a cgroup2 directory, which has cgroup.kill, cgroup.events,
	// cgroup.freeze and cpu.stat even when it holds no controller.
	V2 bool
	// Controllers lists the controllers used in this directory; empty for
	// the controller-less cgroup2 mount of a hybrid host.
	Controllers []string
}

// has reports whether d uses controller c.
func (d Dir) has(c string) bool {
	for _, x := range d.Controllers {
		if x == c {
			return true
		}
	}
	return false
}

// Write is one value written to one control file.
type Write struct {
	Path  string // absolute path of the control file
	Value string // exactly what is written

	// Swap, when not empty, is the Status.Swap mode this write establishes.
	Swap string

	// IfMissing is written instead when Path does not exist because the
	// kernel runs without that feature (v1 without swap accounting). Nil
	// means a missing file is an error.
	IfMissing *Write

	// Optional marks a write that only adds accounting (enabling a v2
	// controller no limit asked for): if it fails, the group is created
	// without that controller and Usage reports zero for it. Limits are
	// never optional.
	Optional bool
}

// Plan is what Create does, as data, in this order: the Enable writes, a
// mkdir for every Dir, then the Limits writes. NewPlan builds it without
// touching the filesystem.
type Plan struct {
	Name   string  // the group's directory name
	Enable []Write // cgroup v2 "+controller" writes to the parents' cgroup.subtree_control
	Dirs   []Dir   // the cgroup2 directory first (it can kill), then v1 hierarchies
	Limits []Write // limit writes in the order the kernel needs them
}

// dir returns the directory holding controller c.
func (p Plan) dir(c string) (Dir, bool) {
	for _, d := range p.Dirs {
		if d.has(c) {
			return d, true
		}
	}
	return Dir{}, false
}

// cgroup2 returns the cgroup2 directory of the group, if any.
func (p Plan) cgroup2() (Dir, bool) {
	for _, d := range p.Dirs {
		if d.V2 {
			return d, true
		}
	}
	return Dir{}, false
}

// NewPlan validates cfg and turns it into the writes Create makes on h. A
// limit whose controller h lacks yields a *ControllerError (errors.Is
// ErrNoController). Controllers no limit asks for are still used when
// present, so that Usage can report memory, CPU and tasks.
func NewPlan(h Host, cfg Config) (Plan, error) {
	if err := cfg.validate(); err != nil {
		return Plan{}, err
	}
	requested := map[string]bool{
		Memory: cfg.MemoryBytes > 0,
		Pids:   cfg.Pids > 0,
		CPU:    cfg.CPUQuota > 0,
	}
	for _, c := range []string{Memory, Pids, CPU} {
		if requested[c] && h.Controllers[c] == "" {
			return Plan{}, &ControllerError{Controller: c, Reason: "not mounted, not delegated, or read-only on this host"}
		}
	}

	// The controllers this group lives in. cpu only for a quota: CPU time
	// is read from cgroup2's cpu.stat, which every cgroup2 group has with
	// or without the controller, or from cpuacct where no cgroup2 mount
	// exists. A group of its own in the cpu controller is not free: the
	// scheduler then runs the sandbox as one entity among the host's
	// tasks, and a vfork+exec from it took 0.3 to 0.6 ms instead of 0.1 on
	// the development VM (its wakeups wait for the group's turn). The v1
	// freezer only helps Kill where cgroup.kill is missing.
	use := []string{Memory, Pids}
	if requested[CPU] {
		use = append(use, CPU)
	}
	if h.Unified == "" {
		use = append(use, CPUAcct)
	}
	if h.Unified == "" || !h.KillFile {
		use = append(use, Freezer)
	}

	p := Plan{Name: cfg.Name}
	index := map[string]int{} // mount dir → index in p.Dirs
	addDir := func(mount string, v2 bool) (int, error) {
		if i, ok := index[mount]; ok {
			return i, nil
		}
		self := h.Self[mount]
		if self == "" {
			return 0, fmt.Errorf("cgroup: hierarchy %s: the supervisor's own cgroup in it is unknown: build Host with Detect", mount)
		}
		index[mount] = len(p.Dirs)
		p.Dirs = append(p.Dirs, Dir{Path: filepath.Join(self, cfg.Name), Parent: self, V2: v2})
		return index[mount], nil
	}
	if h.Unified != "" {
		if _, err := addDir(h.Unified, true); err != nil {
			return Plan{}, err
		}
	}
	for _, c := range use {
		mount := h.Controllers[c]
		if mount == "" {
			continue
		}
		v2 := mount == h.Unified
		i, err := addDir(mount, v2)
		if err != nil {
			return Plan{}, err
		}
		p.Dirs[i].Controllers = append(p.Dirs[i].Controllers, c)
		if v2 {
			p.Enable = append(p.Enable, Write{
				Path:     filepath.Join(p.Dirs[i].Parent, "cgroup.subtree_control"),
				Value:    "+" + c,
				Optional: !requested[c],
			})
		}
	}

	p.Limits, _ = p.limitWrites(cfg) // the controllers were checked above
	return p, nil
}

// limitWrites returns the writes that set cfg's limits in the plan's
// directories, or a *ControllerError for a limit whose controller none of
// them holds.
func (p Plan) limitWrites(cfg Config) ([]Write, error) {
	var ws []Write
	dir := func(c string) (Dir, error) {
		d, ok := p.dir(c)
		if !ok {
			return Dir{}, &ControllerError{Controller: c, Reason: "the group was made without it"}
		}
		return d, nil
	}
	if cfg.MemoryBytes > 0 {
		d, err := dir(Memory)
		if err != nil {
			return nil, err
		}
		ws = append(ws, memoryWrites(d, cfg.MemoryBytes)...)
	}
	if cfg.Pids > 0 {
		d, err := dir(Pids)
		if err != nil {
			return nil, err
		}
		ws = append(ws, Write{Path: filepath.Join(d.Path, "pids.max"), Value: itoa(cfg.Pids)})
	}
	if cfg.CPUQuota > 0 {
		d, err := dir(CPU)
		if err != nil {
			return nil, err
		}
		q := itoa(quotaUS(cfg.CPUQuota))
		if d.V2 {
			ws = append(ws, Write{Path: filepath.Join(d.Path, "cpu.max"), Value: q + " " + itoa(cpuPeriodUS)})
		} else {
			ws = append(ws,
				Write{Path: filepath.Join(d.Path, "cpu.cfs_period_us"), Value: itoa(cpuPeriodUS)},
				Write{Path: filepath.Join(d.Path, "cpu.cfs_quota_us"), Value: q})
		}
	}
	return ws, nil
}

// memoryWrites limits memory in d to n bytes with swap kept out of it.
func memoryWrites(d Dir, n int64) []Write {
	f := func(name string) string { return filepath.Join(d.Path, name) }
	v := itoa(n)
	if d.V2 {
		return []Write{
			{Path: f("memory.max"), Value: v},
			{Path: f("memory.swap.max"), Value: "0", Swap: SwapMax},
		}
	}
	return []Write{
		// A group with the OOM killer disabled (inherited from the parent)
		// would hang at the limit instead of killing inside the group.
		{Path: f("memory.oom_control"), Value: "0"},
		// memsw must stay >= the memory limit, so the memory limit goes first.
		{Path: f("memory.limit_in_bytes"), Value: v},
		{Path: f("memory.memsw.limit_in_bytes"), Value: v, Swap: SwapMemsw,
			IfMissing: &Write{Path: f("memory.swappiness"), Value: "0", Swap: SwapSwappiness}},
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
