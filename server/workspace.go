package server

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// workspaces makes the private folder of each session whose policy grants
// no fs_write of its own: created 0700 in a folder only the server can
// enter, one per session, never reused, removed when the session ends.
//
// Each server keeps its workspaces in a folder of its own,
// PARENT/airlock-serve-RANDOM, and holds an exclusive lock on the .lock
// file in it for as long as it runs. A server that was killed cannot remove
// its folder, but its lock dies with it: the next server to start with the
// same parent removes every such folder whose lock it can take.
type workspaces struct {
	dir  string   // absolute; holds this server's workspaces; removed by close
	lock *os.File // .lock in dir, locked; nil where locks are not supported
}

// Names in the parent folder and in the server's folder.
const (
	serverDirPrefix = "airlock-serve-"
	workspacePrefix = "ws-"
	lockName        = ".lock"
)

// newWorkspaces makes this server's folder in parent, or in os.TempDir()
// when parent is "", after removing the folders killed servers left there.
// A given parent that exists must be a real folder (not a symlink) that
// belongs to the server's user and that nobody else may enter; a missing
// one is created 0700 (its own parent must exist). It returns how many
// leftover folders it removed.
func newWorkspaces(parent string) (*workspaces, int, error) {
	if parent == "" {
		// The shared temporary folder is not ours to check; our folder in
		// it is made by MkdirTemp, 0700 with an unguessable name.
		parent = os.TempDir()
	} else if err := checkParent(parent); err != nil {
		return nil, 0, err
	}
	swept := sweep(parent)
	dir, err := os.MkdirTemp(parent, serverDirPrefix)
	if err != nil {
		return nil, swept, fmt.Errorf("server: new: workspace folder: %w: give a writable folder (WorkspaceDir, or TMPDIR)", err)
	}
	w := &workspaces{dir: dir}
	if w.lock, err = lockFolder(dir); err != nil {
		_ = os.RemoveAll(dir) // made just now; the lock error is the one to report
		return nil, swept, fmt.Errorf("server: new: lock the workspace folder: %w", err)
	}
	return w, swept, nil
}

// checkParent creates parent 0700 if it is missing, and refuses it unless
// it is an absolute real folder of the server's user, closed to others.
func checkParent(parent string) error {
	if !filepath.IsAbs(parent) {
		return fmt.Errorf("server: new: workspace folder %q is relative: give an absolute path", parent)
	}
	if err := os.Mkdir(parent, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("server: new: workspace folder: %w: create its parent folder first", err)
	}
	st, err := os.Lstat(parent)
	switch {
	case err != nil:
		return fmt.Errorf("server: new: workspace folder: %w", err)
	case !st.IsDir():
		return fmt.Errorf("server: new: workspace folder %s is not a folder (a symlink or a file): give a real folder", parent)
	case st.Mode().Perm()&0o077 != 0:
		return fmt.Errorf("server: new: workspace folder %s has mode %04o, so other users can enter it: chmod 700 it", parent, st.Mode().Perm())
	case !ownedByUs(st):
		return fmt.Errorf("server: new: workspace folder %s belongs to another user: give a folder the server's user owns", parent)
	}
	return nil
}

// sweep removes the folders of servers that are gone: ours (owner, 0700, a
// real folder) and holding a .lock nobody holds. A folder without a lock
// file, or whose lock is held, is left alone. It returns how many it
// removed; what it cannot remove stays for the next server.
func sweep(parent string) int {
	ents, err := os.ReadDir(parent)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), serverDirPrefix) {
			continue
		}
		dir := filepath.Join(parent, e.Name())
		st, err := os.Lstat(dir)
		if err != nil || !st.IsDir() || st.Mode().Perm() != 0o700 || !ownedByUs(st) {
			continue
		}
		if f, ok := takeLock(filepath.Join(dir, lockName)); ok {
			if os.RemoveAll(dir) == nil {
				n++
			}
			f.Close()
		}
	}
	return n
}

// create makes a new, empty workspace and returns its absolute path.
// os.MkdirTemp picks an unused random name and creates it 0700, so no two
// sessions ever share one and no one can have prepared it.
func (w *workspaces) create() (string, error) {
	return os.MkdirTemp(w.dir, workspacePrefix)
}

// remove deletes a workspace made by create and everything in it. The
// session must have ended: nothing may change the tree meanwhile.
// os.RemoveAll does not follow symlinks, so links the sandbox left inside
// cannot point it at anything outside. Folders the sandbox made read-only
// stop an unprivileged server from removing their entries; they are made
// writable and the removal is tried once more.
func (w *workspaces) remove(ws string) error {
	if filepath.Dir(ws) != w.dir || !strings.HasPrefix(filepath.Base(ws), workspacePrefix) {
		return fmt.Errorf("airlock bug: remove workspace %q: not one of %s", ws, w.dir)
	}
	if err := os.RemoveAll(ws); err == nil {
		return nil
	}
	_ = filepath.WalkDir(ws, func(p string, d fs.DirEntry, err error) error {
		// WalkDir reports symlinks as such and never follows them; only
		// real folders are changed. Errors leave the next RemoveAll to fail.
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	return os.RemoveAll(ws)
}

// close removes the server's folder and releases its lock.
func (w *workspaces) close() error {
	err := os.RemoveAll(w.dir)
	if w.lock != nil {
		w.lock.Close()
	}
	return err
}
