package seccomp

import (
	"fmt"
	"testing"

	"github.com/airlock-sandbox/airlock/plan"
)

// programs holds, per architecture, the optimized and the naive filter.
type programs struct {
	tgt          target
	profile      plan.Seccomp
	tree, linear []Insn
}

func buildBoth(t testing.TB, arch Arch) programs {
	t.Helper()
	tgt, tree := mustBuild(t, arch)
	linear, err := buildNaive(Options{Arch: arch})
	if err != nil {
		t.Fatalf("buildNaive(%s) = %v", arch, err)
	}
	return programs{tgt, plan.DefaultSeccomp(), tree, linear}
}

// agree checks that both programs and the reference model give d the same
// action.
func (p programs) agree(t testing.TB, d Data) {
	t.Helper()
	want := decide(p.profile, p.tgt, d)
	tree, err1 := Run(p.tree, d)
	linear, err2 := Run(p.linear, d)
	if err1 != nil || err2 != nil || tree != want || linear != want {
		t.Fatalf("for %+v: tree %v (%v), linear %v (%v), model %v", d, tree, err1, linear, err2, want)
	}
}

// interestingArgs are argument patterns around the rules' boundaries.
var interestingArgs = [][6]uint64{
	{},
	{afUnix, sockStream},
	{afInet, sockStream | sockCloexec, ipprotoTCP},
	{afInet6, sockDgram, ipprotoUDP},
	{afInet, sockStream, ipprotoMPTCP},
	{afInet, sockRaw},
	{1<<32 | afInet, sockStream},
	{cloneThreadFlags},
	{cloneNewUser | sigchld},
	{0xffffffff_00000000 | sigchld},
	{0, tiocsti},
	{0, 0xffffffff_00000000 | tioclinux},
	{0x20008},
	{0xffffffff},
	{^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0)},
}

// TestProgramsAgree runs every syscall number in the table (and a few
// beyond it) with each interesting argument pattern through both filters
// and the model.
func TestProgramsAgree(t *testing.T) {
	for _, arch := range []Arch{ArchAMD64, ArchARM64} {
		t.Run(string(arch), func(t *testing.T) {
			p := buildBoth(t, arch)
			for nr := uint32(0); nr <= p.tgt.max+2; nr++ {
				for _, args := range interestingArgs {
					p.agree(t, Data{Nr: int32(nr), Arch: p.tgt.audit, Args: args})
				}
			}
		})
	}
}

// FuzzProgramsAgree checks that the optimized filter, the naive one and
// the model agree on arbitrary inputs. Seeds are in testdata/fuzz.
func FuzzProgramsAgree(f *testing.F) {
	p := map[bool]programs{false: buildBoth(f, ArchAMD64), true: buildBoth(f, ArchARM64)}
	f.Fuzz(func(t *testing.T, arm64, nativeArch bool, arch, nr uint32, a0, a1, a2, a3, a4, a5 uint64) {
		pp := p[arm64]
		if nativeArch {
			arch = pp.tgt.audit
		}
		pp.agree(t, Data{Nr: int32(nr), Arch: arch, Args: [6]uint64{a0, a1, a2, a3, a4, a5}})
	})
}

// TestCompileLongJumps forces jumps longer than 255 instructions, which
// need trampolines, with a profile of many rules, and checks the result
// against the model.
func TestCompileLongJumps(t *testing.T) {
	var ioctl []plan.SyscallRule
	for v := uint64(0); v < 300; v++ {
		// Not EPERM: a rule that returns the default compiles to nothing.
		ioctl = append(ioctl, plan.SyscallRule{Action: plan.ActENOSYS, Conds: []plan.ArgCond{{Arg: 1, Mask: low32, Value: v * 3}}})
	}
	ioctl = append(ioctl, plan.SyscallRule{Action: plan.ActAllow})
	p := plan.Seccomp{Default: plan.ActEPERM, Syscalls: []plan.Syscall{
		{Name: "ioctl", Rules: ioctl},
		{Name: "read", Rules: []plan.SyscallRule{{Action: plan.ActAllow}}},
		{Name: "write", Rules: []plan.SyscallRule{{Action: plan.ActAllow, Conds: []plan.ArgCond{{Arg: 0, Mask: all64, Value: 1}}}}},
		{Name: "socket", Rules: []plan.SyscallRule{{Action: plan.ActAllow, Conds: []plan.ArgCond{{Arg: 0, Mask: all64, Value: 1}}}}},
	}}
	tgt, err := targetFor(ArchAMD64)
	if err != nil {
		t.Fatal(err)
	}
	for name, dispatch := range map[string]dispatcher{"tree": dispatchTree, "linear": dispatchLinear} {
		t.Run(name, func(t *testing.T) {
			prog, err := compile(p, tgt, dispatch)
			if err != nil {
				t.Fatalf("compile = %v", err)
			}
			if !hasOp(prog, opJa) {
				t.Fatalf("compile emitted no BPF_JA: the test no longer exercises long jumps")
			}
			for _, nr := range []uint32{0, 1, 2, 16, 41, 400} {
				for v := uint64(0); v < 1000; v += 7 {
					d := Data{Nr: int32(nr), Arch: tgt.audit, Args: [6]uint64{v, v}}
					got := mustRun(t, prog, d)
					if want := decide(p, tgt, d); got != want {
						t.Fatalf("Run(nr %d, args %d) = %v, want %v", nr, v, got, want)
					}
				}
			}
		})
	}
}

func hasOp(prog []Insn, code uint16) bool {
	for _, in := range prog {
		if in.Code == code {
			return true
		}
	}
	return false
}

func TestCompileRejectsBadProfile(t *testing.T) {
	tgt, err := targetFor(ArchAMD64)
	if err != nil {
		t.Fatal(err)
	}
	allow := []plan.SyscallRule{{Action: plan.ActAllow}}
	tests := []struct {
		name string
		p    plan.Seccomp
	}{
		{"repeated-name", plan.Seccomp{Syscalls: []plan.Syscall{{Name: "read", Rules: allow}, {Name: "read", Rules: allow}}}},
		{"empty-name", plan.Seccomp{Syscalls: []plan.Syscall{{Rules: allow}}}},
		{"no-rules", plan.Seccomp{Syscalls: []plan.Syscall{{Name: "read"}}}},
		{"zero-mask", plan.Seccomp{Syscalls: []plan.Syscall{{Name: "read", Rules: []plan.SyscallRule{{Action: plan.ActAllow, Conds: []plan.ArgCond{{Arg: 0}}}}}}}},
		{"value-outside-mask", plan.Seccomp{Syscalls: []plan.Syscall{{Name: "read", Rules: []plan.SyscallRule{{Action: plan.ActAllow, Conds: []plan.ArgCond{{Arg: 0, Mask: 1, Value: 2}}}}}}}},
		{"arg-index", plan.Seccomp{Syscalls: []plan.Syscall{{Name: "read", Rules: []plan.SyscallRule{{Action: plan.ActAllow, Conds: []plan.ArgCond{{Arg: 6, Mask: 1}}}}}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := compile(tt.p, tgt, dispatchTree); err == nil {
				t.Errorf("compile(%s) = nil error, want an error", tt.name)
			}
		})
	}
}

// TestTreeIsSmaller keeps the optimization honest: the tree must be
// shorter than the chain and leave room under BPF_MAXINSNS.
func TestTreeIsSmaller(t *testing.T) {
	for _, arch := range []Arch{ArchAMD64, ArchARM64} {
		t.Run(string(arch), func(t *testing.T) {
			p := buildBoth(t, arch)
			if len(p.tree) >= len(p.linear) || len(p.tree) > maxInsns/4 {
				t.Errorf("tree has %d instructions, linear %d: want the tree shorter and under %d", len(p.tree), len(p.linear), maxInsns/4)
			}
			t.Logf("%s: tree %d instructions, linear %d", arch, len(p.tree), len(p.linear))
		})
	}
}

func BenchmarkRun(b *testing.B) {
	p := buildBoth(b, ArchAMD64)
	for _, name := range []string{"read", "futex", "socket", "ioctl", "io_uring_setup"} {
		nr, _ := p.tgt.nums.lookup(name)
		d := Data{Nr: int32(nr), Arch: p.tgt.audit, Args: [6]uint64{afInet, sockStream}}
		for kind, prog := range map[string][]Insn{"tree": p.tree, "linear": p.linear} {
			b.Run(fmt.Sprintf("%s/%s", kind, name), func(b *testing.B) {
				for b.Loop() {
					if _, err := Run(prog, d); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
