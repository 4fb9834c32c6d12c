package airtest

import (
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// RequireUserNS skips unless this process can create a user namespace.
func RequireUserNS(t testing.TB) {
	t.Helper()
	if err := probeUserNS(); err != nil {
		SkipOrFail(t, "user namespaces unavailable: %v", err)
	}
}

// UserNS is nil when this process can create a user namespace, else why
// it cannot.
func UserNS() error { return probeUserNS() }

func probeUserNS() error {
	b, err := os.ReadFile("/proc/sys/user/max_user_namespaces")
	if err != nil {
		return err
	}
	if strings.TrimSpace(string(b)) == "0" {
		return errString("/proc/sys/user/max_user_namespaces is 0")
	}
	if b, err := os.ReadFile("/proc/sys/kernel/unprivileged_userns_clone"); err == nil && os.Geteuid() != 0 && strings.TrimSpace(string(b)) == "0" {
		return errString("kernel.unprivileged_userns_clone is 0")
	}
	return nil
}

type errString string

func (e errString) Error() string { return string(e) }

// LandlockABI returns the kernel's Landlock ABI version, or 0 when absent.
func LandlockABI() int {
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 {
		return 0
	}
	return int(v)
}

// RequireLandlockABI skips unless the kernel offers Landlock ABI min or later.
func RequireLandlockABI(t testing.TB, min int) {
	t.Helper()
	if got := LandlockABI(); got < min {
		SkipOrFail(t, "Landlock ABI %d needed, kernel offers %d", min, got)
	}
}

// RequireCgroupV1 skips unless the cgroup v1 controller is mounted at
// /sys/fs/cgroup/<controller> and writable (root).
func RequireCgroupV1(t testing.TB, controller string) {
	t.Helper()
	RequireRoot(t)
	var st unix.Statfs_t
	if err := unix.Statfs("/sys/fs/cgroup/"+controller, &st); err != nil || st.Type != unix.CGROUP_SUPER_MAGIC {
		SkipOrFail(t, "cgroup v1 controller %q is not mounted at /sys/fs/cgroup/%s", controller, controller)
	}
}

// RequireBinary skips unless the executable exists at path.
func RequireBinary(t testing.TB, path string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		SkipOrFail(t, "%s is not installed: %v", path, err)
	}
}
