package image

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// A cache entry is CACHE/<key hex>/ (mode 0700) holding rootfs/, the root
// filesystem, and done, the marker: the key's document, written last, with
// O_EXCL|O_NOFOLLOW, beside the root where no image entry can be. An entry
// is renamed into place whole, so one without its marker was never made
// by airlock.
const (
	entryRoot   = "rootfs"
	entryMarker = "done"
	maxMarker   = 64 << 10
)

// cache is an open cache folder, owned by this user (uid, gid).
type cache struct {
	dir      string
	fd       int
	uid, gid int
}

// openCache makes (0700) and opens the cache folder dir. It refuses a
// folder someone else owns or may write, and one any of whose parents
// someone other than root or this user owns or may write (unless it is
// sticky, as /tmp is): whoever can replace the cache can choose what a
// sandbox runs.
func openCache(dir string) (*cache, error) {
	if !filepath.IsAbs(dir) {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return nil, err
		}
		dir = abs
	}
	dir = filepath.Clean(dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("image cache %s: %w", dir, err)
	}
	uid, gid := os.Geteuid(), os.Getegid()
	for p := filepath.Dir(dir); ; p = filepath.Dir(p) {
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return nil, fmt.Errorf("image cache %s: %s: %w", dir, p, err)
		}
		switch {
		case st.Mode&unix.S_IFMT == unix.S_IFLNK:
			return nil, fmt.Errorf("image cache %s: %s is a symlink: name the cache by its real path", dir, p)
		case st.Uid != 0 && int(st.Uid) != uid:
			return nil, fmt.Errorf("image cache %s: its folder %s is owned by uid %d, who could replace the cache: put the cache in a folder of yours or root's", dir, p, st.Uid)
		case st.Mode&0o022 != 0 && st.Mode&unix.S_ISVTX == 0:
			return nil, fmt.Errorf("image cache %s: its folder %s is writable by others (mode %04o), who could replace the cache: put the cache elsewhere", dir, p, st.Mode&0o7777)
		}
		if p == "/" {
			break
		}
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("image cache %s: %w", dir, err)
	}
	c := &cache{dir: dir, fd: fd, uid: uid, gid: gid}
	if err := c.trusted(fd, "", 0o022); err != nil {
		c.close()
		return nil, fmt.Errorf("image cache %s: %w: use a folder of yours that only you may write", dir, err)
	}
	return c, nil
}

func (c *cache) close() { unix.Close(c.fd) }

// trusted checks that fd (the cache's name, for messages) is owned by
// this user and has none of the mode bits bad.
func (c *cache) trusted(fd int, name string, bad uint32) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if name == "" {
		name = "the folder"
	}
	if int(st.Uid) != c.uid {
		return fmt.Errorf("%s is owned by uid %d, not this user (%d)", name, st.Uid, c.uid)
	}
	if st.Mode&bad != 0 {
		return fmt.Errorf("%s has mode %04o: open to others", name, st.Mode&0o7777)
	}
	return nil
}

// lookup reports whether the entry key (hex) is in the cache, complete,
// and holds doc. An entry that is there but not right (not this user's,
// open to others, without its marker or with another) is an error naming
// it: it was not made by airlock for this user, and is never used.
func (c *cache) lookup(key, doc string) (bool, error) {
	efd, err := unix.Openat(c.fd, key, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	bad := func(err error) (bool, error) {
		return false, fmt.Errorf("image cache entry %s: %w: airlock did not make it for you; remove it", filepath.Join(c.dir, key), err)
	}
	if err != nil {
		return bad(err)
	}
	defer unix.Close(efd)
	if err := c.trusted(efd, "the entry", 0o077); err != nil {
		return bad(err)
	}
	rfd, err := unix.Openat(efd, entryRoot, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return bad(fmt.Errorf("its %s: %w", entryRoot, err))
	}
	err = c.trusted(rfd, "its "+entryRoot, 0o022)
	unix.Close(rfd)
	if err != nil {
		return bad(err)
	}
	mfd, err := unix.Openat(efd, entryMarker, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return bad(fmt.Errorf("its marker: %w", err))
	}
	f := os.NewFile(uintptr(mfd), entryMarker)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(mfd, &st); err != nil {
		return bad(err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 1 || st.Size > maxMarker {
		return bad(errors.New("its marker is not a plain file"))
	}
	if err := c.trusted(mfd, "its marker", 0o022); err != nil {
		return bad(err)
	}
	b := make([]byte, maxMarker+1)
	n, _ := f.Read(b)
	if string(b[:n]) != doc {
		return bad(errors.New("its marker names another image"))
	}
	return true, nil
}

// temp is an entry being made: CACHE/.unpack-<random>/ (0700, this
// user's), and its root, given to the child's uid.
type temp struct {
	name   string
	fd     int
	rootFD int
}

// newTemp makes a temporary entry whose root folder the child (uid, gid)
// owns. The entry is locked (flock(2)) while this process holds it: a
// sweep removes only the entries no one holds.
func (c *cache) newTemp(uid, gid int) (*temp, error) {
	var t *temp
	for try := 0; ; try++ {
		var b [8]byte
		_, _ = rand.Read(b[:]) // crypto/rand does not fail on Linux
		t = &temp{name: tempPrefix + hex.EncodeToString(b[:]), fd: -1, rootFD: -1}
		if err := unix.Mkdirat(c.fd, t.name, 0o700); err != nil {
			return nil, fmt.Errorf("image cache %s: %w", c.dir, err)
		}
		fd, err := unix.Openat(c.fd, t.name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err == nil {
			if err = unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err == nil && sameFile(c.fd, t.name, fd) {
				t.fd = fd
				break
			}
			unix.Close(fd)
		}
		// Another unpack's sweep took it between its making and its lock.
		if try == 3 {
			return nil, fmt.Errorf("image cache %s: make an entry: it went each time it was made (%v): is something else removing files in the cache?", c.dir, err)
		}
	}
	err := func() (err error) {
		if err := c.trusted(t.fd, "", 0o077); err != nil {
			return err
		}
		if err := unix.Mkdirat(t.fd, entryRoot, 0o700); err != nil {
			return err
		}
		if t.rootFD, err = unix.Openat(t.fd, entryRoot, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err != nil {
			return err
		}
		// An explicit mode clears a set-gid bit inherited from the cache:
		// the child's files get its own gid.
		if err := unix.Fchmod(t.rootFD, 0o700); err != nil {
			return err
		}
		if uid != c.uid || gid != c.gid {
			return unix.Fchown(t.rootFD, uid, gid)
		}
		return nil
	}()
	if err != nil {
		c.drop(t)
		return nil, fmt.Errorf("image cache %s: make an entry: %w", c.dir, err)
	}
	return t, nil
}

// drop removes a temporary entry, whatever it holds, and then lets go
// of its lock.
func (c *cache) drop(t *temp) {
	if t.rootFD >= 0 {
		unix.Close(t.rootFD)
	}
	_ = removeAll(c.fd, t.name, maxDepth+3) // what cannot be removed stays, harmless, under a name never used; sweep tries again
	if t.fd >= 0 {
		unix.Close(t.fd)
	}
}

// tempPrefix begins the name of every temporary entry.
const tempPrefix = ".unpack-"

// sweep removes the temporary entries that unpacks which were killed left
// in the cache: a folder named tempPrefix and 16 hex digits, owned by this
// user, that no unpack holds the lock of. Every step is relative to the
// cache's fd, and no symlink is followed nor mount crossed (removeAll);
// anything else is left alone. What cannot be removed stays for the next
// sweep.
func (c *cache) sweep() {
	names, err := readNames(c.fd)
	if err != nil {
		return
	}
	for _, n := range names {
		h, ok := strings.CutPrefix(n, tempPrefix)
		if !ok || len(h) != 16 || strings.Trim(h, "0123456789abcdef") != "" {
			continue
		}
		fd, err := unix.Openat2(c.fd, n, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: beneath})
		if err != nil {
			continue // a symlink, a file, or gone
		}
		if c.trusted(fd, "", 0) == nil && unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) == nil && sameFile(c.fd, n, fd) {
			_ = removeAll(c.fd, n, maxDepth+3)
		}
		unix.Close(fd)
	}
}

// sameFile reports whether name in the folder dirfd is the file fd.
func sameFile(dirfd int, name string, fd int) bool {
	var a, b unix.Stat_t
	return unix.Fstatat(dirfd, name, &a, unix.AT_SYMLINK_NOFOLLOW) == nil && unix.Fstat(fd, &b) == nil && a.Dev == b.Dev && a.Ino == b.Ino
}

// commit checks what the child (childUID, childGID) unpacked, gives it to
// this user, writes the marker and renames the entry to key. Another
// unpack of the same image that renamed its entry first wins: its entry
// is checked and used, and cached says so.
func (c *cache) commit(t *temp, key, doc string, childUID, childGID int) (cached bool, err error) {
	g := &giveTree{childUID: childUID, childGID: childGID, uid: c.uid, gid: c.gid}
	if err := g.give(t.rootFD, "/", 0); err != nil {
		return false, fmt.Errorf("check what the unpack made: %w: the image is refused", err)
	}
	if childUID != c.uid || childGID != c.gid {
		if err := unix.Fchown(t.rootFD, c.uid, c.gid); err != nil {
			return false, err
		}
	}
	if err := unix.Fchmod(t.rootFD, 0o755); err != nil {
		return false, err
	}
	mfd, err := unix.Openat(t.fd, entryMarker, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o444)
	if err != nil {
		return false, fmt.Errorf("write the entry's marker: %w", err)
	}
	_, err = writeAll(mfd, []byte(doc))
	unix.Close(mfd)
	if err != nil {
		return false, fmt.Errorf("write the entry's marker: %w", err)
	}
	// renameat2(2) RENAME_NOREPLACE, Linux 3.15: never over an entry.
	err = unix.Renameat2(c.fd, t.name, c.fd, key, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EINVAL) {
		// A file system without RENAME_NOREPLACE: a folder is renamed only
		// over an empty one.
		err = unix.Renameat(c.fd, t.name, c.fd, key)
	}
	if err == nil {
		return false, nil
	}
	if errors.Is(err, unix.EEXIST) || errors.Is(err, unix.ENOTEMPTY) {
		ok, lerr := c.lookup(key, doc)
		if ok {
			return true, nil
		}
		if lerr != nil {
			return false, lerr
		}
	}
	return false, fmt.Errorf("image cache %s: %w", filepath.Join(c.dir, key), err)
}
