package connbroker

import (
	"errors"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// This file is Call's side of reading the target: its memory, an fd and
// its working folder, for Handler.Syscall.

// pageSize is the unit the target's memory is read in: a string may end
// just before an unmapped page.
var pageSize = uint64(os.Getpagesize())

// Read reads exactly n bytes (1 to 1 MiB) at addr in the target's memory
// with process_vm_readv(2). An address the target could not read gets
// EFAULT, as from the kernel; anything else that goes wrong EACCES.
func (c *Call) Read(addr uint64, n int) ([]byte, unix.Errno) {
	if n <= 0 || n > 1<<20 {
		return nil, unix.EINVAL
	}
	return readSockaddr(c.Pid, addr, n)
}

// ReadString reads the NUL-terminated string at addr in the target's
// memory, of at most max bytes before the NUL: ENAMETOOLONG when there is
// no NUL within max+1 bytes (PATH_MAX counts the NUL: pass 4095 for a
// path), EFAULT when the memory before the NUL cannot be read. It reads
// page by page, so a string that ends just before an unmapped page reads
// as the kernel's own copy would.
func (c *Call) ReadString(addr uint64, max int) (string, unix.Errno) {
	if max < 0 || max >= 1<<20 {
		return "", unix.EINVAL
	}
	want := uint64(max) + 1
	buf := make([]byte, want)
	var remote []unix.RemoteIovec
	for off := uint64(0); off < want; {
		n := min(pageSize-(addr+off)%pageSize, want-off)
		remote = append(remote, unix.RemoteIovec{Base: uintptr(addr + off), Len: int(n)})
		off += n
	}
	local := []unix.Iovec{{Base: &buf[0]}}
	local[0].SetLen(len(buf))
	got, err := unix.ProcessVMReadv(c.Pid, local, remote, 0)
	switch {
	case errors.Is(err, unix.EFAULT):
		return "", unix.EFAULT
	case err != nil:
		return "", unix.EACCES
	}
	for i, ch := range buf[:got] {
		if ch == 0 {
			return string(buf[:i]), 0
		}
	}
	if uint64(got) < want {
		return "", unix.EFAULT // the memory ends before the string does
	}
	return "", unix.ENAMETOOLONG
}

// FD returns the broker's copy of the target's fd (pidfd_getfd(2),
// close-on-exec), which the caller closes: the same open file, so what is
// done through it is done to the target's file. An fd the target does not
// have gets EBADF; anything else that goes wrong EACCES.
func (c *Call) FD(fd int) (int, unix.Errno) {
	if fd < 0 {
		return -1, unix.EBADF
	}
	if c.pidfd < 0 {
		p, err := openPidfd(c.Pid)
		if err != nil {
			return -1, unix.EACCES
		}
		c.pidfd = p
	}
	cp, err := unix.PidfdGetfd(c.pidfd, fd, 0)
	switch {
	case errors.Is(err, unix.EBADF):
		return -1, unix.EBADF
	case err != nil:
		return -1, unix.EACCES
	}
	return cp, 0
}

// Cwd returns an O_PATH fd of the target thread's working folder, which
// the caller closes. It fails with EACCES when it cannot be opened.
func (c *Call) Cwd() (int, unix.Errno) {
	fd, err := unix.Open("/proc/"+strconv.Itoa(c.Pid)+"/cwd", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, unix.EACCES
	}
	return fd, 0
}

// Valid reports whether the target still waits for this call's answer
// (SECCOMP_IOCTL_NOTIF_ID_VALID): when it does, everything read through
// the Call before was read from the target, whose thread id cannot have
// been reused meanwhile. Call it after the last read and before acting.
func (c *Call) Valid() bool { return c.b.valid(c.id) }

// Answer answers the call: it returns 0 for errno 0, else fails with
// errno (one above 511, where the kernel's internal codes start, fails
// with EPERM). Only the first Answer counts. When the target is gone, or
// its call was interrupted meanwhile, the answer is dropped.
func (c *Call) Answer(errno unix.Errno) {
	if !c.answered.CompareAndSwap(false, true) {
		return
	}
	if c.pidfd >= 0 {
		unix.Close(c.pidfd)
		c.pidfd = -1
	}
	if errno > maxErrno {
		errno = unix.EPERM
	}
	c.b.respond(c.id, errno) // ENOENT, when the target is gone, is ignored
	c.b.inflight.Done()
	<-c.b.slots
}
