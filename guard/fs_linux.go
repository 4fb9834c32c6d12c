package guard

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// resolveFlags confine every lookup to the grant root: RESOLVE_BENEATH
// refuses "..", absolute symlinks and symlinks that leave the root (EXDEV);
// RESOLVE_NO_MAGICLINKS refuses /proc/*/fd style links (ELOOP). See
// openat2(2); Linux 5.6 or later.
const resolveFlags = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS

// readChunk is how much Read asks the kernel for when a file is longer
// than fstat said (it grew, or its filesystem reports no size).
const readChunk = 32 << 10

// heldRoot is the open fd of one grant root.
type heldRoot struct {
	path string // the grant, canonical
	fd   int    // O_PATH fd of its root
	file bool   // the grant is a single file, not a folder
}

// holdRoots returns an fd for every grant: a dup of the caller's (the
// sandbox's view of it) when given is not nil, else the host path opened
// without following any symlink, so a symlink planted in a path that leads
// to a grant (in a folder the sandbox could write) is refused, not followed.
func holdRoots(grants []string, given map[string]int) (map[string]heldRoot, error) {
	held := make(map[string]heldRoot, len(grants))
	for _, g := range grants {
		var fd int
		var err error
		if gfd, ok := given[g]; ok {
			fd, err = unix.FcntlInt(uintptr(gfd), unix.F_DUPFD_CLOEXEC, 0)
			if err != nil {
				err = fmt.Errorf("grant root %s: dup: %w", g, err)
			}
		} else if given != nil {
			err = fmt.Errorf("airlock bug: no root fd was given for grant %s", g)
		} else {
			fd, err = unix.Openat2(unix.AT_FDCWD, g, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS})
			if errors.Is(err, unix.ELOOP) {
				err = fmt.Errorf("grant root %s: a component is a symlink: grant the real path", g)
			} else if err != nil {
				err = fmt.Errorf("open grant root %s: %w", g, err)
			}
		}
		if err != nil {
			releaseRoots(held)
			return nil, err
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			releaseRoots(held)
			return nil, fmt.Errorf("grant root %s: fstat: %w", g, err)
		}
		typ := st.Mode & unix.S_IFMT
		if typ != unix.S_IFDIR && typ != unix.S_IFREG {
			unix.Close(fd)
			releaseRoots(held)
			return nil, fmt.Errorf("grant root %s is neither a folder nor a regular file", g)
		}
		held[g] = heldRoot{path: g, fd: fd, file: typ == unix.S_IFREG}
	}
	return held, nil
}

func releaseRoots(held map[string]heldRoot) {
	for _, h := range held {
		unix.Close(h.fd)
	}
}

// reopen opens the file a single-file grant's O_PATH fd refers to, through
// its /proc/self/fd magic link: that link names the inode, not a path, so
// nothing can be swapped in between.
func (h heldRoot) reopen(flags int) (int, error) {
	for {
		fd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(h.fd), flags|unix.O_CLOEXEC|unix.O_NOCTTY|unix.O_NONBLOCK, 0)
		if err == unix.EINTR {
			continue
		}
		return fd, err
	}
}

// openBeneath opens rel beneath dirfd with openat2(2). EAGAIN (a concurrent
// rename during the lookup) and EINTR are retried a few times.
func openBeneath(dirfd int, rel string, flags, mode uint64) (int, error) {
	how := unix.OpenHow{Flags: flags | unix.O_CLOEXEC, Mode: mode, Resolve: resolveFlags}
	var err error
	for range 16 {
		var fd int
		fd, err = unix.Openat2(dirfd, rel, &how)
		if err == nil {
			return fd, nil
		}
		if err != unix.EAGAIN && err != unix.EINTR {
			break
		}
	}
	return -1, resolveError(err)
}

// resolveError turns the errnos by which openat2 refuses a path into a
// refusal and leaves every other errno reachable with errors.Is.
func resolveError(err error) error {
	switch {
	case errors.Is(err, unix.EXDEV):
		return &refusal{
			reason:  "resolves outside the grant through a symlink",
			hint:    "use the path the symlink points to",
			escaped: true,
		}
	case errors.Is(err, unix.ELOOP):
		return &refusal{
			reason: "passes through a symlink that cannot be followed (a loop, a /proc magic link, or a symlink where a write needs a file)",
			hint:   "use the real path instead of the symlink",
		}
	case errors.Is(err, unix.ENOSYS):
		return fmt.Errorf("openat2 is missing (linux 5.6 or later is needed): %w", errors.ErrUnsupported)
	}
	return err
}

// checkFile refuses what Read and Write must never touch through a granted
// path: non-regular files (a device or fifo could block or have side
// effects) and files with more than one hard link (the other link may be
// outside the grant, and the kernel cannot tell which name was granted).
func checkFile(st *unix.Stat_t) error {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
	case unix.S_IFDIR:
		return unix.EISDIR
	case unix.S_IFLNK:
		return &refusal{
			reason: "is a symlink, and writes never follow symlinks",
			hint:   "write to the real path instead of the symlink",
		}
	default:
		return &refusal{
			reason: "is not a regular file (a device, fifo or socket)",
			hint:   "only regular files can be read or written",
		}
	}
	if st.Nlink > 1 {
		return &refusal{
			reason: "has " + strconv.FormatUint(uint64(st.Nlink), 10) + " hard links, and a hard link can alias a file outside the grant",
			hint:   "copy the file instead of hard-linking it",
		}
	}
	return nil
}

// readAt reads root/rel.
func (g *Guard) readAt(root heldRoot, rel string) ([]byte, error) {
	fd, size, err := openRead(root, rel)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	return g.readBounded(fd, size)
}

// copyAt copies root/rel to w.
func (g *Guard) copyAt(root heldRoot, rel string, w io.Writer) (int64, error) {
	fd, size, err := openRead(root, rel)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	return g.copyBounded(fd, size, w)
}

// openRead opens root/rel for reading and returns its fd and size. The
// file is first opened O_PATH and checked, so a fifo or device is never
// opened for reading; the second open must yield the same inode, or the
// file was swapped in between.
func openRead(root heldRoot, rel string) (int, int64, error) {
	if root.file {
		return openFileRoot(root, rel)
	}
	rfd := root.fd
	pfd, err := openBeneath(rfd, rel, unix.O_PATH, 0)
	if err != nil {
		return -1, 0, err
	}
	var pst unix.Stat_t
	err = unix.Fstat(pfd, &pst)
	unix.Close(pfd)
	if err != nil {
		return -1, 0, fmt.Errorf("fstat: %w", err)
	}
	if err := checkFile(&pst); err != nil {
		return -1, 0, err
	}
	fd, err := openBeneath(rfd, rel, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return -1, 0, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, 0, fmt.Errorf("fstat: %w", err)
	}
	if st.Dev != pst.Dev || st.Ino != pst.Ino {
		unix.Close(fd)
		return -1, 0, errors.New("the file was replaced while it was being opened: retry the read")
	}
	if err := checkFile(&st); err != nil {
		unix.Close(fd)
		return -1, 0, err
	}
	return fd, st.Size, nil
}

// openFileRoot opens a single-file grant for reading.
func openFileRoot(root heldRoot, rel string) (int, int64, error) {
	if rel != "." {
		return -1, 0, unix.ENOTDIR
	}
	var pst unix.Stat_t
	if err := unix.Fstat(root.fd, &pst); err != nil {
		return -1, 0, fmt.Errorf("fstat: %w", err)
	}
	if err := checkFile(&pst); err != nil {
		return -1, 0, err
	}
	fd, err := root.reopen(unix.O_RDONLY)
	if err != nil {
		return -1, 0, fmt.Errorf("open: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, 0, fmt.Errorf("fstat: %w", err)
	}
	if st.Dev != pst.Dev || st.Ino != pst.Ino {
		unix.Close(fd)
		return -1, 0, errors.New("airlock bug: a grant's fd reopened to another file")
	}
	return fd, st.Size, nil
}

// chargeSize halts the meter, before anything is read, when a file of
// size bytes cannot fit in what is left of max_output_bytes.
func (g *Guard) chargeSize(size int64) error {
	limit := g.meter.Limits().OutputBytes
	_, used := g.meter.Usage()
	if size > limit-used {
		// Halt now rather than read what cannot be returned.
		if _, err := g.meter.ChargeOutput(size); err != nil {
			return err
		}
	}
	return nil
}

// readBounded reads fd to its end, charging every byte to max_output_bytes
// before it is kept, so memory stays bounded by the output budget even when
// the file grows while it is read.
func (g *Guard) readBounded(fd int, size int64) ([]byte, error) {
	if err := g.chargeSize(size); err != nil {
		return nil, err
	}
	// One spare byte lets the read that sees EOF land without growing buf.
	buf := make([]byte, 0, max(size, 0)+1)
	for {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, readChunk)
		}
		n, err := unix.Read(fd, buf[len(buf):cap(buf)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read: %w", err)
		}
		if n == 0 {
			return buf, nil
		}
		if _, err := g.meter.ChargeOutput(int64(n)); err != nil {
			return nil, err
		}
		buf = buf[:len(buf)+n]
	}
}

// copyBounded copies fd to w in chunks of readChunk bytes, charging each
// to max_output_bytes before it is written.
func (g *Guard) copyBounded(fd int, size int64, w io.Writer) (int64, error) {
	if err := g.chargeSize(size); err != nil {
		return 0, err
	}
	buf := make([]byte, readChunk)
	var total int64
	for {
		n, err := unix.Read(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return total, fmt.Errorf("read: %w", err)
		}
		if n == 0 {
			return total, nil
		}
		if _, err := g.meter.ChargeOutput(int64(n)); err != nil {
			return total, err
		}
		m, err := w.Write(buf[:n])
		total += int64(m)
		if err != nil {
			return total, fmt.Errorf("copy: %w", err)
		}
	}
}

// writeAt writes what r holds to root/rel. The open does not truncate: the
// file is checked first (regular, one link), so a hard link to a file
// outside the grant is refused before any of its bytes are lost.
func writeAt(root heldRoot, rel string, r io.Reader) (int64, error) {
	if root.file {
		return writeFileRoot(root, rel, r)
	}
	if rel == "." {
		return 0, unix.EISDIR
	}
	rfd := root.fd
	dir, base := splitRel(rel)
	pfd, err := mkdirBeneath(rfd, dir)
	if err != nil {
		return 0, err
	}
	defer unix.Close(pfd)

	// Look before opening so an existing device or fifo is never opened.
	if lfd, err := openBeneath(pfd, base, unix.O_PATH|unix.O_NOFOLLOW, 0); err == nil {
		var st unix.Stat_t
		err = unix.Fstat(lfd, &st)
		unix.Close(lfd)
		if err != nil {
			return 0, fmt.Errorf("fstat: %w", err)
		}
		if err := checkFile(&st); err != nil {
			return 0, err
		}
	} else if !errors.Is(err, unix.ENOENT) {
		return 0, err
	}

	fd, err := openBeneath(pfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY, 0o644)
	if err != nil {
		return 0, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return 0, fmt.Errorf("fstat: %w", err)
	}
	if err := checkFile(&st); err != nil {
		unix.Close(fd)
		return 0, err
	}
	return truncateWrite(fd, r)
}

// writeFileRoot writes a single-file grant in place.
func writeFileRoot(root heldRoot, rel string, r io.Reader) (int64, error) {
	if rel != "." {
		return 0, unix.ENOTDIR
	}
	var pst unix.Stat_t
	if err := unix.Fstat(root.fd, &pst); err != nil {
		return 0, fmt.Errorf("fstat: %w", err)
	}
	if err := checkFile(&pst); err != nil {
		return 0, err
	}
	fd, err := root.reopen(unix.O_WRONLY)
	if err != nil {
		return 0, fmt.Errorf("open: %w", err)
	}
	return truncateWrite(fd, r)
}

// truncateWrite empties fd, writes what r holds and closes fd. Write's
// *bytes.Reader goes in one piece (io.WriterTo); other readers in chunks
// of readChunk bytes.
func truncateWrite(fd int, r io.Reader) (int64, error) {
	if err := unix.Ftruncate(fd, 0); err != nil {
		unix.Close(fd)
		return 0, fmt.Errorf("truncate: %w", err)
	}
	n, err := io.CopyBuffer(fdWriter(fd), r, make([]byte, readChunk))
	if err != nil {
		unix.Close(fd)
		return n, err
	}
	if err := unix.Close(fd); err != nil {
		return n, fmt.Errorf("close: %w", err)
	}
	return n, nil
}

// fdWriter writes to a file descriptor, retrying short writes and EINTR.
type fdWriter int

func (w fdWriter) Write(p []byte) (int, error) {
	done := 0
	for done < len(p) {
		n, err := unix.Write(int(w), p[done:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return done, fmt.Errorf("write: %w", err)
		}
		done += n
	}
	return done, nil
}

// mkdirBeneath returns an O_PATH fd of root/dir, creating missing
// directories one component at a time. Each mkdirat(2) runs on an fd that
// was itself resolved beneath the root, and each new directory is reopened
// beneath the root, so a component swapped for a symlink is refused.
func mkdirBeneath(rfd int, dir string) (int, error) {
	fd, err := openBeneath(rfd, dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err == nil || dir == "." || !errors.Is(err, unix.ENOENT) {
		return fd, err
	}
	cur, err := openBeneath(rfd, ".", unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return -1, err
	}
	prefix := ""
	for comp := range strings.SplitSeq(dir, "/") {
		if prefix == "" {
			prefix = comp
		} else {
			prefix += "/" + comp
		}
		next, err := openBeneath(rfd, prefix, unix.O_PATH|unix.O_DIRECTORY, 0)
		if errors.Is(err, unix.ENOENT) {
			if merr := unix.Mkdirat(cur, comp, 0o755); merr != nil && merr != unix.EEXIST {
				unix.Close(cur)
				return -1, fmt.Errorf("mkdir %s: %w", prefix, merr)
			}
			next, err = openBeneath(rfd, prefix, unix.O_PATH|unix.O_DIRECTORY, 0)
		}
		unix.Close(cur)
		if err != nil {
			return -1, err
		}
		cur = next
	}
	return cur, nil
}

// removeAt unlinks root/rel. unlinkat(2) never follows the final component,
// so removing a symlink removes the link, not its target.
func removeAt(root heldRoot, rel string) error {
	if rel == "." {
		return errors.New("is a grant root: remove the entries beneath it instead")
	}
	if root.file {
		return unix.ENOTDIR
	}
	rfd := root.fd
	dir, base := splitRel(rel)
	pfd, err := openBeneath(rfd, dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	err = unix.Unlinkat(pfd, base, 0)
	if err == unix.EISDIR {
		err = unix.Unlinkat(pfd, base, unix.AT_REMOVEDIR)
	}
	return err
}

// listAt lists root/rel: at most max entries when max > 0, in the order
// the directory gives them (then sorted), with more telling whether any
// were left out. O_DIRECTORY makes the open fail before a device or fifo
// could be opened.
func (g *Guard) listAt(root heldRoot, rel string, max int) (entries []Entry, more bool, err error) {
	if root.file {
		return nil, false, unix.ENOTDIR
	}
	fd, err := openBeneath(root.fd, rel, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, false, err
	}
	defer unix.Close(fd)
	var (
		names []string
		buf   = make([]byte, 8<<10)
	)
	for {
		n, err := unix.ReadDirent(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, false, fmt.Errorf("getdents: %w", err)
		}
		if n <= 0 {
			break
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names[:0])
		if max > 0 && len(entries)+len(names) > max {
			names, more = names[:max-len(entries)], true
		}
		var size int64
		for _, name := range names {
			size += int64(len(name))
		}
		if _, err := g.meter.ChargeOutput(size); err != nil {
			return nil, false, err
		}
		for _, name := range names {
			var st unix.Stat_t
			if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				if err == unix.ENOENT {
					continue // removed since getdents
				}
				return nil, false, fmt.Errorf("lstat %s: %w", name, err)
			}
			m := fileMode(st.Mode)
			entries = append(entries, Entry{Name: name, Dir: m.IsDir(), Size: st.Size, Mode: m})
		}
		if more {
			break
		}
	}
	slices.SortFunc(entries, func(a, b Entry) int { return strings.Compare(a.Name, b.Name) })
	return entries, more, nil
}

// splitRel splits a root-relative path into its parent ("." at the root)
// and its last component.
func splitRel(rel string) (dir, base string) {
	i := strings.LastIndexByte(rel, '/')
	if i < 0 {
		return ".", rel
	}
	return rel[:i], rel[i+1:]
}

// fileMode converts st_mode to an fs.FileMode as os.Lstat does.
func fileMode(mode uint32) fs.FileMode {
	m := fs.FileMode(mode & 0o777)
	switch mode & unix.S_IFMT {
	case unix.S_IFBLK:
		m |= fs.ModeDevice
	case unix.S_IFCHR:
		m |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFDIR:
		m |= fs.ModeDir
	case unix.S_IFIFO:
		m |= fs.ModeNamedPipe
	case unix.S_IFLNK:
		m |= fs.ModeSymlink
	case unix.S_IFSOCK:
		m |= fs.ModeSocket
	}
	if mode&unix.S_ISGID != 0 {
		m |= fs.ModeSetgid
	}
	if mode&unix.S_ISUID != 0 {
		m |= fs.ModeSetuid
	}
	if mode&unix.S_ISVTX != 0 {
		m |= fs.ModeSticky
	}
	return m
}
