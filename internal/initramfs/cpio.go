// Package initramfs writes the initial RAM filesystem a microVM guest boots
// from: a newc ("070701") cpio archive, the format the Linux kernel unpacks
// into its rootfs before it runs /init (Documentation/driver-api/
// early-userspace/buffer-format.rst), and finds the kernel modules the
// guest must load itself, with their dependencies, in a Debian kernel's
// module tree. It is portable and touches no file but those it is asked to
// read; the archive holds only what the caller adds (no shell, no busybox),
// so the guest runs nothing airlock did not put there.
package initramfs

import (
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
)

// Writer writes a newc cpio archive. Entries are written in the order they
// are added; a directory must be added before what it holds. Close writes
// the trailer. The zero Writer is not usable: use NewWriter.
type Writer struct {
	w     io.Writer
	ino   uint32
	err   error
	names map[string]bool
}

// NewWriter returns a Writer that writes the archive to w.
func NewWriter(w io.Writer) *Writer {
	return &Writer{w: w, ino: 1, names: map[string]bool{}}
}

// Mode bits of cpio entries (the st_mode file types).
const (
	modeDir  = 0o040000
	modeFile = 0o100000
	modeLink = 0o120000
)

// maxName bounds a name: the kernel refuses names longer than PATH_MAX.
const maxName = 4095

// Dir adds a directory with permission bits perm.
func (w *Writer) Dir(name string, perm uint32) error {
	return w.entry(name, modeDir|perm&0o7777, nil)
}

// File adds a regular file with permission bits perm and the given
// contents.
func (w *Writer) File(name string, perm uint32, data []byte) error {
	return w.entry(name, modeFile|perm&0o7777, data)
}

// FileFrom adds a regular file of size bytes read from r.
func (w *Writer) FileFrom(name string, perm uint32, size int64, r io.Reader) error {
	if size < 0 || size > 1<<32-1 {
		return fmt.Errorf("initramfs: %s: size %d does not fit a cpio entry", name, size)
	}
	if err := w.header(name, modeFile|perm&0o7777, uint32(size)); err != nil {
		return err
	}
	n, err := io.Copy(w.w, io.LimitReader(r, size))
	if err == nil && n != size {
		err = fmt.Errorf("initramfs: %s: read %d of %d bytes", name, n, size)
	}
	if err == nil {
		err = w.pad(size)
	}
	w.err = err
	return err
}

// Symlink adds a symbolic link name pointing at target.
func (w *Writer) Symlink(name, target string) error {
	return w.entry(name, modeLink|0o777, []byte(target))
}

// Close writes the trailer. It does not close the underlying writer.
func (w *Writer) Close() error {
	if w.err != nil {
		return w.err
	}
	w.err = w.raw("TRAILER!!!", 0, 0, 0)
	return w.err
}

func (w *Writer) entry(name string, mode uint32, data []byte) error {
	if err := w.header(name, mode, uint32(len(data))); err != nil {
		return err
	}
	if _, err := w.w.Write(data); err != nil {
		w.err = err
		return err
	}
	w.err = w.pad(int64(len(data)))
	return w.err
}

// header checks name and writes an entry's header and name.
func (w *Writer) header(name string, mode, size uint32) error {
	if w.err != nil {
		return w.err
	}
	clean := path.Clean(strings.TrimPrefix(name, "/"))
	switch {
	case name == "" || clean != strings.TrimPrefix(name, "/") || clean == "." || strings.HasPrefix(clean, "../") || clean == "..":
		return fmt.Errorf("initramfs: entry name %q is not a clean relative path", name)
	case len(clean) > maxName:
		return fmt.Errorf("initramfs: entry name of %d bytes exceeds %d", len(clean), maxName)
	case w.names[clean]:
		return fmt.Errorf("initramfs: entry %q added twice", clean)
	case clean == "TRAILER!!!":
		return errors.New(`initramfs: an entry may not be named "TRAILER!!!" (the archive's end marker)`)
	}
	if dir := path.Dir(clean); dir != "." && !w.names[dir] {
		return fmt.Errorf("initramfs: %q added before its folder %q", clean, dir)
	}
	w.names[clean] = true
	w.ino++
	w.err = w.raw(clean, w.ino, mode, size)
	return w.err
}

// raw writes a newc header: 13 fields of 8 hex digits after the magic,
// then the NUL-terminated name, padded to 4 bytes (with the 110-byte
// header). Every entry belongs to root, with one link and mtime 0, so an
// archive depends only on what is in it.
func (w *Writer) raw(name string, ino, mode, size uint32) error {
	nlink := uint32(1)
	if mode&0o170000 == modeDir {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		ino, mode, 0, 0, nlink, 0, size, 0, 0, 0, 0, len(name)+1, 0)
	b := make([]byte, 0, len(hdr)+len(name)+4)
	b = append(b, hdr...)
	b = append(b, name...)
	b = append(b, 0)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	_, err := w.w.Write(b)
	return err
}

// pad writes the zeros that align data of size n to 4 bytes.
func (w *Writer) pad(n int64) error {
	if r := n % 4; r != 0 {
		_, err := w.w.Write(make([]byte, 4-r))
		return err
	}
	return nil
}
