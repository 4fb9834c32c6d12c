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
	"strings"
)

// maxArchiveEntries bounds the files an image archive (not a layer) holds.
const maxArchiveEntries = 1 << 16

// store reads the files of an image: a folder, whose files an opener
// opens (beneath the folder, no symlink followed: openBeneath), or a tar
// archive of one, whose members are found once by their offsets and then
// read in place.
type store struct {
	opener  func(name string) (*os.File, error) // the folder's; nil for an archive
	f       *os.File                            // the archive
	members map[string]section                  // the archive's regular files by cleaned name
}

// section is where an archive member's bytes are.
type section struct{ off, size int64 }

// archiveStore indexes the archive f (a tar of an image). It reads only
// the headers: a member's bytes are skipped with Seek.
func archiveStore(f *os.File) (*store, error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("not an image archive: %w", err)
	}
	st := &store{f: f, members: map[string]section{}}
	tr := tar.NewReader(f)
	for n := 0; ; n++ {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("not a tar archive of an image: %w", err)
		}
		if n >= maxArchiveEntries {
			return nil, fmt.Errorf("more than %d files in the archive: it is not an image archive", maxArchiveEntries)
		}
		if h.Typeflag != tar.TypeReg || h.Size < 0 {
			continue
		}
		// tar.Reader reads exactly the headers and seeks over the bytes
		// of the members it skips: the member's bytes start where the
		// file's offset stands.
		off, err := f.Seek(0, io.SeekCurrent)
		if err != nil {
			return nil, err
		}
		st.members[path.Clean("/" + h.Name)[1:]] = section{off: off, size: h.Size}
	}
	return st, nil
}

// has reports whether the store holds the named regular file.
func (st *store) has(name string) bool {
	if st.f != nil {
		_, ok := st.members[name]
		return ok
	}
	f, err := st.opener(name)
	if err != nil {
		return false
	}
	f.Close()
	return true
}

// open opens a named file of the store. Names come from the image; a name
// that leaves the store is refused, and so (by the opener) is a file
// reached through a symlink or that is not a regular file.
func (st *store) open(name string) (io.ReadCloser, error) {
	clean := path.Clean("/" + name)[1:]
	if clean == "" || len(name) > MaxName || strings.HasPrefix(name, "/") || clean != name && clean != strings.TrimPrefix(name, "./") {
		return nil, fmt.Errorf("the image names the file %q, which is not a plain relative path", name)
	}
	if st.f != nil {
		s, ok := st.members[clean]
		if !ok {
			return nil, fmt.Errorf("the archive has no file %q", clean)
		}
		return io.NopCloser(io.NewSectionReader(st.f, s.off, s.size)), nil
	}
	return st.opener(clean)
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
	var in io.Reader = r
	if !ok {
		// A blob is read no further than its size: more is refused
		// without reading the rest.
		in = &sized{r: r, left: l.Size, digest: l.Digest}
	}
	return r, newHashingReader(in), nil
}

// sized reads a blob and fails once it is longer than its descriptor
// says.
type sized struct {
	r      io.Reader
	left   int64
	digest string
}

func (s *sized) Read(p []byte) (int, error) {
	if s.left <= 0 {
		var one [1]byte
		if n, _ := io.ReadFull(s.r, one[:]); n > 0 {
			return 0, fmt.Errorf("blob %s is longer than its descriptor's size: the image is damaged or was altered", s.digest)
		}
		return 0, io.EOF
	}
	if int64(len(p)) > s.left {
		p = p[:s.left]
	}
	n, err := s.r.Read(p)
	s.left -= int64(n)
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
