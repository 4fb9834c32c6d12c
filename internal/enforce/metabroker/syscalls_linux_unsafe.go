//go:build linux

package metabroker

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// The calls x/sys has no wrapper for, or none that takes an empty path or
// a NULL one. Each acts on the open file fd itself (AT_EMPTY_PATH with the
// empty path), never on a name.

var emptyPath = [1]byte{0}

// fchmodat2Empty is fchmodat2(fd, "", mode, AT_EMPTY_PATH) (Linux 6.6),
// which changes the mode of the file fd refers to, an O_PATH fd included.
func fchmodat2Empty(fd int, mode uint32) error {
	_, _, e := unix.Syscall6(unix.SYS_FCHMODAT2, uintptr(fd), uintptr(unsafe.Pointer(&emptyPath[0])), uintptr(mode), unix.AT_EMPTY_PATH, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// utimensatFD sets the times of the file fd refers to: with empty, as
// utimensat(fd, "", ts, AT_EMPTY_PATH), for any fd (an O_PATH fd
// included); without, as utimensat(fd, NULL, ts, 0), futimens(3), which
// refuses an O_PATH fd with EBADF as the kernel does for the sandbox. A
// nil ts sets both times to now.
func utimensatFD(fd int, empty bool, ts *[2]unix.Timespec) error {
	var path unsafe.Pointer
	flags := 0
	if empty {
		path, flags = unsafe.Pointer(&emptyPath[0]), unix.AT_EMPTY_PATH
	}
	_, _, e := unix.Syscall6(unix.SYS_UTIMENSAT, uintptr(fd), uintptr(path), uintptr(unsafe.Pointer(ts)), uintptr(flags), 0, 0)
	if e != 0 {
		return e
	}
	return nil
}
