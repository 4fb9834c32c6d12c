//go:build linux

package metabroker

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// getres calls getresuid(2) or getresgid(2) (nr) on the calling thread,
// and returns the real, effective and saved id; all three are ^0 if the
// call fails.
func getres(nr uintptr) (r, e, s uint32) {
	r, e, s = ^uint32(0), ^uint32(0), ^uint32(0)
	unix.RawSyscall(nr, uintptr(unsafe.Pointer(&r)), uintptr(unsafe.Pointer(&e)), uintptr(unsafe.Pointer(&s)))
	return r, e, s
}
