package sandbox

import (
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// InitBinary is the name of the small init binary (cmd/airlock-init) that
// the supervisor prefers to re-executing itself.
const InitBinary = "airlock-init"

// initExecutable returns the binary to re-execute as the sandbox's init:
// Config.Executable when set; else airlock-init next to this executable
// when it is trustworthy (a regular file with the same owner as this
// binary, or root's, writable by nobody else); else /proc/self/exe. Every
// choice runs the same init code, so the fallback changes speed, not
// enforcement.
func initExecutable(configured string) string {
	if configured != "" {
		return configured
	}
	self, err := os.Executable()
	if err != nil {
		return "/proc/self/exe"
	}
	return initNextTo(self)
}

// initNextTo applies initExecutable's rules to the binary at self.
func initNextTo(self string) string {
	self, err := filepath.EvalSymlinks(self)
	if err != nil {
		return "/proc/self/exe"
	}
	cand := filepath.Join(filepath.Dir(self), InitBinary)
	var st, me unix.Stat_t
	if unix.Lstat(cand, &st) != nil || unix.Stat(self, &me) != nil {
		return "/proc/self/exe"
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Mode&0o022 != 0 || st.Mode&0o111 == 0 {
		return "/proc/self/exe"
	}
	if st.Uid != me.Uid && st.Uid != 0 {
		return "/proc/self/exe"
	}
	return cand
}
