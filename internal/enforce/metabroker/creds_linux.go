package metabroker

import (
	"errors"
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// Identity is the sandbox's uid and gid, which every call of the broker
// runs under.
type Identity struct {
	UID, GID int
}

// Do runs f on a thread of its own whose real, effective, saved and
// file-system ids are id's, without supplementary groups when the process
// is root (otherwise with the process's own, which the sandbox has too),
// and without capabilities; the thread is thrown away afterwards. It
// returns f's error, or why the thread could not take id (a process that
// is not root can take only its own ids).
//
// setresuid(2), setgroups(2) and capset(2) are made as raw syscalls, which
// act on the calling thread alone (Go's syscall.Setuid acts on every
// thread of the process); the goroutine locks its thread and exits
// without unlocking it, so the Go runtime ends the thread rather than run
// other goroutines on it. A locked thread never clones the runtime's new
// threads, so none inherits the ids.
func (id Identity) Do(f func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		if err := become(id); err != nil {
			done <- err
			return
		}
		done <- f()
	}()
	return <-done
}

// become gives the calling thread, which the caller has locked for good,
// id's credentials and no capabilities, and checks that it has them.
func become(id Identity) error {
	if id.UID < 0 || id.GID < 0 || id.UID > 1<<32-2 || id.GID > 1<<32-2 {
		return fmt.Errorf("metabroker: airlock bug: identity %d:%d is not a uid and gid", id.UID, id.GID)
	}
	root := unix.Geteuid() == 0
	if root {
		if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0); e != 0 {
			return fmt.Errorf("metabroker: drop supplementary groups: %w", e)
		}
	}
	g, u := uintptr(id.GID), uintptr(id.UID)
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, g, g, g); e != 0 {
		return fmt.Errorf("metabroker: take gid %d: %w (a supervisor that is not root can take only its own)", id.GID, e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, u, u, u); e != 0 {
		return fmt.Errorf("metabroker: take uid %d: %w (a supervisor that is not root can take only its own)", id.UID, e)
	}
	// Taking a uid other than 0 cleared root's capabilities; a process that
	// is not root may hold some of its own (ambient, file capabilities).
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("metabroker: clear ambient capabilities: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("metabroker: drop capabilities: %w", err)
	}
	return checkBecame(id, root)
}

// checkBecame verifies what become did: every id is id's, no capability is
// left, and a root process's thread has no supplementary group.
func checkBecame(id Identity, root bool) error {
	ru, eu, su := getres(unix.SYS_GETRESUID)
	rg, eg, sg := getres(unix.SYS_GETRESGID)
	fu, _, _ := unix.RawSyscall(unix.SYS_SETFSUID, ^uintptr(0), 0, 0) // an invalid id changes nothing and reports the current one
	fg, _, _ := unix.RawSyscall(unix.SYS_SETFSGID, ^uintptr(0), 0, 0)
	for _, c := range []struct {
		want int
		got  []uint32
	}{{id.UID, []uint32{ru, eu, su, uint32(fu)}}, {id.GID, []uint32{rg, eg, sg, uint32(fg)}}} {
		for _, got := range c.got {
			if int(got) != c.want {
				return fmt.Errorf("metabroker: the broker's thread has id %d where it should have %d", got, c.want)
			}
		}
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("metabroker: read capabilities: %w", err)
	}
	for _, d := range data {
		if d.Effective|d.Permitted|d.Inheritable != 0 {
			return errors.New("metabroker: the broker's thread still holds capabilities")
		}
	}
	if root {
		if n, _, _ := unix.RawSyscall(unix.SYS_GETGROUPS, 0, 0, 0); n != 0 {
			return fmt.Errorf("metabroker: the broker's thread still has %d supplementary groups", n)
		}
	}
	return nil
}

// pool is a fixed set of threads that have the sandbox's identity, which
// carry out the broker's calls.
type pool struct {
	work chan func()
}

// poolSize is how many calls are carried out at once. Each is a handful of
// syscalls on a local filesystem; more threads would only wait for the
// same disk.
const poolSize = 4

// poolQueue is how many calls may wait for a thread: as many as the
// connect broker lets be in flight, so that handing one over never blocks
// the goroutine that receives them.
const poolQueue = 64

// startPool starts the threads, each with id's credentials.
func startPool(id Identity) (*pool, error) {
	p := &pool{work: make(chan func(), poolQueue)}
	started := make(chan error, poolSize)
	for range poolSize {
		go func() {
			runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
			if err := become(id); err != nil {
				started <- err
				return
			}
			started <- nil
			for f := range p.work {
				f()
			}
		}()
	}
	var err error
	for range poolSize {
		err = errors.Join(err, <-started)
	}
	if err != nil {
		close(p.work)
		return nil, err
	}
	return p, nil
}

// close ends the pool's threads once the calls handed to them are done.
// Nothing may be handed to them afterwards.
func (p *pool) close() { close(p.work) }
