//go:build linux

package connbroker

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// notifSizes is struct seccomp_notif_sizes (linux/seccomp.h): the sizes
// of the kernel's structs, which may grow in later kernels.
type notifSizes struct {
	notif uint16 // struct seccomp_notif
	resp  uint16 // struct seccomp_notif_resp
	data  uint16 // struct seccomp_data
}

// getNotifSizes calls seccomp(SECCOMP_GET_NOTIF_SIZES) (Linux 5.0).
func getNotifSizes() (notifSizes, error) {
	var s notifSizes
	_, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_GET_NOTIF_SIZES, 0, uintptr(unsafe.Pointer(&s)))
	if errno != 0 {
		return notifSizes{}, errno
	}
	return s, nil
}

// ioctlBuf calls ioctl(fd, req, buf) with buf holding one of the
// seccomp_unotify(2) structs, and returns the ioctl's result.
func ioctlBuf(fd int, req uint, buf []byte) (int, error) {
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(unsafe.Pointer(&buf[0])))
	if errno != 0 {
		return -1, errno
	}
	return int(r), nil
}
