package image

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// beneath is how every name of an image is resolved, relative to the
// root's fd (openat2(2), Linux 5.6): never above the root, through no
// symlink (a link an image made is never followed while unpacking) and no
// magic link, and onto no other mount.
const beneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// extractor applies layers, in order, to the folder whose fd is root.
// Every file it makes is made relative to an fd of its parent folder,
// found beneath root.
type extractor struct {
	root      int
	bytes     int64 // file content so far
	stream    int64 // uncompressed tar bytes so far
	entries   int
	nameBytes int64             // bytes of the names in created and dirs
	created   map[string]bool   // paths this layer made: an opaque whiteout spares them
	dirs      map[string]uint32 // final folder modes by path, applied once every layer is in
	skipped   int               // device nodes and FIFOs, never made
	parent    struct {
		dir string
		fd  int
	} // the last parent folder found, -1 when none
}

func newExtractor(root int) *extractor {
	x := &extractor{root: root, dirs: map[string]uint32{}}
	x.parent.fd = -1
	return x
}

// close releases the fds the extractor holds (not root).
func (x *extractor) close() { x.forgetParent() }

// forgetParent drops the cached parent fd: a removal may have taken its
// folder away.
func (x *extractor) forgetParent() {
	if x.parent.fd >= 0 {
		unix.Close(x.parent.fd)
	}
	x.parent.dir, x.parent.fd = "", -1
}

// What a refusal for a bound says to do.
const (
	tooLarge = "the image is too large for airlock to unpack: slim it, or unpack it yourself and give the folder as rootfs"
	refused  = "the image is refused: rebuild it without that entry, or unpack it yourself and give the folder as rootfs"
)

// Magic numbers of the layer encodings.
var (
	magicGzip = []byte{0x1f, 0x8b}
	magicZstd = []byte{0x28, 0xb5, 0x2f, 0xfd}
)

// layer unpacks one layer, the blob read from r (gzip-compressed or
// not), and then checks its uncompressed bytes against diffID. A layer
// that fails a check fails the whole unpack, whose folder is then removed.
// The blob is read to its end: the caller, who streams it, checks it
// against its digest.
func (x *extractor) layer(r io.Reader, diffID string) error {
	br := bufio.NewReaderSize(r, 64<<10)
	head, _ := br.Peek(4)
	var in io.Reader = br
	switch {
	case bytes.HasPrefix(head, magicGzip):
		gz, err := gzip.NewReader(br)
		if err != nil {
			return err
		}
		defer gz.Close()
		in = gz
	case bytes.HasPrefix(head, magicZstd):
		return errors.New("the layer is zstd-compressed, which airlock does not unpack: save the image with gzip layers (podman save --format oci-archive, or docker save)")
	}
	diff := newHashingReader(in)
	if err := x.tar(diff); err != nil {
		return err
	}
	// The tar's padding counts in the digest; more than a record's worth
	// after the end is refused rather than inflated.
	n, err := io.Copy(io.Discard, io.LimitReader(diff, maxTrailing+1))
	if err != nil {
		return err
	}
	if n > maxTrailing {
		return fmt.Errorf("more than %d bytes after the layer's tar ends: the image is refused", maxTrailing)
	}
	if got := diff.digest(); got != diffID {
		return fmt.Errorf("its content is %s, not the %s the image's config promises: the image is damaged or was altered", got, diffID)
	}
	_, err = io.Copy(io.Discard, br)
	return err
}

// tar applies the entries of one layer's uncompressed tar.
func (x *extractor) tar(r io.Reader) error {
	cr := &countedReader{r: r, n: &x.stream}
	tr := tar.NewReader(cr)
	x.created = map[string]bool{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("not a tar layer: %w", err)
		}
		if err := x.entry(h, tr); err != nil {
			return err
		}
	}
}

// countedReader adds what is read through it to *n and stops at the
// bound on all layers' uncompressed bytes.
type countedReader struct {
	r io.Reader
	n *int64
}

func (c *countedReader) Read(p []byte) (int, error) {
	if *c.n > maxStream() {
		return 0, fmt.Errorf("over %d uncompressed bytes in all layers: %s", maxStream(), tooLarge)
	}
	n, err := c.r.Read(p)
	*c.n += int64(n)
	return n, err
}

// maxStream bounds the uncompressed tar bytes of all layers: the file
// content and, for every entry, its headers.
func maxStream() int64 { return maxBytes + int64(maxEntries)*8192 }

// keep records a name the extractor holds until the end, within the
// bound on their bytes.
func (x *extractor) keep(name string) error {
	if x.nameBytes += int64(len(name)); x.nameBytes > maxNameBytes {
		return fmt.Errorf("over %d bytes of names: %s", maxNameBytes, tooLarge)
	}
	return nil
}

// entry applies one tar entry.
func (x *extractor) entry(h *tar.Header, r io.Reader) error {
	if x.entries++; x.entries > maxEntries {
		return fmt.Errorf("more than %d files: %s", maxEntries, tooLarge)
	}
	if len(h.Name) > MaxName || len(h.Linkname) > MaxName {
		return fmt.Errorf("an entry's name or link is over %d bytes: %s", MaxName, refused)
	}
	name := path.Clean("/" + h.Name)
	if name == "/" {
		return nil // the root's own entry: its mode is airlock's
	}
	if d := strings.Count(name, "/"); d > maxDepth {
		return fmt.Errorf("%.100q...: %d folders deep, more than %d: %s", name, d, maxDepth, refused)
	}
	dir, base := path.Split(name)
	if len(base) > 255 {
		return fmt.Errorf("%.100q...: a name over 255 bytes: %s", name, refused)
	}
	if base == ".wh..wh..opq" {
		return x.opaque(path.Clean(dir))
	}
	if gone, ok := strings.CutPrefix(base, ".wh."); ok {
		if gone == "" || gone == "." || gone == ".." {
			// ".wh.." would remove its own folder, ".wh..." the root.
			return fmt.Errorf("%q: a whiteout of %q names no entry: the image is refused", name, gone)
		}
		return x.remove(path.Join(dir, gone))
	}
	pfd, err := x.parents(dir)
	if err != nil {
		return fmt.Errorf("%q: %w", name, err)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil {
		if !(h.Typeflag == tar.TypeDir && st.Mode&unix.S_IFMT == unix.S_IFDIR) {
			if err := x.removeAt(pfd, base, name); err != nil {
				return err
			}
		}
	} else if !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("%q: %w", name, err)
	}
	if err := x.keep(name); err != nil {
		return err
	}
	x.created[name] = true
	perm := uint32(h.Mode) & 0o777 // set-id and sticky bits dropped from files
	switch h.Typeflag {
	case tar.TypeDir:
		if err := unix.Mkdirat(pfd, base, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("%q: %w", name, err)
		}
		if h.Mode&0o1000 != 0 {
			perm |= unix.S_ISVTX // /tmp's; set-id bits stay dropped
		}
		// The owner keeps rwx: airlock checks, gives and removes what it
		// unpacked (the sandbox binds it read-only).
		x.dirs[name] = perm | 0o700
		return nil
	case tar.TypeReg, tar.TypeGNUSparse:
		// A sparse file is read with its holes as zeros: its real size
		// counts.
		if h.Size < 0 || x.bytes+h.Size > maxBytes {
			return fmt.Errorf("%.100q: over %d bytes in all: %s", name, maxBytes, tooLarge)
		}
		x.bytes += h.Size
		fd, err := unix.Openat(pfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return fmt.Errorf("%q: %w", name, err)
		}
		err = copyTo(fd, r, h.Size)
		if err == nil {
			err = unix.Fchmod(fd, perm)
		}
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("%q: %w", name, err)
		}
		return nil
	case tar.TypeSymlink:
		// The link text is kept as it is: it is read inside the sandbox,
		// where / is this root, and never followed while unpacking.
		if err := unix.Symlinkat(h.Linkname, pfd, base); err != nil {
			return fmt.Errorf("%q: %w", name, err)
		}
		return nil
	case tar.TypeLink:
		return x.hardlink(pfd, base, name, path.Clean("/"+h.Linkname))
	default:
		// Device nodes and FIFOs are not made: the sandbox gets its own
		// /dev. Other entry types carry nothing a root filesystem needs.
		x.skipped++
		return nil
	}
}

// hardlink links name (base in the folder pfd) to the regular file from,
// which an earlier entry of the image made.
func (x *extractor) hardlink(pfd int, base, name, from string) error {
	sdir, sbase := path.Split(from)
	if sbase == "" {
		return fmt.Errorf("%q: a hard link to the root", name)
	}
	sfd, err := x.openDir(sdir)
	if err != nil {
		return fmt.Errorf("%q: hard link to %q, which is not a file the image made before it (%v)", name, from, err)
	}
	defer unix.Close(sfd)
	var st unix.Stat_t
	if err := unix.Fstatat(sfd, sbase, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("%q: hard link to %q, which is not a file the image made before it", name, from)
	}
	// linkat(2) without AT_SYMLINK_FOLLOW links the entry itself.
	if err := unix.Linkat(sfd, sbase, pfd, base, 0); err != nil {
		return fmt.Errorf("%q: hard link to %q: %w", name, from, err)
	}
	return nil
}

// copyTo writes exactly n bytes of r to the file fd.
func copyTo(fd int, r io.Reader, n int64) error {
	buf := make([]byte, 64<<10)
	for n > 0 {
		m, err := io.ReadFull(r, buf[:min(int64(len(buf)), n)])
		if m > 0 {
			if _, werr := writeAll(fd, buf[:m]); werr != nil {
				return werr
			}
			n -= int64(m)
		}
		if err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
				return io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return nil
}

func writeAll(fd int, b []byte) (int, error) {
	done := 0
	for done < len(b) {
		n, err := unix.Write(fd, b[done:])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return done, err
		}
		done += n
	}
	return done, nil
}

// parents returns an fd of the folder dir (a cleaned absolute path ending
// in "/"), making every missing folder of it, and refuses one that is a
// symlink or not a folder: an entry never lands outside the root through
// a link an earlier entry made. The fd stays the extractor's.
func (x *extractor) parents(dir string) (int, error) {
	if x.parent.fd >= 0 && x.parent.dir == dir {
		return x.parent.fd, nil
	}
	fd, err := x.walk(dir, true)
	if err != nil {
		return -1, err
	}
	x.forgetParent()
	x.parent.dir, x.parent.fd = dir, fd
	return fd, nil
}

// openDir returns a new fd of the existing folder dir, making none.
func (x *extractor) openDir(dir string) (int, error) { return x.walk(dir, false) }

// walk opens dir beneath the root: in one openat2 when it is all there,
// else one folder at a time, making those missing when create is set.
func (x *extractor) walk(dir string, create bool) (int, error) {
	rel := strings.Trim(dir, "/")
	if rel == "" {
		rel = "."
	}
	fd, err := unix.Openat2(x.root, rel, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: beneath})
	if err == nil {
		return fd, nil
	}
	if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
		return -1, fmt.Errorf("%q: %w", dir, err)
	}
	// Find which folder is missing or wrong, for the message or to make it.
	cur, err := unix.Dup(x.root)
	if err != nil {
		return -1, err
	}
	so := ""
	for _, part := range strings.Split(rel, "/") {
		so += "/" + part
		next, err := unix.Openat2(cur, part, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: beneath})
		if errors.Is(err, unix.ENOENT) && create {
			if err = unix.Mkdirat(cur, part, 0o755); err == nil || errors.Is(err, unix.EEXIST) {
				next, err = unix.Openat2(cur, part, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: beneath})
			}
		}
		unix.Close(cur)
		switch {
		case errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV):
			return -1, fmt.Errorf("%q is a symlink, and an entry below it would be written wherever it leads: the image is refused", so)
		case errors.Is(err, unix.ENOTDIR):
			return -1, fmt.Errorf("%q is not a folder", so)
		case err != nil:
			return -1, fmt.Errorf("%q: %w", so, err)
		}
		cur = next
	}
	return cur, nil
}

// remove applies the whiteout of p: what lower layers made there goes.
// A whiteout below a symlink or a missing folder removes nothing.
func (x *extractor) remove(p string) error {
	dir, base := path.Split(p)
	pfd, err := x.openDir(dir)
	if err != nil {
		return nil // nothing there to remove
	}
	defer unix.Close(pfd)
	return x.removeAt(pfd, base, p)
}

// removeAt removes base, with everything below it, from the folder pfd;
// name is its path, for messages and the folder modes it forgets.
func (x *extractor) removeAt(pfd int, base, name string) error {
	delete(x.dirs, name)
	if strings.HasPrefix(x.parent.dir, name+"/") {
		x.forgetParent() // the cached folder goes with it (pfd is above it)
	}
	if err := removeAll(pfd, base, maxDepth+1); err != nil {
		return fmt.Errorf("%q: %w", name, err)
	}
	return nil
}

// opaque applies an opaque whiteout: the folder's entries from lower
// layers go, those this layer made stay.
func (x *extractor) opaque(dir string) error {
	fd, err := x.walk(dir+"/", true)
	if err != nil {
		return fmt.Errorf("%q: %w", dir, err)
	}
	defer unix.Close(fd)
	names, err := readNames(fd)
	if err != nil {
		return fmt.Errorf("%q: %w", dir, err)
	}
	for _, n := range names {
		p := path.Join(dir, n)
		if x.created[p] {
			continue
		}
		if err := x.removeAt(fd, n, p); err != nil {
			return err
		}
	}
	return nil
}

// finish gives the folders their modes once nothing more is written into
// them. Each is opened beneath the root, through no symlink: a folder a
// later entry replaced (by a link, say) is skipped, never followed.
func (x *extractor) finish() error {
	x.forgetParent()
	for d, mode := range x.dirs {
		fd, err := unix.Openat2(x.root, strings.TrimPrefix(d, "/"), &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: beneath})
		if err != nil {
			if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.EXDEV) {
				continue
			}
			return fmt.Errorf("%q: %w", d, err)
		}
		err = unix.Fchmod(fd, mode)
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("%q: %w", d, err)
		}
	}
	return nil
}
