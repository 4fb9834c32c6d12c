//go:build linux

package image

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// capHeader and capData are capset(2)'s arguments, in static storage so
// that their addresses stay valid while syscall.AllThreadsSyscall runs on
// every thread.
var (
	capHeader = unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	capData   [2]unix.CapUserData
)

// capsetZero empties the effective, permitted and inheritable sets of
// every thread (all) or of the calling one.
func capsetZero(all bool) syscall.Errno {
	capData = [2]unix.CapUserData{}
	h, d := uintptr(unsafe.Pointer(&capHeader)), uintptr(unsafe.Pointer(&capData[0]))
	var e syscall.Errno
	if all {
		_, _, e = syscall.AllThreadsSyscall(unix.SYS_CAPSET, h, d, 0)
	} else {
		_, _, e = unix.RawSyscall(unix.SYS_CAPSET, h, d, 0)
	}
	return e
}
