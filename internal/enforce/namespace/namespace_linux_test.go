package namespace_test

import (
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/enforce/namespace"
	"github.com/airlock-sandbox/airlock/plan"
)

func TestCloneFlags(t *testing.T) {
	// What the sandbox cloned its init with before the namespaces were
	// plan data (sandbox/run_linux.go cloneFlags).
	const before = unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWNET |
		unix.CLONE_NEWIPC | unix.CLONE_NEWUTS | unix.CLONE_NEWCGROUP
	got, err := namespace.CloneFlags(plan.DefaultNamespaces())
	if err != nil || got != before {
		t.Fatalf("CloneFlags(DefaultNamespaces()) = %#x, %v; want %#x", got, err, before)
	}
	for _, bad := range [][]plan.Namespace{nil, {"time"}, {plan.NamespaceUser, ""}} {
		if got, err := namespace.CloneFlags(bad); err == nil {
			t.Errorf("CloneFlags(%q) = %#x, nil error; want an error", bad, got)
		}
	}
}

// TestHostAdmin: root on this host (the test runs in the initial user
// namespace) is a host admin; root that lost CAP_SYS_ADMIN (as in a
// container) is not, nor is root of a user namespace of its own.
func TestHostAdmin(t *testing.T) {
	switch os.Getenv("AIRLOCK_HOSTADMIN_CHILD") {
	case "drop":
		runtime.LockOSThread() // capabilities are per thread: drop and check on this one
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var data [2]unix.CapUserData
		if err := unix.Capget(&hdr, &data[0]); err != nil {
			t.Fatal(err)
		}
		data[0].Effective &^= 1 << unix.CAP_SYS_ADMIN
		if err := unix.Capset(&hdr, &data[0]); err != nil {
			t.Fatal(err)
		}
		fallthrough
	case "userns":
		if namespace.HostAdmin() {
			t.Fatal("HostAdmin() = true")
		}
		return
	}
	if os.Geteuid() != 0 {
		if namespace.HostAdmin() {
			t.Fatalf("HostAdmin() = true for uid %d", os.Geteuid())
		}
		return
	}
	if !namespace.HostAdmin() {
		t.Fatal("HostAdmin() = false for root in the initial user namespace")
	}
	for mode, attr := range map[string]*syscall.SysProcAttr{
		"drop": {},
		"userns": {Cloneflags: syscall.CLONE_NEWUSER, UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}}},
	} {
		t.Run(mode, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestHostAdmin$", "-test.count=1")
			cmd.Env = append(os.Environ(), "AIRLOCK_HOSTADMIN_CHILD="+mode)
			cmd.SysProcAttr = attr
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("child (%s): %v\n%s", mode, err, out)
			}
		})
	}
}
