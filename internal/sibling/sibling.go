// Package sibling opens a program that ships next to the running one
// (airlock-init beside a program that embeds the sandbox, airlock-server
// beside airlock) only when it is as trustworthy as the running program:
// in the same folder as the running program's resolved path, a regular
// file and not a symlink, executable, owned by the running program's
// owner or root, and writable by neither group nor others. The file is
// opened once and checked through its fd, and the caller executes that fd
// (/proc/self/fd/N), so it cannot be swapped between the check and the
// exec. This stops a user who can write one file where airlock looks, but
// not airlock itself, from having airlock (perhaps root's) run their
// program. It imports only the standard library.
package sibling

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Error is why the file at Path was refused.
type Error struct {
	Path   string // the file looked for, in the running program's resolved folder
	Reason string // what is wrong with it, e.g. "is a symbolic link"
	Err    error  // fs.ErrNotExist when it is missing; nil otherwise
}

func (e *Error) Error() string { return e.Path + " " + e.Reason }

// Unwrap returns Err.
func (e *Error) Unwrap() error { return e.Err }

// Open opens the program name in the folder of self, the running
// program's path (os.Executable), symlinks resolved, when it passes the
// checks of the package doc, and returns it open for reading, close on
// exec. It never follows a symlink named name and never blocks on a FIFO.
// A file that is missing or fails a check is refused with an *Error; a
// missing file's wraps fs.ErrNotExist.
func Open(self, name string) (*os.File, error) {
	self, err := filepath.EvalSymlinks(self)
	if err != nil {
		return nil, fmt.Errorf("resolve this program's path: %w", err)
	}
	me, err := os.Stat(self)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(filepath.Dir(self), name)
	// O_NONBLOCK: opening a FIFO for reading would otherwise wait for a
	// writer; it changes nothing for a regular file.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, &Error{Path: path, Reason: "does not exist", Err: fs.ErrNotExist}
	case errors.Is(err, syscall.ELOOP):
		return nil, &Error{Path: path, Reason: "is a symbolic link"}
	case err != nil:
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if why := distrust(st, owner(me), self); why != "" {
		f.Close()
		return nil, &Error{Path: path, Reason: why}
	}
	return f, nil
}

// distrust says why a file with info st may not be run by the program
// self, owned by uid want; "" when it may.
func distrust(st fs.FileInfo, want uint32, self string) string {
	mode := st.Mode()
	switch uid := owner(st); {
	case !mode.IsRegular():
		return fmt.Sprintf("is not a regular file (%v)", mode.Type())
	case mode.Perm()&0o022 != 0:
		return fmt.Sprintf("is writable by group or others (mode %04o)", mode.Perm())
	case mode.Perm()&0o111 == 0:
		return fmt.Sprintf("is not executable (mode %04o)", mode.Perm())
	case uid != want && uid != 0:
		return fmt.Sprintf("is owned by uid %d, neither root nor the owner of %s (uid %d)", uid, self, want)
	}
	return ""
}

// owner returns the uid that owns the file st describes.
func owner(st fs.FileInfo) uint32 {
	return st.Sys().(*syscall.Stat_t).Uid
}
