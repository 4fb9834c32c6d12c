package seccomp

import (
	"encoding/binary"
	"fmt"

	"github.com/airlock-sandbox/airlock/plan/spec"
)

// Insn is one classic BPF instruction, laid out like the kernel's struct
// sock_filter (linux/filter.h): a 16-bit opcode, two 8-bit forward jump
// offsets, and a 32-bit constant.
type Insn struct {
	Code   uint16 // opcode: class | size | mode, or class | op | source
	Jt, Jf uint8  // for conditional jumps, how many instructions to skip when the test holds / fails
	K      uint32 // constant operand: offset, comparand, mask, jump length or return value
}

// The classic BPF opcodes this package emits and Run understands. They are a
// subset of what seccomp_check_filter (kernel/seccomp.c) accepts. Each is
// the OR of its fields (linux/bpf_common.h), whose values the comments
// give; BPF_LD, BPF_W, BPF_JA and BPF_K are 0.
const (
	opLdAbsW = 0x20 // BPF_LD 0x00 | BPF_W 0x00 | BPF_ABS 0x20: A = 32-bit word at offset K of seccomp_data
	opAndK   = 0x54 // BPF_ALU 0x04 | BPF_AND 0x50 | BPF_K: A &= K
	opJa     = 0x05 // BPF_JMP 0x05 | BPF_JA 0x00: pc += K
	opJeqK   = 0x15 // BPF_JMP 0x05 | BPF_JEQ 0x10 | BPF_K
	opJgtK   = 0x25 // BPF_JMP 0x05 | BPF_JGT 0x20 | BPF_K
	opJgeK   = 0x35 // BPF_JMP 0x05 | BPF_JGE 0x30 | BPF_K
	opJsetK  = 0x45 // BPF_JMP 0x05 | BPF_JSET 0x40 | BPF_K
	opRetK   = 0x06 // BPF_RET 0x06 | BPF_K: return K
)

// Limits and the layout of struct seccomp_data (linux/seccomp.h).
const (
	maxInsns = 4096 // BPF_MAXINSNS: the kernel refuses longer programs
	maxJump  = 255  // Jt and Jf are 8 bits wide; longer jumps go through a BPF_JA
	dataSize = 64   // sizeof(struct seccomp_data)
	offNr    = 0    // offsetof(struct seccomp_data, nr)
	offArch  = 4    // offsetof(struct seccomp_data, arch)
	offArgs  = 16   // offsetof(struct seccomp_data, args)
)

// argLo and argHi are the offsets of the low and high 32-bit halves of
// syscall argument i in seccomp_data. Both supported architectures are
// little-endian, so the low half comes first.
func argLo(i int) uint32 { return offArgs + 8*uint32(i) }
func argHi(i int) uint32 { return offArgs + 8*uint32(i) + 4 }

// Data mirrors the kernel's struct seccomp_data (linux/seccomp.h), the input
// a filter sees for each syscall.
type Data struct {
	Nr                 int32     // syscall number as the task passed it (x32 calls carry bit 30)
	Arch               uint32    // AUDIT_ARCH_* of the calling convention
	InstructionPointer uint64    // where the syscall was made; the filter ignores it
	Args               [6]uint64 // raw register values, not truncated to the argument's C type
}

// bytes lays d out as the kernel does on a little-endian machine.
func (d Data) bytes() [dataSize]byte {
	var b [dataSize]byte
	binary.LittleEndian.PutUint32(b[offNr:], uint32(d.Nr))
	binary.LittleEndian.PutUint32(b[offArch:], d.Arch)
	binary.LittleEndian.PutUint64(b[8:], d.InstructionPointer)
	for i, a := range d.Args {
		binary.LittleEndian.PutUint64(b[offArgs+8*i:], a)
	}
	return b
}

// Validate reports whether the kernel would accept prog, checking the rules
// of sk_chk_filter and seccomp_check_filter for the opcodes this package
// uses: length 1 to 4096, only known opcodes, aligned in-bounds loads, jumps
// that stay inside the program, and a return as the last instruction. Since
// classic BPF jumps only forward, such a program always terminates.
func Validate(prog []Insn) error {
	if len(prog) == 0 || len(prog) > maxInsns {
		return fmt.Errorf("seccomp: validate: program has %d instructions: the kernel accepts 1 to %d", len(prog), maxInsns)
	}
	for pc, in := range prog {
		switch in.Code {
		case opLdAbsW:
			if in.K%4 != 0 || in.K > dataSize-4 {
				return fmt.Errorf("seccomp: validate: instruction %d loads offset %d: loads must be 4-byte aligned and inside the %d-byte seccomp_data", pc, in.K, dataSize)
			}
		case opAndK, opRetK:
		case opJa:
			if uint64(pc)+1+uint64(in.K) >= uint64(len(prog)) {
				return fmt.Errorf("seccomp: validate: instruction %d jumps %d past the end of the program", pc, in.K)
			}
		case opJeqK, opJgtK, opJgeK, opJsetK:
			if pc+1+int(in.Jt) >= len(prog) || pc+1+int(in.Jf) >= len(prog) {
				return fmt.Errorf("seccomp: validate: instruction %d jumps (%d, %d) past the end of the program", pc, in.Jt, in.Jf)
			}
		default:
			return fmt.Errorf("seccomp: validate: instruction %d has opcode %#x: only ld/and/ja/jeq/jgt/jge/jset/ret with constants are allowed", pc, in.Code)
		}
	}
	if prog[len(prog)-1].Code != opRetK {
		return fmt.Errorf("seccomp: validate: last instruction has opcode %#x: a program must end with ret", prog[len(prog)-1].Code)
	}
	return nil
}

// Run interprets prog on d the way the kernel would and returns the action
// it selects. It returns an error instead of guessing when prog does
// something the kernel's checker would have refused; every program Build
// returns runs without error.
func Run(prog []Insn, d Data) (spec.Action, error) {
	buf := d.bytes()
	var a uint32
	for pc := 0; pc < len(prog); pc++ {
		in := prog[pc]
		switch in.Code {
		case opLdAbsW:
			if in.K%4 != 0 || in.K > dataSize-4 {
				return 0, fmt.Errorf("seccomp: run: instruction %d loads offset %d outside seccomp_data", pc, in.K)
			}
			a = binary.LittleEndian.Uint32(buf[in.K:])
		case opAndK:
			a &= in.K
		case opJa:
			if uint64(in.K) >= uint64(len(prog)-pc-1) {
				return 0, fmt.Errorf("seccomp: run: instruction %d jumps %d past the end of the program", pc, in.K)
			}
			pc += int(in.K)
		case opJeqK, opJgtK, opJgeK, opJsetK:
			var ok bool
			switch in.Code {
			case opJeqK:
				ok = a == in.K
			case opJgtK:
				ok = a > in.K
			case opJgeK:
				ok = a >= in.K
			default:
				ok = a&in.K != 0
			}
			off := int(in.Jf)
			if ok {
				off = int(in.Jt)
			}
			if pc+1+off >= len(prog) {
				return 0, fmt.Errorf("seccomp: run: instruction %d jumps %d past the end of the program", pc, off)
			}
			pc += off
		case opRetK:
			return spec.Action(in.K), nil
		default:
			return 0, fmt.Errorf("seccomp: run: instruction %d has unsupported opcode %#x", pc, in.Code)
		}
	}
	return 0, fmt.Errorf("seccomp: run: program ended without ret")
}
