package oci_test

import (
	"runtime"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/export/oci"
	"github.com/airlock-sandbox/airlock/internal/enforce/seccomp"
	"github.com/airlock-sandbox/airlock/plan"
)

// evalOCI answers a syscall as libseccomp does with an OCI section: any
// entry naming it whose conditions all hold decides, else the default. It
// fails t when two matching entries disagree (their order would matter).
func evalOCI(t *testing.T, sc *specs.LinuxSeccomp, name string, args [6]uint64) plan.Action {
	t.Helper()
	var got []plan.Action
	for _, e := range sc.Syscalls {
		named := false
		for _, n := range e.Names {
			named = named || n == name
		}
		if !named || !argsHold(t, e.Args, args) {
			continue
		}
		got = append(got, ociToAction(t, e.Action, e.ErrnoRet))
	}
	if len(got) == 0 {
		return ociToAction(t, sc.DefaultAction, sc.DefaultErrnoRet)
	}
	for _, a := range got[1:] {
		if a != got[0] {
			t.Fatalf("%s%v: entries disagree (%v): the answer depends on rule order", name, args, got)
		}
	}
	return got[0]
}

func argsHold(t *testing.T, conds []specs.LinuxSeccompArg, args [6]uint64) bool {
	t.Helper()
	for _, c := range conds {
		a := args[c.Index]
		switch c.Op {
		case specs.OpEqualTo:
			if a != c.Value {
				return false
			}
		case specs.OpMaskedEqual:
			if a&c.Value != c.ValueTwo {
				return false
			}
		default:
			t.Fatalf("operator %s is not emitted by the exporter", c.Op)
		}
	}
	return true
}

func ociToAction(t *testing.T, a specs.LinuxSeccompAction, errno *uint) plan.Action {
	t.Helper()
	switch a {
	case specs.ActAllow:
		return plan.ActAllow
	case specs.ActErrno:
		switch {
		case errno == nil || *errno == 1:
			return plan.ActEPERM
		case *errno == 38:
			return plan.ActENOSYS
		}
	}
	t.Fatalf("unexpected OCI action %s %v", a, errno)
	return 0
}

// TestSeccompAgreesWithFilter checks the exported section against the BPF
// program airlock installs, run in the seccomp package's interpreter, for
// every syscall with argument rules and a sample of the others, over
// arguments around every rule boundary (including garbage in the high half
// of 32-bit arguments).
func TestSeccompAgreesWithFilter(t *testing.T) {
	prog, err := seccomp.Build(plan.DefaultSeccomp(), seccomp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sc, err := oci.Seccomp(plan.DefaultSeccomp(), "")
	if err != nil {
		t.Fatal(err)
	}
	audit := map[string]uint32{"amd64": 0xc000003e, "arm64": 0xc00000b7}[runtime.GOARCH]
	nrs := map[string]int{
		"ioctl": unix.SYS_IOCTL, "socket": unix.SYS_SOCKET, "socketpair": unix.SYS_SOCKETPAIR,
		"clone": unix.SYS_CLONE, "clone3": unix.SYS_CLONE3, "personality": unix.SYS_PERSONALITY,
		"read": unix.SYS_READ, "unshare": unix.SYS_UNSHARE, "mount": unix.SYS_MOUNT, "ptrace": unix.SYS_PTRACE,
		"io_uring_setup": unix.SYS_IO_URING_SETUP, "memfd_create": unix.SYS_MEMFD_CREATE, "execveat": unix.SYS_EXECVEAT,
		"landlock_create_ruleset": unix.SYS_LANDLOCK_CREATE_RULESET, "bpf": unix.SYS_BPF, "setns": unix.SYS_SETNS,
	}
	var vals []uint64
	for _, v := range []uint64{0, 1, 2, 6, 8, 10, 15, 17, 262, 0x5411, 0x5412, 0x5413, 0x541b, 0x541c, 0x541d,
		0x20000, 0x20008, 0x80000, 0x7fffffff, 0x80000000, 0xffffffff, 0x10000000, 0x00020000, 0x40000000 | 17,
		0x100011 /* CLONE_CHILD_SETTID|SIGCHLD-ish */, 0x3d0f00 /* thread flags */} {
		vals = append(vals, v, v|1<<32, v|0xffffffff_00000000, v|0x80|1<<40)
	}
	for name, nr := range nrs {
		for _, v := range vals {
			for _, args := range [][6]uint64{{v}, {0, v}, {2, v, 6}, {10, v, 0}, {v, 1, 0}, {v, 2, 17}, {v, 3, 0}} {
				want, err := seccomp.Run(prog, seccomp.Data{Nr: int32(nr), Arch: audit, Args: args})
				if err != nil {
					t.Fatal(err)
				}
				if got := evalOCI(t, sc, name, args); got != want {
					t.Errorf("%s%#x: OCI section answers %v, airlock's filter %v", name, args, got, want)
				}
			}
		}
	}
}
