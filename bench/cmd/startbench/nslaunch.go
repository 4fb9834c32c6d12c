package main

import (
	"fmt"
	"os/exec"
	"runtime"

	"golang.org/x/sys/unix"
)

// hiddenCgroup2Launcher returns a start function that forks from one
// locked OS thread living in a private mount namespace where the cgroup2
// mount /sys/fs/cgroup/unified is detached. crun 1.8 refuses this VM's
// hybrid cgroup layout otherwise (DESIGN.md §7); doing it on a thread of
// this process instead of wrapping every run in unshare(1) or nsenter(1)
// keeps an extra execve out of crun's start-up time. Children inherit the
// thread's mount namespace (clone(2) without CLONE_NEWNS copies it).
func hiddenCgroup2Launcher() (func(*exec.Cmd) error, error) {
	type req struct {
		cmd  *exec.Cmd
		errc chan error
	}
	reqs := make(chan req)
	setup := make(chan error)
	go func() {
		// Never unlocked: the thread's namespace differs from the others'.
		runtime.LockOSThread()
		err := unix.Unshare(unix.CLONE_NEWNS)
		if err == nil {
			err = unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, "")
		}
		if err == nil {
			if uerr := unix.Unmount("/sys/fs/cgroup/unified", unix.MNT_DETACH); uerr != nil && uerr != unix.EINVAL && uerr != unix.ENOENT {
				err = fmt.Errorf("umount /sys/fs/cgroup/unified: %w", uerr)
			}
		}
		setup <- err
		if err != nil {
			return
		}
		for r := range reqs {
			r.errc <- r.cmd.Start()
		}
	}()
	if err := <-setup; err != nil {
		return nil, fmt.Errorf("private mount namespace for crun: %w", err)
	}
	return func(cmd *exec.Cmd) error {
		errc := make(chan error)
		reqs <- req{cmd, errc}
		return <-errc
	}, nil
}
