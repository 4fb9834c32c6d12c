package image

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// benchLayers is an image of 2000 files of 4 KiB in 100 folders, with a
// hard link and a symlink per folder.
func benchLayers(b *testing.B) [][]entry {
	var es []entry
	body := string(bytes.Repeat([]byte("x"), 4096))
	es = append(es, dir("usr/"), dir("usr/lib/"))
	for d := range 100 {
		p := fmt.Sprintf("usr/lib/d%03d/", d)
		es = append(es, dir(p))
		for f := range 20 {
			es = append(es, file(fmt.Sprintf("%sf%02d", p, f), body))
		}
		es = append(es, hardlink(p+"h", p+"f00"), symlink(p+"s", "f01"))
	}
	return [][]entry{es}
}

// BenchmarkUnpack: the image read and unpacked in this process (the
// baseline: what an unconfined unpack costs), against Unpack, which reads the image's documents in a
// confined child, checks the blobs it streams to a second confined child
// that unpacks them, and then checks and gives the tree and renames it
// into place, and against a second Unpack of the same image (the cache).
func BenchmarkUnpack(b *testing.B) {
	layers := benchLayers(b)
	src := layout(b, layers, nil)
	b.Run("extract-in-process", func(b *testing.B) {
		for b.Loop() {
			root := b.TempDir()
			fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				b.Fatal(err)
			}
			st := &store{opener: func(name string) (*os.File, error) { return os.Open(filepath.Join(src, name)) }}
			img, err := st.resolve()
			if err != nil {
				b.Fatal(err)
			}
			x := newExtractor(fd)
			for i, l := range img.layers {
				p, _ := blobPath(l.Digest)
				f, err := os.Open(filepath.Join(src, p))
				if err != nil {
					b.Fatal(err)
				}
				err = x.layer(f, img.diffIDs[i])
				f.Close()
				if err != nil {
					b.Fatal(err)
				}
			}
			if err := x.finish(); err != nil {
				b.Fatal(err)
			}
			x.close()
			unix.Close(fd)
		}
	})
	b.Run("unpack-confined", func(b *testing.B) {
		for b.Loop() {
			if _, err := Unpack(src, b.TempDir(), Options{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("unpack-cached", func(b *testing.B) {
		cache := b.TempDir()
		if _, err := Unpack(src, cache, Options{}); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			u, err := Unpack(src, cache, Options{})
			if err != nil || !u.Cached {
				b.Fatal(u, err)
			}
		}
	})
}
