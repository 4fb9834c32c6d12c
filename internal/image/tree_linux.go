package image

import (
	"errors"
	"fmt"
	"os"
	"path"

	"golang.org/x/sys/unix"
)

// readNames lists the folder fd (which it leaves open and where it was
// not read before).
func readNames(fd int) ([]string, error) {
	dup, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), "folder")
	defer f.Close()
	return f.Readdirnames(-1)
}

// removeAll removes name, with everything below it, from the folder
// dirfd: every step is relative to an fd of the folder it is in, and no
// symlink is followed (a link is removed, not what it points at). depth
// bounds the folders it descends. A missing name is no error.
func removeAll(dirfd int, name string, depth int) error {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return unix.Unlinkat(dirfd, name, 0)
	}
	if depth <= 0 {
		return fmt.Errorf("more than %d folders deep", maxDepth)
	}
	// Beneath dirfd, onto no other mount (a folder mounted on is left).
	fd, err := unix.Openat2(dirfd, name, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: beneath})
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	// The extractor gives every folder's owner rwx, but an unpack killed
	// before its end may leave one without: its owner (this user, or
	// root) gives it back first, by the fd.
	if st.Mode&0o700 != 0o700 {
		_ = unix.Fchmod(fd, st.Mode&0o7777|0o700)
	}
	for {
		names, err := readNames(fd)
		if err != nil {
			return err
		}
		if len(names) == 0 {
			break
		}
		for _, n := range names {
			if err := removeAll(fd, n, depth-1); err != nil {
				return fmt.Errorf("%q: %w", n, err)
			}
		}
	}
	return unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
}

// giveTree is the caller's check of what the child unpacked, once the
// child is gone: below the folder root every entry must be a folder, a
// regular file or a symlink, owned by the child's uid and gid, with no
// set-id bit; at most maxEntries entries, maxDepth folders deep and
// maxBytes of files. Each entry is
// then given to uid/gid (chown is skipped when they are the child's
// already). Every step is relative to its folder's fd, no symlink
// followed, so nothing outside root is touched whatever the tree holds.
type giveTree struct {
	childUID, childGID int // who the child ran as
	uid, gid           int // who the tree is given to
	entries            int
	bytes              int64              // of the regular files, each counted once
	given              map[[2]uint64]bool // files of several names given already, by device and inode
}

// give checks and gives the folder fd (path rel) and everything below it.
func (g *giveTree) give(fd int, rel string, depth int) error {
	if depth > maxDepth+1 {
		return fmt.Errorf("%q: more than %d folders deep", rel, maxDepth)
	}
	names, err := readNames(fd)
	if err != nil {
		return fmt.Errorf("%q: %w", rel, err)
	}
	for _, n := range names {
		if g.entries++; g.entries > maxEntries+1 {
			return fmt.Errorf("more than %d entries", maxEntries)
		}
		p := path.Join(rel, n)
		var st unix.Stat_t
		if err := unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("%q: %w", p, err)
		}
		again := st.Nlink > 1 && g.given[[2]uint64{uint64(st.Dev), uint64(st.Ino)}]
		if (int(st.Uid) != g.childUID || int(st.Gid) != g.childGID) && !again {
			return fmt.Errorf("%q is owned by %d:%d, not the unpack's %d:%d", p, st.Uid, st.Gid, g.childUID, g.childGID)
		}
		if st.Mode&(unix.S_ISUID|unix.S_ISGID) != 0 {
			return fmt.Errorf("%q has a set-id bit (mode %o)", p, st.Mode)
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR, unix.S_IFREG, unix.S_IFLNK:
		default:
			return fmt.Errorf("%q is neither a folder, a file nor a symlink (mode %o)", p, st.Mode)
		}
		if (g.uid != g.childUID || g.gid != g.childGID) && !again {
			if st.Nlink > 1 {
				if g.given == nil {
					g.given = map[[2]uint64]bool{}
				}
				g.given[[2]uint64{uint64(st.Dev), uint64(st.Ino)}] = true
			}
			// fchownat(2) AT_SYMLINK_NOFOLLOW: a link itself, never its target.
			if err := unix.Fchownat(fd, n, g.uid, g.gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				return fmt.Errorf("%q: %w", p, err)
			}
		}
		if st.Mode&unix.S_IFMT == unix.S_IFREG && !again {
			// The child's own bound is not trusted: what it made is
			// counted here.
			if g.bytes += st.Size; g.bytes > maxBytes {
				return fmt.Errorf("more than %d bytes of files: %s", maxBytes, tooLarge)
			}
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			continue
		}
		cfd, err := unix.Openat(fd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("%q: %w", p, err)
		}
		err = g.give(cfd, p, depth+1)
		unix.Close(cfd)
		if err != nil {
			return err
		}
	}
	return nil
}
