package seccomp

import (
	"fmt"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/airtest"
)

// TestBuildGolden pins the compiled program, instruction by instruction,
// for both architectures. The golden files were written from the filter
// as it was before its profile moved into the plan, so any change to what
// the kernel is given shows up here as a diff to review.
func TestBuildGolden(t *testing.T) {
	for _, arch := range []Arch{ArchAMD64, ArchARM64} {
		t.Run(string(arch), func(t *testing.T) {
			_, prog := mustBuild(t, arch)
			airtest.Golden(t, "filter-"+string(arch)+".txt", []byte(listing(prog)))
		})
	}
}

// listing renders prog one instruction a line, as struct sock_filter
// initializers.
func listing(prog []Insn) string {
	var b strings.Builder
	for pc, in := range prog {
		fmt.Fprintf(&b, "%4d { 0x%02x, %3d, %3d, 0x%08x }\n", pc, in.Code, in.Jt, in.Jf, in.K)
	}
	return b.String()
}
