//go:build linux

package connbroker

import (
	"fmt"
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Probe reports whether this process may make the calls the broker
// needs to read a connect: pidfd_open(2), pidfd_getfd(2) and
// process_vm_readv(2), tried on the process itself. A container
// runtime's default seccomp profile (Docker's, containerd's) refuses
// pidfd_getfd without CAP_SYS_PTRACE; under it Serve can read no
// connect and refuses every one with EACCES, the egress proxy's too, so
// a caller checks Probe before it relies on Serve. The result is the
// same for the life of the process and is computed once.
func Probe() error {
	probeOnce.Do(func() { probeErr = probe() })
	return probeErr
}

var (
	probeOnce sync.Once
	probeErr  error
)

func probe() error {
	pidfd, err := unix.PidfdOpen(os.Getpid(), 0)
	if err != nil {
		return fmt.Errorf("pidfd_open(2) is refused (%w)", err)
	}
	defer unix.Close(pidfd)
	cp, err := unix.PidfdGetfd(pidfd, pidfd, 0)
	if err != nil {
		return fmt.Errorf("pidfd_getfd(2) is refused (%w)", err)
	}
	unix.Close(cp)
	var src, dst [8]byte
	src[0] = 1
	local := []unix.Iovec{{Base: &dst[0], Len: uint64(len(dst))}}
	remote := []unix.RemoteIovec{{Base: uintptr(unsafe.Pointer(&src[0])), Len: len(src)}}
	if _, err := unix.ProcessVMReadv(os.Getpid(), local, remote, 0); err != nil {
		return fmt.Errorf("process_vm_readv(2) is refused (%w)", err)
	}
	if dst[0] != 1 {
		return fmt.Errorf("process_vm_readv(2) read nothing")
	}
	return nil
}
