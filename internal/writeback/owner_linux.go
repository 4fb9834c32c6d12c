package writeback

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// The copy back of a grant runs on an OS thread of its own that acts as
// the owner of the grant's host folder, so the host's permission checks
// apply to every write and every file comes out the owner's: a root
// supervisor must not write where the owner could not (a root-owned
// folder inside a user's workspace), nor with root's privileges (the
// disk's reserved blocks, immutable files). Credentials are per thread on
// Linux: the thread drops its supplementary groups, takes the owner's
// fsuid and fsgid (setfsuid(2), setfsgid(2)) and keeps a single
// capability, CAP_DAC_READ_SEARCH, permitted but not effective. It raises
// it only around lookups on the stage, whose files belong to the
// sandbox's id with modes the sandbox chose. The goroutine never unlocks
// the thread, so the Go runtime ends the thread with it (runtime.LockOSThread)
// and no other goroutine ever runs with these credentials.

// capVersion is the capability ABI of capget(2) and capset(2) (Linux 2.6.26).
const capVersion = unix.LINUX_CAPABILITY_VERSION_3

// readSearch is CAP_DAC_READ_SEARCH in the first capability word.
const readSearch = 1 << unix.CAP_DAC_READ_SEARCH

// creds switches the stage-reading capability of the copy-back thread.
// The zero creds (an unprivileged supervisor, which acts as itself) does
// nothing.
type creds struct {
	keep bool  // CAP_DAC_READ_SEARCH is permitted: raise it to read the stage
	err  error // why lower failed, ending the thread
}

// raise makes CAP_DAC_READ_SEARCH effective, for a lookup on the stage.
// When it cannot, the lookup fails with EACCES as the owner's would.
func (c *creds) raise() {
	if c.keep {
		_ = capset(readSearch, readSearch) // without it the lookup is the owner's, and fails
	}
}

// lower drops every effective capability again. When it cannot, the
// thread must not go on with the capability in force: the goroutine ends
// there (runtime.Goexit), and with it the thread, and asOwner reports
// why.
func (c *creds) lower() {
	if !c.keep {
		return
	}
	if err := capset(readSearch, 0); err != nil {
		c.err = err
		runtime.Goexit()
	}
}

func capset(permitted, effective uint32) error {
	hdr := unix.CapUserHeader{Version: capVersion}
	var data [2]unix.CapUserData
	data[0].Permitted, data[0].Effective = permitted, effective
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}

// owner is the user the copy back of a grant acts as: the owner of the
// grant's host folder or file.
type owner struct{ UID, GID uint32 }

// asOwner runs fn on a new OS thread acting as o (see the top of this
// file) and waits for it. When the supervisor is not root it cannot act
// as anyone else: fn runs with the thread's own credentials, every
// capability dropped.
//
// Preconditions:
//   - fn starts no goroutine that touches a file system: it would run on
//     another thread, with the supervisor's credentials
func asOwner(o owner, fn func(c *creds)) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		var c *creds
		err := errors.New("airlock bug: the copy back's thread ended early")
		defer func() {
			if c != nil && c.err != nil {
				err = fmt.Errorf("act as the grant's owner: drop CAP_DAC_READ_SEARCH after reading the stage (the copy back stopped there): %w", c.err)
			}
			errc <- err
		}()
		if c, err = becomeOwner(o); err != nil {
			return
		}
		fn(c)
		err = nil
	}()
	return <-errc
}

// becomeOwner changes the calling thread's credentials to o's.
//
// Preconditions:
//   - runs on a locked OS thread that is never unlocked
func becomeOwner(o owner) (*creds, error) {
	c := &creds{}
	if os.Geteuid() == 0 {
		// setgroups(2) through the raw call: the libc and Go wrappers
		// change every thread of the process.
		if _, _, errno := unix.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0); errno != 0 && !noGroups() {
			return nil, fmt.Errorf("act as the grant's owner: drop the supplementary groups: %w", errno)
		}
		// setfsgid and setfsuid return the previous id and no error: a
		// second call with an invalid id reads back what is in force.
		_, _ = unix.SetfsgidRetGid(int(o.GID)) // checked just below
		_, _ = unix.SetfsuidRetUid(int(o.UID)) // checked just below
		gid, _ := unix.SetfsgidRetGid(-1)
		uid, _ := unix.SetfsuidRetUid(-1)
		if uint32(gid) != o.GID || uint32(uid) != o.UID {
			return nil, fmt.Errorf("act as the grant's owner %d:%d: the thread's file system ids are %d:%d (the id is not mapped in airlock's user namespace?)", o.UID, o.GID, uid, gid)
		}
	}
	hdr := unix.CapUserHeader{Version: capVersion}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return nil, fmt.Errorf("act as the grant's owner: capget: %w", err)
	}
	c.keep = data[0].Permitted&readSearch != 0
	keep := uint32(0)
	if c.keep {
		keep = readSearch
	}
	if err := capset(keep, 0); err != nil {
		return nil, fmt.Errorf("act as the grant's owner: drop capabilities: %w", err)
	}
	if err := unix.Capget(&hdr, &data[0]); err != nil || data[0].Effective != 0 || data[1].Effective != 0 || data[0].Permitted&^readSearch != 0 || data[1].Permitted != 0 {
		return nil, errors.New("act as the grant's owner: capabilities are still in force after dropping them")
	}
	return c, nil
}

// noGroups reports whether the calling thread has no supplementary group
// (getgroups(2) through the raw call, which is per thread): a user
// namespace may forbid setgroups(2) where there is nothing to drop.
func noGroups() bool {
	n, _, errno := unix.RawSyscall(unix.SYS_GETGROUPS, 0, 0, 0)
	return errno == 0 && n == 0
}
