package oci

import (
	"testing"

	"github.com/airlock-sandbox/airlock/plan"
)

func TestConvertShapes(t *testing.T) {
	eq := func(arg int, v uint64) plan.ArgCond { return plan.ArgCond{Arg: arg, Mask: ^uint64(0), Value: v} }
	allow, eperm, enosys := plan.ActAllow, plan.ActEPERM, plan.ActENOSYS
	tests := []struct {
		name    string
		rules   []plan.SyscallRule
		entries int // -1: must be refused
	}{
		{"unconditional", []plan.SyscallRule{{Action: allow}}, 1},
		{"or-of-conditions", []plan.SyscallRule{{Action: allow, Conds: []plan.ArgCond{eq(0, 1)}}, {Action: allow, Conds: []plan.ArgCond{eq(0, 2)}}}, 2},
		{"unreachable-after-unconditional", []plan.SyscallRule{{Action: allow}, {Action: enosys, Conds: []plan.ArgCond{eq(0, 1)}}}, 1},
		{"trailing-default-dropped", []plan.SyscallRule{{Action: allow, Conds: []plan.ArgCond{eq(0, 1)}}, {Action: eperm}}, 1},
		{"only-default", []plan.SyscallRule{{Action: eperm}}, 0},
		{"same-arg-merged", []plan.SyscallRule{{Action: allow, Conds: []plan.ArgCond{{Arg: 1, Mask: 0xf0, Value: 0x10}, {Arg: 1, Mask: 0x0f, Value: 0x02}}}}, 1},
		{"same-arg-contradiction-dropped", []plan.SyscallRule{{Action: allow, Conds: []plan.ArgCond{eq(1, 1), eq(1, 2)}}}, 0},
		{"deny-values-then-allow", []plan.SyscallRule{{Action: eperm, Conds: []plan.ArgCond{{Arg: 1, Mask: 0xff, Value: 3}}}, {Action: allow}}, 8},
		{"mixed-actions", []plan.SyscallRule{{Action: enosys, Conds: []plan.ArgCond{eq(0, 1)}}, {Action: allow}}, -1},
		{"deny-on-two-args", []plan.SyscallRule{{Action: eperm, Conds: []plan.ArgCond{eq(0, 1)}}, {Action: eperm, Conds: []plan.ArgCond{eq(1, 1)}}, {Action: allow}}, -1},
		{"conditional-last", []plan.SyscallRule{{Action: eperm, Conds: []plan.ArgCond{eq(0, 1)}}, {Action: allow, Conds: []plan.ArgCond{eq(1, 1)}}}, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := syscallEntries(plan.Syscall{Name: "x", Rules: tt.rules}, eperm)
			if tt.entries < 0 {
				if err == nil {
					t.Fatalf("syscallEntries(%+v) = %+v, want an error", tt.rules, got)
				}
				return
			}
			if err != nil || len(got) != tt.entries {
				t.Fatalf("syscallEntries(%+v) = %d entries (%v), want %d", tt.rules, len(got), err, tt.entries)
			}
			for _, e := range got {
				seen := map[uint]bool{}
				for _, a := range e.Args {
					if seen[a.Index] {
						t.Errorf("entry %+v has two conditions on argument %d", e, a.Index)
					}
					seen[a.Index] = true
				}
			}
		})
	}
}

// TestComplementExact checks every value of a small masked field: exactly
// the excluded values fall outside the blocks, and no value is in two.
func TestComplementExact(t *testing.T) {
	const mask = 0b1011_0110
	for _, excl := range [][]uint64{{}, {0}, {mask}, {0b0010_0100, 0b1000_0010}, {0b0000_0110, 0b0000_0110}} {
		blocks := complement(mask, excl)
		for x := uint64(0); x < 512; x++ {
			n := 0
			for _, b := range blocks {
				if x&b.mask == b.value {
					n++
				}
			}
			want := 1
			for _, e := range excl {
				if x&mask == e {
					want = 0
				}
			}
			if n != want {
				t.Errorf("complement(%#b, %#b): %#b is in %d blocks, want %d", mask, excl, x, n, want)
			}
		}
	}
}
