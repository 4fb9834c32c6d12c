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
type workspaces struct {
	dir   string // absolute; holds the workspaces
	owned bool   // dir was made by New and is removed by Shutdown
}

// newWorkspaces prepares dir, or a fresh folder under os.TempDir() when dir
// is "". An existing dir must be a real folder (not a symlink) that belongs
// to the server's user and that nobody else may enter; a missing one is
// created 0700 (its parent must exist).
func newWorkspaces(dir string) (*workspaces, error) {
	if dir == "" {
		d, err := os.MkdirTemp("", "airlock-serve-")
		if err != nil {
			return nil, fmt.Errorf("server: new: workspace folder: %w: set TMPDIR to a writable folder or give WorkspaceDir", err)
		}
		return &workspaces{dir: d, owned: true}, nil
	}
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("server: new: workspace folder %q is relative: give an absolute path", dir)
	}
	dir = filepath.Clean(dir)
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("server: new: workspace folder: %w: create its parent folder first", err)
	}
	st, err := os.Lstat(dir)
	switch {
	case err != nil:
		return nil, fmt.Errorf("server: new: workspace folder: %w", err)
	case !st.IsDir():
		return nil, fmt.Errorf("server: new: workspace folder %s is not a folder (a symlink or a file): give a real folder", dir)
	case st.Mode().Perm()&0o077 != 0:
		return nil, fmt.Errorf("server: new: workspace folder %s has mode %04o, so other users can enter it: chmod 700 it", dir, st.Mode().Perm())
	case !ownedByUs(st):
		return nil, fmt.Errorf("server: new: workspace folder %s belongs to another user: give a folder the server's user owns", dir)
	}
	return &workspaces{dir: dir}, nil
}

// create makes a new, empty workspace and returns its absolute path.
// os.MkdirTemp picks an unused random name and creates it 0700, so no two
// sessions ever share one and no one can have prepared it.
func (w *workspaces) create() (string, error) {
	return os.MkdirTemp(w.dir, "ws-")
}

// remove deletes a workspace made by create and everything in it. The
// session must have ended: nothing may change the tree meanwhile.
// os.RemoveAll does not follow symlinks, so links the sandbox left inside
// cannot point it at anything outside. Folders the sandbox made read-only
// stop an unprivileged server from removing their entries; they are made
// writable and the removal is tried once more.
func (w *workspaces) remove(ws string) error {
	if filepath.Dir(ws) != w.dir || !strings.HasPrefix(filepath.Base(ws), "ws-") {
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

// close removes the folder of workspaces when New made it.
func (w *workspaces) close() error {
	if !w.owned {
		return nil
	}
	return os.RemoveAll(w.dir)
}
