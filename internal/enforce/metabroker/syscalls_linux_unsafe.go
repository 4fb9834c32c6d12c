//go:build linux

package metabroker

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// utimensat(2) with an empty path or a NULL one, which x/sys's
// UtimesNanoAt cannot make.

var emptyPath = [1]byte{0}

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
