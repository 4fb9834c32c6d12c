package sandbox

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// asSandbox returns a guard.Config.As that runs each file operation with
// the sandbox's host identity (uid and gid) as the file system identity: files the API
// creates in the sandbox's view belong to the sandbox (an overlay in the
// sandbox's user namespace refuses owners it cannot map), and the
// supervisor's root privileges do not apply to the operation.
//
// setfsuid(2) and setgroups(2) act on the calling thread only (they are
// raw syscalls here, not Go's process-wide wrappers), so each operation
// runs on a thread of its own that is thrown away afterwards: the
// goroutine exits still locked to it (runtime.LockOSThread).
func asSandbox(id, gid int) func(op func() error) error {
	return func(op func() error) error {
		done := make(chan error, 1)
		go func() {
			runtime.LockOSThread()
			// Never unlocked: the thread dies with the goroutine.
			if _, _, errno := unix.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0); errno != 0 {
				done <- errno
				return
			}
			unix.RawSyscall(unix.SYS_SETFSGID, uintptr(gid), 0, 0)
			unix.RawSyscall(unix.SYS_SETFSUID, uintptr(id), 0, 0)
			// setfsuid reports the previous id, not errors: check the result.
			if prev, _, _ := unix.RawSyscall(unix.SYS_SETFSUID, ^uintptr(0), 0, 0); int(prev) != id {
				done <- unix.EPERM
				return
			}
			done <- op()
		}()
		return <-done
	}
}
