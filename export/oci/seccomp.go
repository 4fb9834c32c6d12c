package oci

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"runtime"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/airlock-sandbox/airlock/plan"
)

// Seccomp returns the syscall profile s (a plan's Seccomp) as an OCI
// linux.seccomp section for arch, a GOARCH value ("amd64", "arm64");
// empty means the architecture this binary was built for. The same JSON is
// what kubelet expects in a Localhost seccomp profile file.
func Seccomp(s plan.Seccomp, arch string) (*specs.LinuxSeccomp, error) {
	return convert(s, arch)
}

// ociArch maps GOARCH values to libseccomp architecture names. Only the
// native ABI is listed: libseccomp answers every other one (i386, x32)
// with its bad-architecture action, which kills, as airlock's filter does.
var ociArch = map[string]specs.Arch{"amd64": specs.ArchX86_64, "arm64": specs.ArchAARCH64}

// errNoOrder reports a profile whose meaning depends on rule order in a way
// unordered OCI entries cannot reproduce.
var errNoOrder = errors.New("rules mix actions in an order OCI seccomp cannot express")

// convert translates a first-match profile into unordered OCI entries with
// the same meaning; see the package documentation.
func convert(p plan.Seccomp, arch string) (*specs.LinuxSeccomp, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if arch == "" {
		arch = runtime.GOARCH
	}
	a, ok := ociArch[arch]
	if !ok {
		return nil, fmt.Errorf("oci: seccomp: architecture %q is not supported: export for amd64 or arm64", arch)
	}
	act, errno, err := ociAction(p.Default)
	if err != nil {
		return nil, fmt.Errorf("oci: seccomp: default action: %w", err)
	}
	out := &specs.LinuxSeccomp{DefaultAction: act, DefaultErrnoRet: errno, Architectures: []specs.Arch{a}}
	byKey := map[string]int{} // entry without names → index in out.Syscalls
	for _, s := range p.Syscalls {
		entries, err := syscallEntries(s, p.Default)
		if err != nil {
			return nil, fmt.Errorf("oci: seccomp: syscall %s: %w", s.Name, err)
		}
		for _, e := range entries {
			k, err := json.Marshal(e)
			if err != nil {
				return nil, err
			}
			i, ok := byKey[string(k)]
			if !ok {
				i = len(out.Syscalls)
				byKey[string(k)] = i
				out.Syscalls = append(out.Syscalls, e)
			}
			if n := out.Syscalls[i].Names; len(n) == 0 || n[len(n)-1] != s.Name {
				out.Syscalls[i].Names = append(n, s.Name)
			}
		}
	}
	return out, nil
}

// rule is a plan.SyscallRule with at most one condition per argument.
type rule struct {
	act   plan.Action
	conds []plan.ArgCond // sorted by Arg
}

// syscallEntries returns the OCI entries (without names) that give one
// syscall the meaning of its ordered rules under the default dflt.
func syscallEntries(s plan.Syscall, dflt plan.Action) ([]specs.LinuxSyscall, error) {
	var rules []rule
	for _, r := range s.Rules {
		conds, ok := mergeConds(r.Conds)
		if !ok {
			continue // can never match, so it never decides
		}
		rules = append(rules, rule{act: r.Action, conds: conds})
		if len(conds) == 0 {
			break // every later rule is unreachable
		}
	}
	// A trailing rule that answers the default changes nothing.
	for len(rules) > 0 && rules[len(rules)-1].act == dflt {
		rules = rules[:len(rules)-1]
	}
	if len(rules) == 0 {
		return nil, nil
	}
	last := rules[len(rules)-1]
	same := true
	for _, r := range rules {
		same = same && r.act == last.act
	}
	if same {
		// One action: any matching rule decides the same way, so order is moot.
		var out []specs.LinuxSyscall
		for _, r := range rules {
			e, err := entry(r.act, r.conds)
			if err != nil {
				return nil, err
			}
			out = append(out, e)
		}
		return out, nil
	}
	// "default if arg is v1, default if arg is v2, ..., then act": act for
	// every other value of the masked argument.
	if len(last.conds) != 0 {
		return nil, errNoOrder
	}
	excl := rules[:len(rules)-1]
	c0 := excl[0].conds
	var vals []uint64
	for _, r := range excl {
		if r.act != dflt || len(r.conds) != 1 || r.conds[0].Arg != c0[0].Arg || r.conds[0].Mask != c0[0].Mask {
			return nil, errNoOrder
		}
		vals = append(vals, r.conds[0].Value)
	}
	var out []specs.LinuxSyscall
	for _, b := range complement(c0[0].Mask, vals) {
		e, err := entry(last.act, []plan.ArgCond{{Arg: c0[0].Arg, Mask: b.mask, Value: b.value}})
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// mergeConds folds conditions on the same argument into one, since runc
// would OR them: (a&m1)==v1 && (a&m2)==v2 is (a&(m1|m2))==(v1|v2) when v1
// and v2 agree on the shared bits, and never holds otherwise (ok false).
func mergeConds(cs []plan.ArgCond) (out []plan.ArgCond, ok bool) {
	var byArg [6]*plan.ArgCond
	for _, c := range cs {
		if p := byArg[c.Arg]; p != nil {
			shared := p.Mask & c.Mask
			if p.Value&shared != c.Value&shared {
				return nil, false
			}
			p.Mask, p.Value = p.Mask|c.Mask, p.Value|c.Value
			continue
		}
		c := c
		byArg[c.Arg] = &c
	}
	for _, p := range byArg {
		if p != nil {
			out = append(out, *p)
		}
	}
	return out, true
}

// block is the set of values x with x&mask == value.
type block struct{ mask, value uint64 }

// complement returns disjoint blocks that together hold exactly the values
// x whose x&mask is none of vals: a walk down the binary trie of the mask's
// bits, most significant first, emitting every subtree no excluded value
// lies in. The result has at most len(vals)*popcount(mask) blocks.
func complement(mask uint64, vals []uint64) []block {
	var pos []int // bit positions of mask, high to low
	for m := mask; m != 0; m &^= 1 << (63 - bits.LeadingZeros64(m)) {
		pos = append(pos, 63-bits.LeadingZeros64(m))
	}
	var out []block
	var walk func(depth int, b block, vs []uint64)
	walk = func(depth int, b block, vs []uint64) {
		if len(vs) == 0 {
			out = append(out, b)
			return
		}
		if depth == len(pos) {
			return // b is one of the excluded values
		}
		bit := uint64(1) << pos[depth]
		var zero, one []uint64
		for _, v := range vs {
			if v&bit == 0 {
				zero = append(zero, v)
			} else {
				one = append(one, v)
			}
		}
		walk(depth+1, block{b.mask | bit, b.value}, zero)
		walk(depth+1, block{b.mask | bit, b.value | bit}, one)
	}
	walk(0, block{}, vals)
	return out
}

// entry builds one OCI syscall entry (names left empty).
func entry(a plan.Action, conds []plan.ArgCond) (specs.LinuxSyscall, error) {
	act, errno, err := ociAction(a)
	if err != nil {
		return specs.LinuxSyscall{}, err
	}
	e := specs.LinuxSyscall{Action: act, ErrnoRet: errno}
	for _, c := range conds {
		arg := specs.LinuxSeccompArg{Index: uint(c.Arg), Value: c.Value, Op: specs.OpEqualTo}
		if c.Mask != ^uint64(0) {
			arg = specs.LinuxSeccompArg{Index: uint(c.Arg), Value: c.Mask, ValueTwo: c.Value, Op: specs.OpMaskedEqual}
		}
		e.Args = append(e.Args, arg)
	}
	return e, nil
}

// ociAction names a filter action as libseccomp does.
func ociAction(a plan.Action) (specs.LinuxSeccompAction, *uint, error) {
	if e, ok := a.Errno(); ok {
		n := uint(e)
		return specs.ActErrno, &n, nil
	}
	switch a {
	case plan.ActAllow:
		return specs.ActAllow, nil, nil
	case plan.ActKillProcess:
		return specs.ActKillProcess, nil, nil
	}
	return "", nil, fmt.Errorf("action %v has no OCI name", a)
}
