package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"
)

// A group holds an O_PATH fd of each of its directories from Create to
// Destroy, and reads and writes its control files relative to them.
//
// Why: every path component the kernel looks up in sysfs or a cgroup
// filesystem is revalidated under that kernfs root's rwsem, which mkdir and
// rmdir of every other group (and each new network namespace's loopback
// device, in sysfs) take for writing. An absolute path such as
// /sys/fs/cgroup/memory/<self>/<group>/memory.oom_control costs five or
// more such lookups; relative to the group's fd it costs one. Under a burst
// of sandboxes these lookups were where supervisors waited most
// (kernfs_dop_revalidate in their kernel stacks).

// maxControlFile bounds what read accepts from one control file. The
// largest the package reads is cgroup.procs, whose length pids.max bounds.
const maxControlFile = 1 << 20

// fdOf returns the held fd of dir, a directory of the group. The caller
// holds g.mu.
func (g *Group) fdOf(dir string) (int, bool) {
	for i, d := range g.plan.Dirs {
		if d.Path == dir && i < len(g.fds) && g.fds[i] >= 0 {
			return g.fds[i], true
		}
	}
	return -1, false
}

// heldDir returns the held fd of the group directory that directly
// contains path, and path's base name. The caller holds g.mu.
func (g *Group) heldDir(path string) (int, string, bool) {
	fd, ok := g.fdOf(filepath.Dir(path))
	return fd, filepath.Base(path), ok
}

// openIn opens path through the group's held directory fd when it has
// one, else by path. The caller holds g.mu.
func (g *Group) openIn(path string, flags int) (int, error) {
	flags |= unix.O_CLOEXEC
	if dfd, file, ok := g.heldDir(path); ok {
		fd, err := unix.Openat(dfd, file, flags|unix.O_NOFOLLOW, 0)
		if err != nil {
			return -1, &os.PathError{Op: "open", Path: path, Err: err}
		}
		return fd, nil
	}
	fd, err := unix.Open(path, flags, 0)
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return fd, nil
}

// read returns the contents of a control file of the group (or of any
// file, by path). The caller holds g.mu.
func (g *Group) read(path string) ([]byte, error) {
	fd, err := g.openIn(path, unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd) // read-only: nothing to flush
	buf := make([]byte, 0, 512)
	for {
		if len(buf) == cap(buf) {
			if cap(buf) >= maxControlFile {
				return nil, fmt.Errorf("cgroup: read %s: longer than %d bytes", path, maxControlFile)
			}
			buf = slices.Grow(buf, cap(buf))
		}
		n, err := unix.Read(fd, buf[len(buf):cap(buf)])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}

// write writes value to an existing control file of the group (or to any
// file, by path) in one write(2), as the kernel wants it. The caller
// holds g.mu.
func (g *Group) write(path, value string) error {
	fd, err := g.openIn(path, unix.O_WRONLY)
	if err != nil {
		return fmt.Errorf("cgroup: write %q to %s: %w", value, path, err)
	}
	for {
		_, err = unix.Write(fd, []byte(value))
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("cgroup: write %q to %s: %w", value, path, &os.PathError{Op: "write", Path: path, Err: err})
	}
	return nil
}

// subdirs lists the directories directly below dir (a group directory,
// through its held fd, or any directory by path). It reports false when
// dir does not exist (any more). The caller holds g.mu.
func (g *Group) subdirs(dir string) ([]string, bool, error) {
	var f *os.File
	if dfd, ok := g.fdOf(dir); ok {
		fd, err := unix.Openat(dfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENODEV) {
			return nil, false, nil // removed
		}
		if err != nil {
			return nil, false, fmt.Errorf("cgroup: list %s: %w", dir, err)
		}
		f = os.NewFile(uintptr(fd), dir)
	} else {
		var err error
		if f, err = os.Open(dir); errors.Is(err, unix.ENOENT) {
			return nil, false, nil
		} else if err != nil {
			return nil, false, fmt.Errorf("cgroup: list %s: %w", dir, err)
		}
	}
	defer f.Close() // a directory: nothing to flush
	entries, err := f.ReadDir(-1)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENODEV) {
		return nil, false, nil // removed meanwhile
	}
	if err != nil {
		return nil, false, fmt.Errorf("cgroup: list %s: %w", dir, err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out, true, nil
}

// openDirs opens an O_PATH fd of every created directory of the group.
// The caller holds g.mu or owns g alone.
func (g *Group) openDirs(created int) error {
	g.fds = make([]int, len(g.plan.Dirs))
	for i := range g.fds {
		g.fds[i] = -1
	}
	for i, d := range g.plan.Dirs[:created] {
		// O_PATH suffices for openat(2) and for clone3(CLONE_INTO_CGROUP), Linux 5.7.
		fd, err := unix.Open(d.Path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("cgroup: open %s: %w", d.Path, err)
		}
		g.fds[i] = fd
	}
	return nil
}

// closeFDs closes the held directory fds. Afterwards the group's files
// are reached by path. The caller holds g.mu or owns g alone.
func (g *Group) closeFDs() {
	for _, fd := range g.fds {
		if fd >= 0 {
			// Closing an O_PATH fd cannot lose data; the error carries nothing.
			_ = unix.Close(fd)
		}
	}
	g.fds = nil
}
