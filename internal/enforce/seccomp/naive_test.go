package seccomp

import "github.com/airlock-sandbox/airlock/plan"

// The unoptimized filter and a reference model of the profile, against
// which the optimized filter is checked (TestProgramsAgree,
// FuzzProgramsAgree).

// buildNaive compiles plan.DefaultSeccomp like Build, but looks the syscall up
// with one comparison per syscall in a linear chain instead of a tree.
func buildNaive(opts Options) ([]Insn, error) {
	t, err := targetFor(opts.Arch)
	if err != nil {
		return nil, err
	}
	return compile(plan.DefaultSeccomp(), t, dispatchLinear)
}

func dispatchLinear(a *asm, es []entry, dflt plan.Action, _ uint32) label {
	next := a.ret(dflt)
	for i := len(es) - 1; i >= 0; i-- {
		next = a.jump(opJeqK, es[i].nr, a.rules(es[i].rules, dflt), next)
	}
	return next
}

// decide is what p prescribes for d on t, computed in Go without BPF.
func decide(p plan.Seccomp, t target, d Data) plan.Action {
	nr := uint32(d.Nr)
	switch {
	case d.Arch != t.audit:
		return plan.ActKillProcess
	case t.x32 && nr&x32SyscallBit != 0:
		return plan.ActKillProcess
	case nr > t.max:
		return plan.ActENOSYS
	}
	for _, s := range p.Syscalls {
		if n, ok := t.nums.lookup(s.Name); !ok || n != nr {
			continue
		}
	rules:
		for _, r := range s.Rules {
			for _, c := range r.Conds {
				if !c.Holds(d.Args) {
					continue rules
				}
			}
			return r.Action
		}
	}
	return p.Default
}
