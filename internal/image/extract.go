package image

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// noFollow makes creating a file fail on a symlink in its place.
const noFollow = syscall.O_NOFOLLOW

// extractor applies layers, in order, to one root folder.
type extractor struct {
	root    string
	bytes   int64
	entries int
	created map[string]bool        // paths this layer made: an opaque whiteout spares them
	dirs    map[string]fs.FileMode // final folder modes, applied once every layer is in
	skipped int                    // device nodes and FIFOs, never made
}

// Magic numbers of the layer encodings.
var (
	magicGzip = []byte{0x1f, 0x8b}
	magicZstd = []byte{0x28, 0xb5, 0x2f, 0xfd}
)

// layer unpacks one layer and then checks it: its uncompressed bytes
// against diffID and, for a layout's blob, its bytes against the
// descriptor's digest and size. A layer that fails a check fails the
// whole unpack, whose folder is then removed.
func (x *extractor) layer(st *store, l descriptor, diffID string) error {
	rc, blob, err := st.layerReader(l)
	if err != nil {
		return err
	}
	defer rc.Close()
	br := bufio.NewReaderSize(blob, 64<<10)
	head, _ := br.Peek(4)
	var r io.Reader = br
	switch {
	case bytes.HasPrefix(head, magicGzip):
		gz, err := gzip.NewReader(br)
		if err != nil {
			return err
		}
		defer gz.Close()
		r = gz
	case bytes.HasPrefix(head, magicZstd):
		return errors.New("the layer is zstd-compressed, which airlock does not unpack: save the image with gzip layers (podman save --format oci-archive, or docker save)")
	}
	diff := newHashingReader(r)
	tr := tar.NewReader(diff)
	x.created = map[string]bool{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("not a tar layer: %w", err)
		}
		if err := x.entry(h, tr); err != nil {
			return err
		}
	}
	if _, err := io.Copy(io.Discard, diff); err != nil { // the tar's padding: the digest covers it
		return err
	}
	if got := diff.digest(); got != diffID {
		return fmt.Errorf("its content is %s, not the %s the image's config promises: the image is damaged or was altered", got, diffID)
	}
	if !strings.HasPrefix(l.Digest, "file:") {
		if _, err := io.Copy(io.Discard, br); err != nil {
			return err
		}
		if blob.digest() != l.Digest || blob.n != l.Size {
			return fmt.Errorf("the blob is %s (%d bytes), not %s (%d bytes): the image is damaged or was altered", blob.digest(), blob.n, l.Digest, l.Size)
		}
	}
	return nil
}

// entry applies one tar entry.
func (x *extractor) entry(h *tar.Header, r io.Reader) error {
	if x.entries++; x.entries > maxEntries {
		return fmt.Errorf("more than %d files: the image is too large to unpack", maxEntries)
	}
	name := path.Clean("/" + h.Name)
	if name == "/" {
		return nil
	}
	dir, base := path.Split(name)
	if base == ".wh..wh..opq" {
		return x.opaque(path.Clean(dir))
	}
	if gone, ok := strings.CutPrefix(base, ".wh."); ok {
		if gone == "" || gone == "." || gone == ".." {
			// ".wh.." would remove its own folder, ".wh..." the root.
			return fmt.Errorf("%s: a whiteout of %q names no entry: the image is refused", name, gone)
		}
		return x.remove(path.Join(dir, gone))
	}
	if err := x.parents(dir); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	target := filepath.Join(x.root, filepath.FromSlash(name))
	if fi, err := os.Lstat(target); err == nil {
		if !(h.Typeflag == tar.TypeDir && fi.IsDir()) {
			if err := os.RemoveAll(target); err != nil {
				return err
			}
		}
	}
	x.created[name] = true
	mode := fs.FileMode(h.Mode).Perm() // set-id and sticky bits dropped from files
	switch h.Typeflag {
	case tar.TypeDir:
		if err := os.Mkdir(target, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		if x.dirs == nil {
			x.dirs = map[string]fs.FileMode{}
		}
		if h.Mode&0o1000 != 0 {
			mode |= fs.ModeSticky // /tmp's; set-id bits stay dropped
		}
		x.dirs[target] = mode
		return nil
	case tar.TypeReg:
		if h.Size < 0 || x.bytes+h.Size > maxBytes {
			return fmt.Errorf("%s: over %d bytes in all: the image is too large to unpack", name, maxBytes)
		}
		x.bytes += h.Size
		f, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL|noFollow, 0o600)
		if err != nil {
			return err
		}
		if _, err := io.CopyN(f, r, h.Size); err != nil {
			f.Close()
			return fmt.Errorf("%s: %w", name, err)
		}
		if err := f.Chmod(mode); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	case tar.TypeSymlink:
		// The link text is kept as it is: it is read inside the sandbox,
		// where / is this root, and never followed while unpacking.
		return os.Symlink(h.Linkname, target)
	case tar.TypeLink:
		from := path.Clean("/" + h.Linkname)
		if err := x.parents(path.Dir(from) + "/"); err != nil {
			return fmt.Errorf("%s: hard link to %s: %w", name, from, err)
		}
		src := filepath.Join(x.root, filepath.FromSlash(from))
		fi, err := os.Lstat(src)
		if err != nil || !fi.Mode().IsRegular() {
			return fmt.Errorf("%s: hard link to %s, which is not a file the image made before it", name, from)
		}
		return os.Link(src, target)
	default:
		// Device nodes and FIFOs are not made: the sandbox gets its own
		// /dev. Other entry types carry nothing a root filesystem needs.
		x.skipped++
		return nil
	}
}

// parents makes every folder of dir (a cleaned absolute path ending in
// "/") that is missing, and refuses one that is a symlink or not a folder:
// an entry never lands outside the root through a link an earlier entry
// made.
func (x *extractor) parents(dir string) error { return x.walkParents(dir, true) }

// existingParents checks that every folder of dir exists and is a real
// folder, making none.
func (x *extractor) existingParents(dir string) error { return x.walkParents(dir, false) }

func (x *extractor) walkParents(dir string, create bool) error {
	cur := x.root
	for _, part := range strings.Split(strings.Trim(dir, "/"), "/") {
		if part == "" {
			continue
		}
		cur = filepath.Join(cur, part)
		fi, err := os.Lstat(cur)
		switch {
		case errors.Is(err, fs.ErrNotExist) && create:
			if err := os.Mkdir(cur, 0o755); err != nil {
				return err
			}
		case err != nil:
			return err
		case fi.Mode()&fs.ModeSymlink != 0:
			return fmt.Errorf("%s is a symlink, and an entry below it would be written wherever it leads: the image is refused", strings.TrimPrefix(cur, x.root))
		case !fi.IsDir():
			return fmt.Errorf("%s is not a folder", strings.TrimPrefix(cur, x.root))
		}
	}
	return nil
}

// remove applies the whiteout of p: what lower layers made there goes.
func (x *extractor) remove(p string) error {
	if err := x.existingParents(path.Dir(p)); err != nil {
		return nil // nothing there to remove
	}
	return os.RemoveAll(filepath.Join(x.root, filepath.FromSlash(p)))
}

// opaque applies an opaque whiteout: the folder's entries from lower
// layers go, those this layer made stay.
func (x *extractor) opaque(dir string) error {
	if err := x.parents(dir + "/"); err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	full := filepath.Join(x.root, filepath.FromSlash(dir))
	entries, err := os.ReadDir(full)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if x.created[path.Join(dir, e.Name())] {
			continue
		}
		if err := os.RemoveAll(filepath.Join(full, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// finish gives the folders their modes, deepest first, once nothing more
// is written into them.
func (x *extractor) finish() error {
	dirs := make([]string, 0, len(x.dirs))
	for d := range x.dirs {
		dirs = append(dirs, d)
	}
	slices.SortFunc(dirs, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	for _, d := range dirs {
		if err := os.Chmod(d, x.dirs[d]); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}
