package seccomp

import (
	"fmt"
	"runtime"
	"slices"
	"sort"
	"strings"

	"github.com/airlock-sandbox/airlock/plan/spec"
)

// Arch names the architecture a filter is built for, as a GOARCH value.
type Arch string

// The architectures Build supports. Both are little-endian, which the
// argument offsets rely on.
const (
	ArchAMD64 Arch = "amd64" // x86_64; the x32 ABI is refused
	ArchARM64 Arch = "arm64" // aarch64
)

// Options configures Build. The zero value builds for the architecture
// this binary was built for.
type Options struct {
	// Arch selects the syscall numbering and the AUDIT_ARCH value the
	// filter accepts. Empty means runtime.GOARCH; Build fails for an
	// architecture it has no table for.
	Arch Arch
}

// AUDIT_ARCH_* values (linux/audit.h) and the x32 marker bit.
const (
	auditArchX86_64  = 0xc000003e // AUDIT_ARCH_X86_64
	auditArchAArch64 = 0xc00000b7 // AUDIT_ARCH_AARCH64
	x32SyscallBit    = 0x40000000 // __X32_SYSCALL_BIT (asm/unistd.h)
)

//go:generate go run mktables.go

// target is everything Build needs to know about an architecture.
type target struct {
	audit uint32   // the only seccomp_data.arch let through
	x32   bool     // whether numbers with x32SyscallBit must be killed
	nums  sysTable // syscall name → number
	max   uint32   // highest number in nums
}

// sysTable is a generated syscall table (table_*.go): names and numbers,
// sorted by name, each name and each number once (TestTablesAreOneToOne,
// TestTablesSorted).
type sysTable []sysEntry

type sysEntry struct {
	name string
	nr   uint32
}

// lookup returns name's number.
func (t sysTable) lookup(name string) (uint32, bool) {
	i, ok := slices.BinarySearchFunc(t, name, func(e sysEntry, name string) int { return strings.Compare(e.name, name) })
	if !ok {
		return 0, false
	}
	return t[i].nr, true
}

func targetFor(arch Arch) (target, error) {
	if arch == "" {
		arch = Arch(runtime.GOARCH)
	}
	var t target
	switch arch {
	case ArchAMD64:
		t = target{audit: auditArchX86_64, x32: true, nums: sysnumamd64}
	case ArchARM64:
		t = target{audit: auditArchAArch64, nums: sysnumarm64}
	default:
		return target{}, fmt.Errorf("seccomp: build: architecture %q is not supported: airlock filters amd64 and arm64", arch)
	}
	for _, e := range t.nums {
		t.max = max(t.max, e.nr)
	}
	return t, nil
}

// Build returns the BPF program for the profile p (the plan's Seccomp) on
// opts.Arch, ready for Install. It fails when p does not validate. The
// program:
//
//  1. kills the process unless seccomp_data.arch is the target's
//     AUDIT_ARCH, so 32-bit compat calls (int 0x80 on amd64, AArch32 on
//     arm64), whose numbers mean different syscalls, never reach the table;
//  2. on amd64, kills the process for x32 calls (bit 30 of the number);
//  3. answers ENOSYS for numbers above the newest syscall in the table;
//  4. finds the syscall by binary search over number ranges and applies
//     its rules, or the profile's default (EPERM in plan.DefaultSeccomp).
func Build(p spec.Seccomp, opts Options) ([]Insn, error) {
	t, err := targetFor(opts.Arch)
	if err != nil {
		return nil, err
	}
	return compile(p, t, dispatchTree)
}

// entry is one syscall of the profile resolved for a target.
type entry struct {
	nr    uint32
	rules []spec.SyscallRule
}

// dispatcher emits code that, with the syscall number in A, applies the
// rules of the entry with that number or returns dflt, and returns its
// entry point.
type dispatcher func(a *asm, es []entry, dflt spec.Action, max uint32) label

// compile builds p for t, with dispatch choosing how the syscall number is
// looked up.
func compile(p spec.Seccomp, t target, dispatch dispatcher) ([]Insn, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var es []entry
	for _, s := range p.Syscalls {
		if nr, ok := t.nums.lookup(s.Name); ok {
			es = append(es, entry{nr, s.Rules})
		}
	}
	sort.Slice(es, func(i, j int) bool { return es[i].nr < es[j].nr })

	a := newAsm()
	next := dispatch(a, es, p.Default, t.max)
	next = a.jump(opJgtK, t.max, a.ret(spec.ActENOSYS), next)
	if t.x32 {
		next = a.jump(opJsetK, x32SyscallBit, a.ret(spec.ActKillProcess), next)
	}
	next = a.load(offNr, next)
	next = a.jump(opJeqK, t.audit, next, a.ret(spec.ActKillProcess))
	a.load(offArch, next)
	if a.err != nil {
		return nil, a.err
	}

	prog := a.program()
	if err := Validate(prog); err != nil {
		return nil, fmt.Errorf("seccomp: airlock bug: built a filter the kernel would refuse: %w", err)
	}
	return prog, nil
}

// span is a run of syscall numbers, from lo up to the next span's lo, that
// all get the same treatment.
type span struct {
	lo    uint32
	rules []spec.SyscallRule // nil means the default action
}

// simple reports the action of a span that needs no argument checks.
func (s span) simple(dflt spec.Action) (spec.Action, bool) {
	switch {
	case s.rules == nil:
		return dflt, true
	case len(s.rules) == 1 && len(s.rules[0].Conds) == 0:
		return s.rules[0].Action, true
	}
	return 0, false
}

// dispatchTree looks the number up by binary search over spans: adjacent
// numbers with the same unconditional action (most of the allow-list and
// most gaps) share one span, so the tree is about 8 levels deep.
func dispatchTree(a *asm, es []entry, dflt spec.Action, max uint32) label {
	var spans []span
	add := func(s span) {
		if n := len(spans); n > 0 {
			prev, ok1 := spans[n-1].simple(dflt)
			cur, ok2 := s.simple(dflt)
			if ok1 && ok2 && prev == cur {
				return
			}
		}
		spans = append(spans, s)
	}
	var next uint32
	for _, e := range es {
		if e.nr > next {
			add(span{lo: next})
		}
		add(span{lo: e.nr, rules: e.rules})
		next = e.nr + 1
	}
	if next <= max {
		add(span{lo: next})
	}

	// Rule blocks first, so that they end up after the tree.
	blocks := make([]label, len(spans))
	for i, s := range spans {
		if _, ok := s.simple(dflt); !ok {
			blocks[i] = a.rules(s.rules, dflt)
		}
	}
	var node func(lo, hi int) label
	node = func(lo, hi int) label {
		if hi-lo == 1 {
			if act, ok := spans[lo].simple(dflt); ok {
				return a.ret(act)
			}
			return blocks[lo]
		}
		mid := (lo + hi) / 2
		right := node(mid, hi)
		left := node(lo, mid)
		return a.jump(opJgeK, spans[mid].lo, right, left)
	}
	return node(0, len(spans))
}
