package plan

import "github.com/airlock-sandbox/airlock/policy"

// cgroupDowngrades are the downgrades that concern Limits.
var cgroupDowngrades = []policy.Downgrade{policy.DowngradeMemory, policy.DowngradePids, policy.DowngradeCPU}

// limitsOf returns the plan's Limits for p.
func limitsOf(p *policy.Policy) Limits {
	b := p.Budget()
	l := Limits{Memory: b.Memory, Pids: b.Pids, CPU: b.CPU, Wall: b.Wall, Output: b.OutputBytes, Ops: b.Ops, Write: b.Write, Scratch: b.Scratch}
	for _, d := range cgroupDowngrades {
		if p.AcceptsDowngrade(d) {
			l.Downgrades = append(l.Downgrades, d)
		}
	}
	return l
}
