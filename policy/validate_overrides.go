package policy

import (
	"github.com/airlock-sandbox/airlock/policy/budget"
)

// Overrides are grants and budgets from command-line flags. They add to a
// policy file's grants and may tighten, never loosen, its budgets. The zero
// Overrides changes nothing.
type Overrides struct {
	FSRead         []string      // --fs-read: absolute, or relative to With's baseDir; nil adds none
	FSWrite        []string      // --fs-write: absolute, or relative to With's baseDir; nil adds none
	FSDeny         []string      // --fs-deny: like FSWrite; nil adds none
	FSProtect      []string      // --fs-protect: like FSWrite; nil adds none
	FSUnprotect    []string      // --fs-unprotect: like FSWrite; nil adds none
	NetHosts       []string      // --net-host: hostspec patterns; nil adds none
	AllowedTools   []string      // --tool: bare names or absolute paths; nil adds none
	Env            []string      // --env: "NAME" or "NAME=value"; nil adds none
	Credentials    []string      // --credential: HOST:HEADER=ENV; nil adds none
	AllowDowngrade []string      // --allow-downgrade: Downgrade values; nil adds none
	Budget         budget.Limits // --max-*: zero fields leave the policy's budget as it is
	Rootfs         string        // --rootfs: the environment, when the policy names none (or the same); "" keeps the policy's
}

// flagNames are the CLI flags that set each budget.
var flagNames = map[budget.Limit]string{
	budget.MaxWall:        "--max-wall",
	budget.MaxOutputBytes: "--max-output",
	budget.MaxOps:         "--max-ops",
	budget.MaxMemory:      "--max-memory",
	budget.MaxCPU:         "--max-cpu",
	budget.MaxPids:        "--max-pids",
	budget.MaxScratch:     "--max-scratch",
	budget.MaxWrite:       "--max-write",
}

// With returns a new policy made of p plus the grants in o, validated like
// a policy file's entries; errors name the flag, like `--fs-read "x": ...`.
// Relative paths resolve against baseDir (normally the working directory;
// empty refuses them). A non-zero budget in o may set a budget p left at its
// default, or lower one p set explicitly; raising an explicit budget is an
// error, since flags never loosen a policy file. p itself never changes; a
// nil p stands for Default().
func (p *Policy) With(o Overrides, baseDir string) (*Policy, error) {
	d := draft{
		baseDir:     baseDir,
		fsRead:      specItems(o.FSRead, "--fs-read"),
		fsWrite:     specItems(o.FSWrite, "--fs-write"),
		fsDeny:      specItems(o.FSDeny, "--fs-deny"),
		fsProtect:   specItems(o.FSProtect, "--fs-protect"),
		fsUnprotect: specItems(o.FSUnprotect, "--fs-unprotect"),
		netHosts:    specItems(o.NetHosts, "--net-host"),
		tools:       specItems(o.AllowedTools, "--tool"),
		env:         specItems(o.Env, "--env"),
		credentials: specItems(o.Credentials, "--credential"),
		downgrades:  specItems(o.AllowDowngrade, "--allow-downgrade"),
		limits:      limitItems(o.Budget, func(k budget.Limit) string { return flagNames[k] }),
	}
	if o.Rootfs != "" {
		d.rootfs = []item{{val: o.Rootfs, label: "--rootfs"}}
	}
	np, errs := validate(d, p)
	if len(errs) > 0 {
		return nil, join(errs)
	}
	return np, nil
}
