//go:build unix

package server

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// ownedByUs reports whether the file belongs to the server's effective user.
func ownedByUs(st fs.FileInfo) bool {
	sys, ok := st.Sys().(*syscall.Stat_t)
	return ok && int(sys.Uid) == os.Geteuid()
}

// lockFolder creates dir/.lock already locked: the file is made under a
// temporary name, locked (flock(2), LOCK_EX), then renamed, so that a
// sweeping server never finds a .lock that is not held yet.
func lockFolder(dir string) (*os.File, error) {
	f, err := os.CreateTemp(dir, lockName+"-")
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, err
	}
	if err := os.Rename(f.Name(), filepath.Join(dir, lockName)); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// takeLock opens a lock file, never through a symlink, and reports whether
// its lock was free (its server is gone); the caller closes f to release it.
func takeLock(path string) (f *os.File, ok bool) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, false
	}
	if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		f.Close()
		return nil, false
	}
	return f, true
}
