package image

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// maxArchiveEntries bounds the files an image archive (not a layer) holds.
const maxArchiveEntries = 1 << 16

// store reads the files of an image: a folder, or a tar archive of one
// (whose members are found once by their offsets, then read in place).
type store struct {
	dir     string             // the folder, or "" for an archive
	f       *os.File           // the archive
	members map[string]section // the archive's regular files by cleaned name
}

// section is where an archive member's bytes are.
type section struct{ off, size int64 }

func openStore(src string) (*store, error) {
	fi, err := os.Stat(src)
	if err != nil {
		return nil, err
	}
	if fi.IsDir() {
		return &store{dir: src}, nil
	}
	f, err := os.Open(src)
	if err != nil {
		return nil, err
	}
	st := &store{f: f, members: map[string]section{}}
	cr := &countingReader{r: f}
	tr := tar.NewReader(cr)
	for n := 0; ; n++ {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("not a tar archive of an image: %w", err)
		}
		if n >= maxArchiveEntries {
			f.Close()
			return nil, fmt.Errorf("more than %d files in the archive: it is not an image archive", maxArchiveEntries)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		// tar.Reader reads exactly the headers: the member's bytes start
		// where the counter stands.
		st.members[path.Clean("/" + h.Name)[1:]] = section{off: cr.n, size: h.Size}
	}
	return st, nil
}

func (st *store) close() {
	if st.f != nil {
		st.f.Close()
	}
}

// has reports whether the store holds the named regular file.
func (st *store) has(name string) bool {
	if st.f != nil {
		_, ok := st.members[name]
		return ok
	}
	fi, err := os.Lstat(filepath.Join(st.dir, filepath.FromSlash(name)))
	return err == nil && fi.Mode().IsRegular()
}

// open opens a named file of the store. Names come from the image; a name
// that leaves the store, or a member that is a symlink, is refused.
func (st *store) open(name string) (io.ReadCloser, error) {
	clean := path.Clean("/" + name)[1:]
	if clean == "" || strings.HasPrefix(name, "/") || clean != name && clean != strings.TrimPrefix(name, "./") {
		return nil, fmt.Errorf("the image names the file %q, which is not a plain relative path", name)
	}
	if st.f != nil {
		s, ok := st.members[clean]
		if !ok {
			return nil, fmt.Errorf("the archive has no file %s", clean)
		}
		return io.NopCloser(io.NewSectionReader(st.f, s.off, s.size)), nil
	}
	p := filepath.Join(st.dir, filepath.FromSlash(clean))
	fi, err := os.Lstat(p)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s in the layout is not a regular file", clean)
	}
	return os.Open(p)
}

// layerReader opens layer l: a blob of a layout, checked against its
// digest as it is read, or a member file of a Docker archive.
func (st *store) layerReader(l descriptor) (io.ReadCloser, *hashingReader, error) {
	name, ok := strings.CutPrefix(l.Digest, "file:")
	if !ok {
		var err error
		if name, err = blobPath(l.Digest); err != nil {
			return nil, nil, err
		}
	}
	r, err := st.open(name)
	if err != nil {
		return nil, nil, err
	}
	hr := newHashingReader(r)
	return r, hr, nil
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// hashingReader hashes what is read through it.
type hashingReader struct {
	r io.Reader
	h hashState
	n int64
}

type hashState interface {
	io.Writer
	Sum([]byte) []byte
}

func newHashingReader(r io.Reader) *hashingReader {
	return &hashingReader{r: r, h: sha256.New()}
}

func (h *hashingReader) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	h.h.Write(p[:n])
	h.n += int64(n)
	return n, err
}

func (h *hashingReader) digest() string { return "sha256:" + hex.EncodeToString(h.h.Sum(nil)) }

// digestOf is the sha256 digest of b.
func digestOf(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}
