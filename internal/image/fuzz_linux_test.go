package image

import (
	"archive/tar"
	"bytes"
	"encoding/binary"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// tmpfs returns /dev/shm when it is a folder (a tmpfs: the file system
// operations of an exec are cheaper there), else the default temp folder.
func tmpfs() string {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		return "/dev/shm"
	}
	return ""
}

// maxFuzzInput bounds the inputs FuzzExtract looks at: 16 tar blocks.
const maxFuzzInput = 16 * 512

// FuzzExtract feeds any bytes, as two layers' tars, to the extractor
// itself (in this process: the confinement of the real unpack is not what
// is fuzzed) on the real file system, with a canary tree beside the root
// that the seeds' links and names aim at. Invariants: the canary is byte
// for byte as it was, whatever the input; nothing in the root is a device
// node, a fifo, a socket or set-id; every folder's owner keeps rwx.
func FuzzExtract(f *testing.F) {
	seed := func(layers ...[]entry) {
		var b bytes.Buffer
		for i, l := range layers {
			if i == 1 {
				var n [2]byte
				binary.LittleEndian.PutUint16(n[:], uint16(b.Len()))
				f.Add(b.Bytes(), n[0], n[1])
			}
			b.Write(layerTar(f, l))
		}
		if len(layers) == 1 {
			f.Add(b.Bytes(), byte(0), byte(0))
		}
	}
	// The canary is ../c from the root (and ../../c from a folder in it).
	seed([]entry{dir("x/"), {name: "x/", typ: tar.TypeDir, mode: 0o777}, symlink("x", "../c/dir")})
	seed([]entry{symlink("x", "../c/dir")}, []entry{{name: "x/", typ: tar.TypeDir, mode: 0o777}, file("x/f", "pwned")})
	seed([]entry{symlink(".airlock-image", "../c/file"), file(".airlock-image", "pwned")})
	seed([]entry{symlink("l", "../c"), file("l/file", "pwned"), hardlink("h", "l/file")})
	seed([]entry{file("../c/file", "pwned"), file("/../c/file", "pwned")})
	seed([]entry{symlink("l", "../c")}, []entry{file("l/.wh.file", ""), file("l/victim/.wh..wh..opq", ""), file(".wh.l", "")})
	seed([]entry{dir("d/"), file("d/a", "a")}, []entry{symlink("d", "../c"), file("d/file", "pwned")})
	seed([]entry{{name: "null", typ: tar.TypeChar, mode: 0o666}, {name: "suid", body: "x", typ: tar.TypeReg, mode: 0o6755}, {name: "t/", typ: tar.TypeDir, mode: 0o1777}})
	seed([]entry{dir("a/"), file("a/f", "f"), hardlink("a/g", "a/f")}, []entry{file("a/.wh..wh..opq", ""), file("a/new", "n")})

	// Small limits keep an exec fast (the limits themselves are tested
	// by TestAttackHugeAndMany).
	oldBytes, oldEntries, oldDepth := maxBytes, maxEntries, maxDepth
	maxBytes, maxEntries, maxDepth = 64<<10, 128, 16
	f.Cleanup(func() { maxBytes, maxEntries, maxDepth = oldBytes, oldEntries, oldDepth })

	// One base folder and one canary per worker: an exec makes and
	// removes only the root.
	base, err := os.MkdirTemp(tmpfs(), "FuzzExtract")
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { os.RemoveAll(base) })
	var can *canary
	f.Fuzz(func(t *testing.T, data []byte, lo, hi byte) {
		if len(data) > maxFuzzInput {
			return // a few entries say all; larger inputs only make minimizing slow
		}
		if can == nil {
			can = canaryAt(t, filepath.Join(base, "c"))
		}
		root := filepath.Join(base, "r")
		if err := os.Mkdir(root, 0o755); err != nil {
			t.Fatal(err)
		}
		bfd, err := unix.Open(base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(bfd)
		defer func() {
			if err := removeAll(bfd, "r", maxDepth+2); err != nil {
				t.Fatalf("remove the root: %v", err)
			}
		}()
		fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		split := min(int(lo)|int(hi)<<8, len(data))
		x := newExtractor(fd)
		for _, part := range [][]byte{data[:split], data[split:]} {
			if len(part) == 0 {
				continue
			}
			if err := x.tar(bytes.NewReader(part)); err != nil {
				break
			}
		}
		_ = x.finish()
		x.close()
		can.check(t)
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			fi, err := os.Lstat(p)
			if err != nil {
				return nil
			}
			if fi.Mode()&(fs.ModeDevice|fs.ModeCharDevice|fs.ModeNamedPipe|fs.ModeSocket|fs.ModeSetuid|fs.ModeSetgid) != 0 {
				t.Errorf("%s has mode %v", strings.TrimPrefix(p, base), fi.Mode())
			}
			if fi.IsDir() && fi.Mode().Perm()&0o700 != 0o700 {
				t.Errorf("folder %s has mode %v: its owner cannot empty it", strings.TrimPrefix(p, base), fi.Mode())
			}
			return nil
		})
	})
}
