package seccomp

import (
	"fmt"

	"github.com/airlock-sandbox/airlock/plan/spec"
)

// asm assembles a BPF program back to front. Classic BPF only jumps
// forward, so emitting the last instruction first means every jump target
// already has a position when the jump is written, and a jump too long for
// its 8-bit offset can be given a trampoline on the spot.
type asm struct {
	rev  []Insn                // the program reversed: rev[0] is its last instruction
	rets map[spec.Action]label // most recent RET for each action, for reuse
	err  error                 // first impossible state met; compile reports it
}

// label names an emitted instruction by its index in asm.rev.
type label int

func newAsm() *asm { return &asm{rets: make(map[spec.Action]label)} }

func (a *asm) emit(in Insn) label {
	a.rev = append(a.rev, in)
	return label(len(a.rev) - 1)
}

// dist is the jump offset from the next instruction to be emitted to t.
func (a *asm) dist(t label) int { return len(a.rev) - 1 - int(t) }

// ret returns a label that returns act, reusing a RET within reach of a
// conditional jump from the next instruction.
func (a *asm) ret(act spec.Action) label {
	if l, ok := a.rets[act]; ok && a.dist(l) <= maxJump-1 {
		return l
	}
	l := a.emit(Insn{Code: opRetK, K: uint32(act)})
	a.rets[act] = l
	return l
}

// near returns a label right here that continues at t: a copy of t if it is
// a RET (as short as a jump), else an unconditional jump (32-bit offset).
func (a *asm) near(t label) label {
	if in := a.rev[t]; in.Code == opRetK {
		return a.ret(spec.Action(in.K))
	}
	return a.emit(Insn{Code: opJa, K: uint32(a.dist(t))})
}

// jump emits a conditional jump with constant k that continues at jt when
// the test holds and at jf when it fails.
func (a *asm) jump(code uint16, k uint32, jt, jf label) label {
	if jt == jf {
		return jt
	}
	// Leave jf one short of the limit: a trampoline for jt, if needed,
	// moves jf one further away.
	if a.dist(jf) > maxJump-1 {
		jf = a.near(jf)
	}
	if a.dist(jt) > maxJump {
		jt = a.near(jt)
	}
	if (a.dist(jt) > maxJump || a.dist(jf) > maxJump) && a.err == nil {
		// uint8 would wrap silently into a valid but wrong jump.
		a.err = fmt.Errorf("seccomp: airlock bug: jump offsets (%d, %d) exceed %d after trampolines", a.dist(jt), a.dist(jf), maxJump)
	}
	return a.emit(Insn{Code: code, Jt: uint8(a.dist(jt)), Jf: uint8(a.dist(jf)), K: k})
}

// before emits in, which does not jump, so that execution continues at
// next after it: next must be the instruction emitted last, or a jump to it
// goes in between.
func (a *asm) before(next label, in Insn) label {
	if int(next) != len(a.rev)-1 {
		a.near(next)
	}
	return a.emit(in)
}

// load emits A = the 32-bit word at offset off of seccomp_data, then
// continues at next.
func (a *asm) load(off uint32, next label) label {
	return a.before(next, Insn{Code: opLdAbsW, K: off})
}

// program returns the instructions in execution order.
func (a *asm) program() []Insn {
	prog := make([]Insn, len(a.rev))
	for i, in := range a.rev {
		prog[len(prog)-1-i] = in
	}
	return prog
}

// rules emits rs, tried in order, falling through to dflt when none
// matches, and returns the entry point.
func (a *asm) rules(rs []spec.SyscallRule, dflt spec.Action) label {
	if len(rs) == 1 && len(rs[0].Conds) == 0 {
		return a.ret(rs[0].Action)
	}
	next := a.ret(dflt)
	for i := len(rs) - 1; i >= 0; i-- {
		match := a.ret(rs[i].Action)
		for j := len(rs[i].Conds) - 1; j >= 0; j-- {
			match = a.cond(rs[i].Conds[j], match, next)
		}
		next = match
	}
	return next
}

// cond emits a test of c that continues at match or fail. The high half is
// tested first (it is usually zero, so a mismatch exits early), then the
// low half; a half the mask does not cover is not loaded at all.
func (a *asm) cond(c spec.ArgCond, match, fail label) label {
	next := match
	if m := uint32(c.Mask); m != 0 {
		next = a.word(argLo(c.Arg), m, uint32(c.Value), next, fail)
	}
	if m := uint32(c.Mask >> 32); m != 0 {
		next = a.word(argHi(c.Arg), m, uint32(c.Value>>32), next, fail)
	}
	return next
}

// word emits: A = word at off; A &= mask (unless all ones); A == v?
func (a *asm) word(off, mask, v uint32, match, fail label) label {
	if match == fail {
		return match // the load would fall through to whatever came before
	}
	next := a.jump(opJeqK, v, match, fail)
	if mask != 0xffffffff {
		next = a.before(next, Insn{Code: opAndK, K: mask})
	}
	return a.load(off, next)
}
