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
	clean, err := cleanName(name)
	if err != nil {
		return nil, err
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

// cleanName returns the name of a file the image names, cleaned, or an
// error when it is not a plain relative path.
func cleanName(name string) (string, error) {
	clean := path.Clean("/" + name)[1:]
	if clean == "" || len(name) > MaxName || strings.HasPrefix(name, "/") || clean != name && clean != strings.TrimPrefix(name, "./") {
		return "", fmt.Errorf("the image names the file %q, which is not a plain relative path", name)
	}
	return clean, nil
}

// proposal is the resolver's answer: where the config and the layers'
// blobs are and their digests, which the caller checks as it reads them.
// A layout's blob is found by its digest; an archive's by its offset. A
// Docker archive names its layers by file, which are hashed here.
func (st *store) proposal(img *image) (message, error) {
	m := message{Op: "image", Kind: img.kind, DiffIDs: img.diffIDs}
	where := func(name string, d descriptor) (blob, error) {
		b := blob{Digest: d.Digest, Size: d.Size}
		if st.f == nil {
			return b, nil
		}
		s, ok := st.members[name]
		if !ok {
			return b, fmt.Errorf("the archive has no file %q", name)
		}
		if d.Digest == "" {
			h := newHashingReader(io.NewSectionReader(st.f, s.off, s.size))
			if _, err := io.Copy(io.Discard, h); err != nil {
				return b, fmt.Errorf("%q: %w", name, err)
			}
			b.Digest, b.Size = h.digest(), s.size
		}
		b.Off = s.off
		return b, nil
	}
	cb, err := where(img.configName, img.config)
	if err != nil {
		return m, err
	}
	m.Config = &cb
	for _, l := range img.layers {
		name, ok := strings.CutPrefix(l.Digest, "file:")
		if ok {
			l.Digest = "" // hashed here
			name, err = cleanName(name)
		} else {
			name, err = blobPath(l.Digest)
		}
		if err != nil {
			return m, err
		}
		b, err := where(name, l)
		if err != nil {
			return m, err
		}
		m.Layers = append(m.Layers, b)
	}
	return m, nil
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
