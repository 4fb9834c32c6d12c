package seccomp

import (
	"testing"

	"github.com/airlock-sandbox/airlock/plan"
)

func TestValidate(t *testing.T) {
	ret := Insn{Code: opRetK, K: uint32(plan.ActAllow)}
	tests := []struct {
		name string
		prog []Insn
		ok   bool
	}{
		{"ret-only", []Insn{ret}, true},
		{"empty", nil, false},
		{"too-long", make([]Insn, maxInsns+1), false},
		{"no-final-ret", []Insn{ret, {Code: opLdAbsW}}, false},
		{"load-unaligned", []Insn{{Code: opLdAbsW, K: 2}, ret}, false},
		{"load-past-data", []Insn{{Code: opLdAbsW, K: dataSize}, ret}, false},
		{"load-last-word", []Insn{{Code: opLdAbsW, K: dataSize - 4}, ret}, true},
		{"jeq-past-end", []Insn{{Code: opJeqK, Jt: 1}, ret}, false},
		{"jeq-in-range", []Insn{{Code: opJeqK, Jt: 1}, ret, ret}, true},
		{"ja-past-end", []Insn{{Code: opJa, K: 1}, ret}, false},
		{"ja-huge", []Insn{{Code: opJa, K: 0xffffffff}, ret}, false},
		{"unknown-opcode", []Insn{{Code: 0x07}, ret}, false},                   // BPF_MISC|BPF_TAX
		{"ret-accumulator", []Insn{{Code: 0x16}, ret}, false},                  // BPF_RET|BPF_A is valid BPF but never emitted
		{"indirect-load", []Insn{{Code: 0x40, K: 0}, ret}, false},              // BPF_LD|BPF_W|BPF_IND
		{"jeq-register", []Insn{{Code: 0x1d, Jt: 0}, ret}, false},              // BPF_JMP|BPF_JEQ|BPF_X
		{"and-register", []Insn{{Code: 0x5c}, ret}, false},                     // BPF_ALU|BPF_AND|BPF_X
		{"load-scratch", []Insn{{Code: 0x60, K: 0}, ret}, false},               // BPF_LD|BPF_MEM
		{"store-scratch", []Insn{{Code: 0x02, K: 0}, ret}, false},              // BPF_ST
		{"load-halfword", []Insn{{Code: 0x28, K: 0}, ret}, false},              // BPF_LD|BPF_H|BPF_ABS
		{"max-length", append(make([]Insn, maxInsns-1, maxInsns), ret), false}, // zero Insn is BPF_LD|BPF_IMM
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Validate(tt.prog)
			if (err == nil) != tt.ok {
				t.Errorf("Validate(%s) = %v, want ok=%v", tt.name, err, tt.ok)
			}
		})
	}
}

func TestRun(t *testing.T) {
	d := Data{Nr: 7, Arch: 0xc000003e, Args: [6]uint64{0x1122334455667788}}
	tests := []struct {
		name string
		prog []Insn
		want plan.Action
	}{
		{"ret", []Insn{{Code: opRetK, K: 42}}, 42},
		{"load-nr", []Insn{
			{Code: opLdAbsW, K: offNr}, {Code: opJeqK, K: 7, Jt: 0, Jf: 1},
			{Code: opRetK, K: 1}, {Code: opRetK, K: 2},
		}, 1},
		{"load-arch", []Insn{
			{Code: opLdAbsW, K: offArch}, {Code: opJeqK, K: 0xc000003e, Jt: 1},
			{Code: opRetK, K: 1}, {Code: opRetK, K: 2},
		}, 2},
		{"arg-low-word-first", []Insn{
			{Code: opLdAbsW, K: argLo(0)}, {Code: opJeqK, K: 0x55667788, Jf: 1},
			{Code: opRetK, K: 1}, {Code: opRetK, K: 2},
		}, 1},
		{"arg-high-word", []Insn{
			{Code: opLdAbsW, K: argHi(0)}, {Code: opAndK, K: 0xff}, {Code: opJeqK, K: 0x44, Jf: 1},
			{Code: opRetK, K: 1}, {Code: opRetK, K: 2},
		}, 1},
		{"jgt-false", []Insn{
			{Code: opLdAbsW, K: offNr}, {Code: opJgtK, K: 7, Jt: 1},
			{Code: opRetK, K: 1}, {Code: opRetK, K: 2},
		}, 1},
		{"jge-true", []Insn{
			{Code: opLdAbsW, K: offNr}, {Code: opJgeK, K: 7, Jt: 1},
			{Code: opRetK, K: 1}, {Code: opRetK, K: 2},
		}, 2},
		{"jset", []Insn{
			{Code: opLdAbsW, K: offNr}, {Code: opJsetK, K: 4, Jt: 1},
			{Code: opRetK, K: 1}, {Code: opRetK, K: 2},
		}, 2},
		{"ja", []Insn{{Code: opJa, K: 1}, {Code: opRetK, K: 1}, {Code: opRetK, K: 2}}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := Validate(tt.prog); err != nil {
				t.Fatalf("Validate = %v", err)
			}
			if got := mustRun(t, tt.prog, d); got != tt.want {
				t.Errorf("Run(%s) = %v, want %v", tt.name, got, tt.want)
			}
		})
	}
}

func TestRunRefusesMalformed(t *testing.T) {
	tests := []struct {
		name string
		prog []Insn
	}{
		{"empty", nil},
		{"falls-off-end", []Insn{{Code: opLdAbsW}}},
		{"jump-off-end", []Insn{{Code: opJeqK, Jt: 5, Jf: 5}}},
		{"ja-off-end", []Insn{{Code: opJa, K: 1 << 31}}},
		{"bad-load", []Insn{{Code: opLdAbsW, K: 61}, {Code: opRetK}}},
		{"bad-opcode", []Insn{{Code: 0x07}, {Code: opRetK}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, err := Run(tt.prog, Data{}); err == nil {
				t.Errorf("Run(%s) = %v, nil error; want an error", tt.name, got)
			}
		})
	}
}
