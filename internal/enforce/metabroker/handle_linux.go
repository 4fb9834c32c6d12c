package metabroker

import (
	"encoding/binary"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/enforce/connbroker"
)

// Bounds of the xattr calls (linux/limits.h), which the kernel answers
// with ERANGE and E2BIG.
const (
	xattrNameMax = 255
	xattrSizeMax = 65536
)

// request is one call as read from the target: its object and the op's
// arguments, the broker's own copies.
type request struct {
	call
	// The object: obj, the broker's copy of a target fd (an fd form, an
	// empty path, /proc/self/fd/N), or else path resolved from base (-1:
	// an absolute path), following a final symlink unless nofollow.
	obj      int
	objIsFD  bool // obj is an fd form's fd: the f* call is made on it, as the kernel would
	base     int
	path     string
	nofollow bool

	mode     uint32            // opChmod
	uid, gid uint32            // opChown; ^0 leaves one as it is
	times    *[2]unix.Timespec // opUtimes; nil: now
	attr     string            // opSetxattr, opRemovexattr: the attribute's name
	value    []byte            // opSetxattr
	xflags   int               // opSetxattr: XATTR_CREATE, XATTR_REPLACE
}

func (r *request) close() {
	for _, fd := range []int{r.obj, r.base} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
	r.obj, r.base = -1, -1
}

// Handle takes one handed-over call; it is connbroker.Handler.Syscall,
// called on the goroutine that receives the notifications. It reads the
// call's path, names and values once from the target and takes the fds it
// names, as the supervisor, checks that the target still waits (so what
// it read was the target's), and hands the rest to a thread with the
// sandbox's identity, which resolves, checks and carries out the call and
// answers it. It leaves the call (the broker then fails it with EAGAIN)
// only when every such thread is busy and 64 calls wait for one.
func (b *Broker) Handle(c *connbroker.Call) bool {
	ca, ok := calls[c.Nr]
	if !ok {
		c.Answer(unix.EPERM) // a call the broker does not know: never let through
		return true
	}
	r, errno := read(c, ca)
	switch {
	case !c.Valid():
		errno = unix.EINTR // gone: the answer is not delivered
	case errno == 0:
		select {
		case b.pool.work <- func() {
			errno := b.carryOut(&r)
			r.close()
			c.Answer(errno)
		}:
			return true
		default:
			r.close()
			return false
		}
	}
	r.close()
	c.Answer(errno)
	return true
}

// read reads the call's object and arguments from the target. It returns
// the errno the kernel would fail the call with when they are malformed.
func read(c *connbroker.Call, ca call) (request, unix.Errno) {
	r := request{call: ca, obj: -1, base: -1}
	a := c.Args
	flags, k := 0, 1 // the at-flags, and the index of the op's first argument
	if ca.shape == shapeAt {
		k = 2
	}
	if ca.flags >= 0 {
		flags = int(int32(a[ca.flags]))
		if flags&^atFlags != 0 {
			return r, unix.EINVAL
		}
		r.nofollow = flags&unix.AT_SYMLINK_NOFOLLOW != 0
	}
	if ca.shape == shapeLPath {
		r.nofollow = true
	}
	if errno := r.readArgs(c, a[k:]); errno != 0 {
		return r, errno
	}
	var errno unix.Errno
	switch {
	case ca.shape == shapeFD:
		r.obj, errno = c.FD(int(int32(a[0])))
		r.objIsFD = true
	case ca.op == opUtimes && ca.shape == shapeAt && a[1] == 0 && int32(a[0]) != unix.AT_FDCWD:
		// utimensat(fd, NULL, ...) and futimesat(fd, NULL, ...): futimens.
		if flags != 0 {
			return r, unix.EINVAL
		}
		r.obj, errno = c.FD(int(int32(a[0])))
		r.objIsFD = true
	default:
		dirfd, addr := unix.AT_FDCWD, a[0]
		if ca.shape == shapeAt {
			dirfd, addr = int(int32(a[0])), a[1]
		}
		errno = r.readPath(c, dirfd, addr, flags&unix.AT_EMPTY_PATH != 0)
	}
	return r, errno
}

// readPath reads the path at addr and takes what it is resolved from.
func (r *request) readPath(c *connbroker.Call, dirfd int, addr uint64, emptyOK bool) unix.Errno {
	p, errno := c.ReadString(addr, unix.PathMax-1)
	if errno != 0 {
		return errno
	}
	r.path = p
	switch {
	case p == "" && !emptyOK:
		return unix.ENOENT
	case p == "" && dirfd == unix.AT_FDCWD:
		r.obj, errno = c.Cwd()
		return errno
	case p == "":
		r.obj, errno = c.FD(dirfd)
		return errno
	}
	if fd, ok := procSelfFD(p); ok && !r.nofollow {
		// glibc's fchmodat(AT_SYMLINK_NOFOLLOW) before 2.39 chmods
		// /proc/self/fd/N of an O_PATH fd: the target's fd N, as the
		// kernel would follow it (the broker's /proc/self is its own).
		r.obj, errno = c.FD(fd)
		if errno == unix.EBADF {
			errno = unix.ENOENT
		}
		return errno
	}
	if strings.HasPrefix(p, "/") {
		return 0
	}
	if dirfd == unix.AT_FDCWD {
		r.base, errno = c.Cwd()
	} else {
		r.base, errno = c.FD(dirfd)
	}
	return errno
}

// procSelfFD parses /proc/self/fd/N and /proc/thread-self/fd/N.
func procSelfFD(p string) (int, bool) {
	for _, pre := range []string{"/proc/self/fd/", "/proc/thread-self/fd/"} {
		if rest, ok := strings.CutPrefix(p, pre); ok && rest != "" && rest[0] != '+' && rest[0] != '-' {
			n, err := strconv.ParseUint(rest, 10, 31)
			return int(n), err == nil
		}
	}
	return 0, false
}

// readArgs reads the op's arguments, from the first one after the object.
func (r *request) readArgs(c *connbroker.Call, a []uint64) unix.Errno {
	switch r.op {
	case opChmod:
		r.mode = uint32(a[0]) & 0o7777
	case opChown:
		r.uid, r.gid = uint32(a[0]), uint32(a[1])
	case opUtimes:
		return r.readTimes(c, a[0])
	case opSetxattr:
		size := a[2]
		r.xflags = int(int32(a[3]))
		if r.xflags&^(unix.XATTR_CREATE|unix.XATTR_REPLACE) != 0 {
			return unix.EINVAL
		}
		if errno := r.readName(c, a[0]); errno != 0 {
			return errno
		}
		if size > xattrSizeMax {
			return unix.E2BIG
		}
		if size > 0 {
			v, errno := c.Read(a[1], int(size))
			if errno != 0 {
				return errno
			}
			r.value = v
		}
	case opRemovexattr:
		return r.readName(c, a[0])
	}
	return 0
}

func (r *request) readName(c *connbroker.Call, addr uint64) unix.Errno {
	n, errno := c.ReadString(addr, xattrNameMax)
	switch {
	case errno == unix.ENAMETOOLONG || errno == 0 && n == "":
		return unix.ERANGE
	case errno != 0:
		return errno
	}
	r.attr = n
	return 0
}

// readTimes reads a utime call's times: nil (now) for a NULL pointer.
func (r *request) readTimes(c *connbroker.Call, addr uint64) unix.Errno {
	if addr == 0 {
		return 0
	}
	e := binary.NativeEndian
	n := 32
	if r.call.times == timesUtimbuf {
		n = 16
	}
	raw, errno := c.Read(addr, n)
	if errno != 0 {
		return errno
	}
	var ts [2]unix.Timespec
	switch r.call.times {
	case timesUtimbuf:
		ts[0].Sec, ts[1].Sec = int64(e.Uint64(raw)), int64(e.Uint64(raw[8:]))
	case timesTimeval:
		for i := range ts {
			sec, usec := int64(e.Uint64(raw[16*i:])), int64(e.Uint64(raw[16*i+8:]))
			if usec < 0 || usec >= 1e6 {
				return unix.EINVAL
			}
			ts[i] = unix.Timespec{Sec: sec, Nsec: usec * 1000}
		}
	default:
		for i := range ts {
			ts[i] = unix.Timespec{Sec: int64(e.Uint64(raw[16*i:])), Nsec: int64(e.Uint64(raw[16*i+8:]))}
		}
	}
	r.times = &ts
	return 0
}

// carryOut resolves the request's object, checks it and the change, and
// makes the change. It runs on a pool thread: every walk, check and change
// is the sandbox's own.
func (b *Broker) carryOut(r *request) unix.Errno {
	obj := r.obj
	where, ok := "", false
	if obj < 0 {
		fd, p, errno := b.openBeneath(r)
		switch errno {
		case 0:
			defer unix.Close(fd)
			obj, where, ok = fd, p, true
		case unix.EXDEV, unix.ELOOP, unix.EAGAIN:
			// Not a clean path beneath a grant: resolved as the kernel
			// would, then checked.
		default:
			return errno
		}
	}
	if obj < 0 {
		how := unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_MAGICLINKS}
		if r.nofollow {
			how.Flags |= unix.O_NOFOLLOW
		}
		base := r.base
		if base < 0 {
			base = unix.AT_FDCWD // an absolute path: the base is not used
		}
		fd, err := unix.Openat2(base, r.path, &how)
		if err != nil {
			return errno(err)
		}
		defer unix.Close(fd)
		obj = fd
	}
	if !ok {
		where, ok = b.beneath(obj)
	}
	if !ok {
		what := where
		if what == "" {
			what = "a file without a path"
		}
		return b.deny(r.name, where, r.name+" of "+what+" refused: it is outside the fs_write grants, and without namespaces the sandbox changes the mode, owner, times and extended attributes of files beneath them only",
			"change files beneath an fs_write grant or in the scratch folder ($TMPDIR)")
	}
	if b.cfg.Protected != nil {
		if why := b.cfg.Protected(where); why != "" {
			return b.deny(r.name, where, r.name+" of "+where+" refused: it is a protected path ("+why+"), whose metadata the sandbox never changes",
				"leave the protected path as it is")
		}
	}
	switch r.op {
	case opChmod:
		return b.chmod(r, obj, where)
	case opChown:
		if r.uid != ^uint32(0) && int(r.uid) != b.cfg.Identity.UID {
			return b.deny(r.name, where, r.name+" of "+where+" to uid "+strconv.Itoa(int(r.uid))+" refused: the sandbox gives files to no other owner",
				"leave the owner as it is (uid -1)")
		}
		uid, gid := int(int32(r.uid)), int(int32(r.gid))
		if r.objIsFD {
			return errno(unix.Fchown(obj, uid, gid))
		}
		return errno(unix.Fchownat(obj, "", uid, gid, unix.AT_EMPTY_PATH))
	case opUtimes:
		return errno(utimensatFD(obj, !r.objIsFD, r.times))
	}
	if !xattrAllowed(r.attr) {
		return b.deny(r.name, where, r.name+" "+r.attr+" of "+where+" refused: the sandbox sets and removes only user.* extended attributes and POSIX ACLs (system.posix_acl_access, system.posix_acl_default)",
			"use a user.* attribute")
	}
	return xattr(r, obj)
}

// openBeneath is carryOut's fast way for the common call, an absolute
// path that is clean and has a grant's path as a prefix: it opens the rest
// beneath that grant's fd, without following any symlink
// (RESOLVE_BENEATH, RESOLVE_NO_SYMLINKS), so the object is beneath the
// grant by construction and the path is its canonical one, which the
// protected paths are matched against. It fails with EXDEV when the path
// is not of that form, and ELOOP or EXDEV when the walk meets a symlink or
// leaves the grant, for carryOut to resolve and check it the general way;
// any other errno is the walk's (ENOENT, EACCES, ENOTDIR), the kernel's
// answer for the same walk.
func (b *Broker) openBeneath(r *request) (int, string, unix.Errno) {
	p := r.path
	if !strings.HasPrefix(p, "/") || !clean(p) {
		return -1, "", unix.EXDEV
	}
	for _, g := range b.grants {
		rel, ok := under(g.path, p)
		if !ok {
			continue
		}
		if rel == "" {
			rel = "."
		}
		fd, err := unix.Openat2(g.fd, rel, &unix.OpenHow{Flags: unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS})
		if err != nil {
			return -1, "", errno(err)
		}
		if !r.nofollow {
			// A final symlink is followed by the call: the general way.
			var st unix.Stat_t
			if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT == unix.S_IFLNK {
				unix.Close(fd)
				return -1, "", unix.ELOOP
			}
		}
		return fd, p, 0
	}
	return -1, "", unix.EXDEV
}

// clean reports whether the absolute path p has no empty, "." or ".."
// element and no trailing slash, so that it names what it spells.
func clean(p string) bool {
	if p == "/" {
		return true
	}
	for _, e := range strings.Split(p[1:], "/") {
		if e == "" || e == "." || e == ".." {
			return false
		}
	}
	return true
}

// chmod changes the mode of obj, refusing a mode with the set-user-ID or
// set-group-ID bit for anything but a folder (on a folder they grant
// nothing on Linux: new entries inherit a set-group-ID folder's group).
// Even a bit the file has already is refused: between this check and the
// change the file can be rewritten, which clears the bit, and a chmod
// that "kept" it would set it on the new content.
func (b *Broker) chmod(r *request, obj int, where string) unix.Errno {
	var st unix.Stat_t
	if err := unix.Fstat(obj, &st); err != nil {
		return errno(err)
	}
	const setID = unix.S_ISUID | unix.S_ISGID
	if st.Mode&unix.S_IFMT != unix.S_IFDIR && r.mode&setID != 0 {
		return b.deny(r.name, where, r.name+" of "+where+" refused: the sandbox never sets the set-user-ID or set-group-ID bit of a file",
			"chmod without u+s and g+s")
	}
	if r.objIsFD {
		return errno(unix.Fchmod(obj, r.mode))
	}
	return errno(unix.Fchmodat(obj, "", r.mode, unix.AT_EMPTY_PATH)) // fchmodat2(2), Linux 6.6
}

// xattrAllowed reports whether the sandbox may set or remove the extended
// attribute name: user.* and the POSIX ACLs. trusted.* and security.* are
// the kernel's and its security modules' (and need capabilities the
// sandbox has not); the other system.* names are filesystems' own.
func xattrAllowed(name string) bool {
	return strings.HasPrefix(name, "user.") || name == "system.posix_acl_access" || name == "system.posix_acl_default"
}

// xattr sets or removes the attribute of obj.
func xattr(r *request, obj int) unix.Errno {
	if r.objIsFD {
		if r.op == opSetxattr {
			return errno(unix.Fsetxattr(obj, r.attr, r.value, r.xflags))
		}
		return errno(unix.Fremovexattr(obj, r.attr))
	}
	// setxattrat(2) with AT_EMPTY_PATH refuses an O_PATH fd: through the
	// thread's own /proc fd link instead, which lands on obj itself. A
	// symlink is refused first (the kernel refuses user.* on one), so
	// that the walk never goes on from obj to where it points.
	var st unix.Stat_t
	if err := unix.Fstat(obj, &st); err != nil {
		return errno(err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return unix.EPERM
	}
	link := "/proc/thread-self/fd/" + strconv.Itoa(obj)
	if r.op == opSetxattr {
		return errno(unix.Setxattr(link, r.attr, r.value, r.xflags))
	}
	return errno(unix.Removexattr(link, r.attr))
}
