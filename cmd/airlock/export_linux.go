package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/sandbox"
)

// hybridCgroups reports whether this host mounts cgroup v1 controllers and
// a cgroup2 hierarchy at /sys/fs/cgroup/unified.
func hybridCgroups() bool {
	var st unix.Statfs_t
	if unix.Statfs("/sys/fs/cgroup/unified", &st) != nil || st.Type != unix.CGROUP2_SUPER_MAGIC {
		return false
	}
	return unix.Statfs("/sys/fs/cgroup", &st) == nil && st.Type != unix.CGROUP2_SUPER_MAGIC
}

// copyInit puts airlock's init binary in the bundle folder (as
// airlock-init, 0755: the container's host uid executes it) and returns its
// path: airlock-init next to this executable when it is there, else this
// executable, which carries the same init.
func copyInit(dir string) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find this executable to copy its init into the bundle: %w (or pass --no-init)", err)
	}
	src := filepath.Join(filepath.Dir(self), sandbox.InitBinary)
	if _, err := os.Stat(src); err != nil {
		src = self
	}
	in, err := os.Open(src)
	if err != nil {
		return "", err
	}
	defer in.Close()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	dst := filepath.Join(dir, "airlock-init")
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return "", err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(dst, 0o755)
	}
	if err != nil {
		return "", fmt.Errorf("copy the init binary into the bundle: %w", err)
	}
	return dst, nil
}
