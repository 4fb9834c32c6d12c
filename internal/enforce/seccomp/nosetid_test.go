package seccomp

import (
	"testing"

	"github.com/airlock-sandbox/airlock/plan/spec"
)

// TestNoSetID runs NoSetID's filter in the interpreter: every call that
// would give a file a set-user-ID or set-group-ID bit is refused, and the
// same calls without one, and every other syscall, get through.
func TestNoSetID(t *testing.T) {
	for _, arch := range []Arch{ArchAMD64, ArchARM64} {
		tgt, err := targetFor(arch)
		if err != nil {
			t.Fatal(err)
		}
		prog, err := NoSetID(Options{Arch: arch})
		if err != nil {
			t.Fatalf("%s: %v", arch, err)
		}
		if err := Validate(prog); err != nil {
			t.Fatalf("%s: %v", arch, err)
		}
		const creat, tmpfile, rdwr = 0o100, 0o20200000, 2
		for _, c := range []struct {
			name string
			args [6]uint64
			want spec.Action
		}{
			{"chmod", [6]uint64{0, 0o4755}, spec.ActEPERM},
			{"chmod", [6]uint64{0, 0o2755}, spec.ActEPERM},
			{"chmod", [6]uint64{0, 0o755}, spec.ActAllow},
			{"fchmod", [6]uint64{3, 0o6777}, spec.ActEPERM},
			{"fchmod", [6]uint64{3, 0o777}, spec.ActAllow},
			{"fchmodat", [6]uint64{3, 0, 0o4700}, spec.ActEPERM},
			{"fchmodat", [6]uint64{3, 0, 0o700}, spec.ActAllow},
			{"fchmodat2", [6]uint64{3, 0, 0o2700, 0}, spec.ActEPERM},
			{"fchmodat2", [6]uint64{3, 0, 0o700, 0}, spec.ActAllow},
			{"openat", [6]uint64{3, 0, creat | rdwr, 0o4755}, spec.ActEPERM},
			{"openat", [6]uint64{3, 0, tmpfile | rdwr, 0o2755}, spec.ActEPERM},
			{"openat", [6]uint64{3, 0, creat | rdwr, 0o755}, spec.ActAllow},
			{"openat", [6]uint64{3, 0, rdwr, 0o4755}, spec.ActAllow}, // no file is created: the mode is ignored
			{"open", [6]uint64{0, creat, 0o4755}, spec.ActEPERM},
			{"open", [6]uint64{0, creat, 0o644}, spec.ActAllow},
			{"creat", [6]uint64{0, 0o4755}, spec.ActEPERM},
			{"creat", [6]uint64{0, 0o644}, spec.ActAllow},
			{"mknodat", [6]uint64{3, 0, 0o104755, 0}, spec.ActEPERM},
			{"mknodat", [6]uint64{3, 0, 0o100644, 0}, spec.ActAllow},
			{"mknod", [6]uint64{0, 0o102755, 0}, spec.ActEPERM},
			{"openat2", [6]uint64{3, 0, 0, 24}, spec.ActENOSYS},
			{"read", [6]uint64{0, 0, 1 << 20}, spec.ActAllow},
			{"mount", [6]uint64{}, spec.ActAllow}, // the program's own filter decides the rest
			{"setxattr", [6]uint64{}, spec.ActAllow},
		} {
			nr, ok := tgt.nums.lookup(c.name)
			if !ok {
				continue // chmod, open, creat and mknod are not syscalls on arm64
			}
			got, err := Run(prog, Data{Nr: int32(nr), Arch: tgt.audit, Args: c.args})
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Errorf("%s: %s%o = %v, want %v", arch, c.name, c.args[:4], got, c.want)
			}
		}
	}
}
