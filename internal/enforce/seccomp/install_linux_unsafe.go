//go:build linux

package seccomp

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// setFilter calls seccomp(SECCOMP_SET_MODE_FILTER, flags, &prog) and returns
// its non-negative result: 0, or with SECCOMP_FILTER_FLAG_TSYNC the id of a
// thread that could not be synchronized.
func setFilter(filters []unix.SockFilter, flags uintptr) (uintptr, error) {
	prog := unix.SockFprog{Len: uint16(len(filters)), Filter: &filters[0]}
	r, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, uintptr(unsafe.Pointer(&prog)))
	if errno != 0 {
		return 0, errno
	}
	return r, nil
}
