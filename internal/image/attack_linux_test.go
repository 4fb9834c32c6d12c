package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/airtest"
)

// canary is a tree outside every cache and image that no unpack may
// change: its snapshot (every name, type, mode, owner, size, content,
// link text, mtime and ctime) is taken before and compared after.
type canary struct {
	dir  string
	snap string
}

func newCanary(t *testing.T) *canary {
	t.Helper()
	return canaryAt(t, t.TempDir())
}

// canaryAt makes the canary tree in the folder dir (made when missing).
func canaryAt(t *testing.T, dir string) *canary {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Mkdir(filepath.Join(dir, "dir"), 0o700))
	must(os.WriteFile(filepath.Join(dir, "dir", "secret"), []byte("secret\n"), 0o600))
	must(os.WriteFile(filepath.Join(dir, "file"), []byte("host file\n"), 0o644))
	must(os.Mkdir(filepath.Join(dir, "victim"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "victim", "keep"), []byte("keep\n"), 0o644))
	must(os.Symlink("file", filepath.Join(dir, "link")))
	c := &canary{dir: dir}
	c.snap = c.snapshot(t)
	return c
}

func (c *canary) snapshot(t *testing.T) string {
	t.Helper()
	var b []byte
	var walk func(p string)
	walk = func(p string) {
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			t.Fatalf("canary %s: %v", p, err)
		}
		b = fmt.Appendf(b, "%s %o %d:%d %d m%d c%d", p, st.Mode, st.Uid, st.Gid, st.Size, st.Mtim.Nano(), st.Ctim.Nano())
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			l, _ := os.Readlink(p)
			b = append(append(b, " -> "...), l...)
		case unix.S_IFREG:
			data, _ := os.ReadFile(p)
			b = append(append(b, ' '), data...)
		case unix.S_IFDIR:
			f, err := os.Open(p)
			if err != nil {
				t.Fatalf("canary %s: %v", p, err)
			}
			names, _ := f.Readdirnames(-1)
			f.Close()
			sort.Strings(names)
			b = append(b, '\n')
			for _, n := range names {
				walk(p + "/" + n)
			}
		}
		b = append(b, '\n')
	}
	walk(c.dir)
	return string(b)
}

// check fails the test when anything in the canary changed.
func (c *canary) check(t *testing.T) {
	t.Helper()
	if now := c.snapshot(t); now != c.snap {
		t.Errorf("the canary tree outside the cache changed:\nbefore:\n%s\nafter:\n%s", c.snap, now)
	}
}

// unpackIt is the one call every attack test makes.
func unpackIt(src, cache string) (*Unpacked, error) { return Unpack(src, cache, Options{}) }

// dockerArchive writes a Docker archive (manifest.json, the config, one
// file per layer) holding cfg and the layers, and returns its path.
func dockerArchive(t *testing.T, cfg []byte, layers ...[]byte) string {
	t.Helper()
	dir := t.TempDir()
	var names []string
	for i, l := range layers {
		name := fmt.Sprintf("l%d/layer.tar", i)
		os.MkdirAll(filepath.Join(dir, fmt.Sprintf("l%d", i)), 0o755)
		if err := os.WriteFile(filepath.Join(dir, name), l, 0o644); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	os.WriteFile(filepath.Join(dir, "cfg.json"), cfg, 0o644)
	man, _ := json.Marshal([]map[string]any{{"Config": "cfg.json", "Layers": names}})
	os.WriteFile(filepath.Join(dir, "manifest.json"), man, 0o644)
	return tarOf(t, dir)
}

// TestAttackDirThenSymlinkChmod: a layer holding a folder x and then a
// symlink x -> a host folder; the folder's mode (0777) must not land on
// the host folder.
func TestAttackDirThenSymlinkChmod(t *testing.T) {
	c := newCanary(t)
	host := filepath.Join(c.dir, "dir")
	for _, tt := range []struct {
		name   string
		layers [][]entry
	}{
		{"same-layer", [][]entry{{dir("usr/"), dir("usr/lib/"), {name: "x/", typ: tar.TypeDir, mode: 0o777}, symlink("x", host)}}},
		{"next-layer", [][]entry{{dir("usr/"), dir("usr/lib/"), {name: "x/", typ: tar.TypeDir, mode: 0o777}}, {symlink("x", host)}}},
		{"whiteout-then-link", [][]entry{{dir("usr/"), dir("usr/lib/"), {name: "x/", typ: tar.TypeDir, mode: 0o777}}, {file(".wh.x", ""), symlink("x", host)}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			eachMode(t, func(t *testing.T) {
				unpackIt(layout(t, tt.layers, nil), t.TempDir())
				c.check(t)
			})
		})
	}
}

// TestAttackMarkerThroughLink: an entry named like the cache's done
// marker, a symlink to a host file: nothing is written through it.
func TestAttackMarkerThroughLink(t *testing.T) {
	c := newCanary(t)
	host := filepath.Join(c.dir, "file")
	for _, name := range []string{".airlock-image", "done", "../done", "rootfs"} {
		t.Run(strings.ReplaceAll(name, "/", "_"), func(t *testing.T) {
			eachMode(t, func(t *testing.T) {
				unpackIt(layout(t, [][]entry{{dir("usr/"), dir("usr/lib/"), symlink(name, host)}}, nil), t.TempDir())
				c.check(t)
			})
		})
	}
}

// TestAttackCacheKeyCollision: a Docker archive whose config is, byte
// for byte, a vetted OCI layout's manifest (one JSON document can be
// both). Run first, it must not stand in for the layout: the two get
// different digests, and the layout unpacks its own content.
func TestAttackCacheKeyCollision(t *testing.T) {
	good := layerTar(t, []entry{dir("usr/"), dir("usr/lib/"), file("usr/who", "good")})
	evil := layerTar(t, []entry{dir("usr/"), dir("usr/lib/"), file("usr/who", "evil")})
	// The vetted layout: its config promises the good layer; its
	// manifest also carries a rootfs naming the evil one (ignored there).
	src := t.TempDir()
	blobs := filepath.Join(src, "blobs", "sha256")
	os.MkdirAll(blobs, 0o755)
	put := func(b []byte) string {
		d := sum(b)
		os.WriteFile(filepath.Join(blobs, d[7:]), b, 0o644)
		return d
	}
	gz := gz(t, good)
	cfg, _ := json.Marshal(map[string]any{"os": "linux", "architecture": runtime.GOARCH, "rootfs": map[string]any{"type": "layers", "diff_ids": []string{sum(good)}}})
	man, _ := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": mediaManifest,
		"config": descriptor{MediaType: "application/vnd.oci.image.config.v1+json", Digest: put(cfg), Size: int64(len(cfg))},
		"layers": []descriptor{{MediaType: "application/vnd.oci.image.layer.v1.tar+gzip", Digest: put(gz), Size: int64(len(gz))}},
		"os":     "linux", "rootfs": map[string]any{"type": "layers", "diff_ids": []string{sum(evil)}}})
	idx, _ := json.Marshal(map[string]any{"schemaVersion": 2, "manifests": []descriptor{{MediaType: mediaManifest, Digest: put(man), Size: int64(len(man))}}})
	os.WriteFile(filepath.Join(src, "index.json"), idx, 0o644)
	archive := dockerArchive(t, man, evil)

	cache := t.TempDir()
	d, err := unpackIt(archive, cache)
	if err != nil {
		t.Fatalf("the docker archive: %v", err)
	}
	o, err := unpackIt(src, cache)
	if err != nil {
		t.Fatalf("the OCI layout: %v", err)
	}
	got, _ := os.ReadFile(filepath.Join(o.Dir, "usr/who"))
	if string(got) != "good" || o.Digest == d.Digest {
		t.Errorf("the OCI layout ran %q (digest %s, cached %v); the docker archive before it had digest %s: one cache key for two contents", got, o.Digest, o.Cached, d.Digest)
	}
}

// TestAttackLayoutThroughSymlink: a layout whose blobs folder is a symlink
// to another folder: its files are not read (every name of the layout
// resolves beneath it, with no symlink on the way).
func TestAttackLayoutThroughSymlink(t *testing.T) {
	real := layout(t, [][]entry{{dir("usr/"), dir("usr/lib/"), file("usr/lib/x", "x")}}, nil)
	src := t.TempDir()
	for _, n := range []string{"index.json", "oci-layout"} {
		b, _ := os.ReadFile(filepath.Join(real, n))
		os.WriteFile(filepath.Join(src, n), b, 0o644)
	}
	if err := os.Symlink(filepath.Join(real, "blobs"), filepath.Join(src, "blobs")); err != nil {
		t.Fatal(err)
	}
	if u, err := unpackIt(src, t.TempDir()); err == nil {
		t.Errorf("Unpack of a layout whose blobs folder is a symlink out of it = %+v, want a refusal", u)
	}
}

// TestAttackTrailingBomb: a layer whose tar ends and is then followed by
// a long run of zeros (a few KB compressed): the unpack stops reading
// soon after the tar's end instead of inflating all of it.
func TestAttackTrailingBomb(t *testing.T) {
	raw := layerTar(t, []entry{dir("usr/"), dir("usr/lib/")})
	var blob bytes.Buffer
	h := sha256.New()
	zw, _ := gzip.NewWriterLevel(&blob, gzip.BestCompression)
	w := io.MultiWriter(zw, h)
	w.Write(raw)
	zero := make([]byte, 1<<20)
	for range 64 { // 64 MiB of zeros after the end
		w.Write(zero)
	}
	zw.Close()
	diff := "sha256:" + hex.EncodeToString(h.Sum(nil))
	cfg, _ := json.Marshal(map[string]any{"os": "linux", "rootfs": map[string]any{"type": "layers", "diff_ids": []string{diff}}})
	u, err := unpackIt(dockerArchive(t, cfg, blob.Bytes()), t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "after") {
		t.Errorf("Unpack of a layer with 64 MiB after its tar's end = %+v, %v; want a refusal naming the bytes after the end", u, err)
	}
}

// TestAttackPlantedEntry: a cache entry at the image's key that this user
// did not make (another user's, or writable by others, or without a done
// marker) is never used as the image.
func TestAttackPlantedEntry(t *testing.T) {
	airtest.RequireRoot(t) // chown to another user
	src := layout(t, [][]entry{{dir("usr/"), dir("usr/lib/"), file("usr/who", "good")}}, nil)
	probe, err := unpackIt(src, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	rel, _ := filepath.Rel(filepath.Dir(filepath.Dir(probe.Dir)), probe.Dir) // <key> or <key>/rootfs
	for _, tt := range []struct {
		name  string
		plant func(entry string)
	}{
		{"other-user", func(e string) {
			filepath.WalkDir(e, func(p string, _ fs.DirEntry, _ error) error { return os.Lchown(p, 4242, 4242) })
		}},
		{"writable-by-others", func(e string) { os.Chmod(e, 0o777) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cache := t.TempDir()
			u, err := unpackIt(src, cache)
			if err != nil {
				t.Fatal(err)
			}
			// Replace what was unpacked by the attacker's content, keep
			// the marker, then hand the entry to the attacker.
			os.WriteFile(filepath.Join(u.Dir, "usr/who"), []byte("evil"), 0o644)
			entry := filepath.Join(cache, strings.Split(rel, "/")[0])
			tt.plant(entry)
			again, err := unpackIt(src, cache)
			if err != nil {
				if !strings.Contains(err.Error(), "remove it") {
					t.Errorf("Unpack refused the planted entry with %q, which does not say what to do", err)
				}
				return
			}
			if got, _ := os.ReadFile(filepath.Join(again.Dir, "usr/who")); string(got) != "good" {
				t.Errorf("Unpack used the planted entry (%s): usr/who = %q, cached %v", tt.name, got, again.Cached)
			}
		})
	}
	t.Run("cache-of-another-user", func(t *testing.T) {
		cache := t.TempDir()
		os.Chown(cache, 4242, 4242)
		os.Chmod(cache, 0o777)
		if u, err := unpackIt(src, cache); err == nil {
			t.Errorf("Unpack into a cache folder owned by uid 4242, mode 0777 = %+v, want a refusal", u)
		}
	})
}

// TestAttackConcurrentUnpacks: unpacks of one image racing for the same
// cache entry all get the one complete entry.
func TestAttackConcurrentUnpacks(t *testing.T) {
	src := layout(t, [][]entry{{dir("usr/"), dir("usr/lib/"), file("usr/who", "good")}}, nil)
	cache := t.TempDir()
	var wg sync.WaitGroup
	res := make([]*Unpacked, 4)
	errs := make([]error, 4)
	for i := range res {
		wg.Add(1)
		go func() { defer wg.Done(); res[i], errs[i] = unpackIt(src, cache) }()
	}
	wg.Wait()
	for i := range res {
		if errs[i] != nil {
			t.Fatalf("unpack %d: %v", i, errs[i])
		}
		if res[i].Dir != res[0].Dir {
			t.Errorf("unpack %d in %s, unpack 0 in %s", i, res[i].Dir, res[0].Dir)
		}
		if got, _ := os.ReadFile(filepath.Join(res[i].Dir, "usr/who")); string(got) != "good" {
			t.Errorf("unpack %d: usr/who = %q", i, got)
		}
	}
	es, _ := os.ReadDir(cache)
	if len(es) != 1 {
		t.Errorf("the cache holds %d entries after 4 racing unpacks of one image, want 1", len(es))
	}
}

// TestAttackHostileLayers: whatever an image's layers hold, the canary
// tree outside the cache stays as it was, and no device node, set-id bit
// or link out of the root is made.
func TestAttackHostileLayers(t *testing.T) {
	c := newCanary(t)
	cd := c.dir
	for _, tt := range []struct {
		name   string
		layers [][]entry
	}{
		{"hardlink-out", [][]entry{{dir("usr/"), hardlink("usr/f", cd+"/file")}}},
		{"hardlink-dotdot", [][]entry{{dir("usr/"), hardlink("usr/f", "../../../../../../"+cd+"/file")}}},
		{"hardlink-through-link", [][]entry{{dir("usr/"), symlink("usr/l", cd), hardlink("usr/f", "usr/l/file")}}},
		{"write-dotdot", [][]entry{{file("../../../../../../"+cd+"/file", "pwned")}}},
		{"write-absolute", [][]entry{{file(cd+"/file", "pwned")}}},
		{"write-through-link", [][]entry{{symlink("l", cd), file("l/file", "pwned")}}},
		{"write-through-link-next-layer", [][]entry{{symlink("l", cd)}, {file("l/file", "pwned")}}},
		{"replace-dir-by-link-then-write", [][]entry{{dir("d/"), file("d/a", "a")}, {symlink("d", cd), file("d/file", "pwned")}}},
		{"whiteout-through-link", [][]entry{{symlink("l", cd)}, {file("l/.wh.file", "")}}},
		{"whiteout-of-dir-through-link", [][]entry{{symlink("l", cd)}, {file("l/.wh.victim", "")}}},
		{"opaque-through-link", [][]entry{{symlink("l", cd+"/victim")}, {file("l/.wh..wh..opq", "")}}},
		{"opaque-below-link", [][]entry{{symlink("l", cd)}, {file("l/victim/.wh..wh..opq", "")}}},
		{"whiteout-dotdot", [][]entry{{file("../../../../../../"+cd+"/.wh.file", "")}}},
		{"symlink-then-file-over-it", [][]entry{{symlink("f", cd+"/file")}, {file("f", "pwned")}}},
		{"symlink-then-dir-over-it", [][]entry{{symlink("d", cd+"/victim")}, {{name: "d/", typ: tar.TypeDir, mode: 0o777}}}},
		{"symlink-then-hardlink-over-it", [][]entry{{file("a", "a"), symlink("f", cd+"/file")}, {hardlink("f", "a")}}},
		{"device-and-fifo", [][]entry{{{name: "null", typ: tar.TypeChar, mode: 0o666}, {name: "sda", typ: tar.TypeBlock, mode: 0o666}, {name: "fifo", typ: tar.TypeFifo, mode: 0o666}}}},
		{"setid", [][]entry{{{name: "suid", body: "x", typ: tar.TypeReg, mode: 0o6755}, {name: "sgid/", typ: tar.TypeDir, mode: 0o2755}}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			eachMode(t, func(t *testing.T) {
				layers := append([][]entry{{dir("usr/"), dir("usr/lib/")}}, tt.layers...)
				u, err := unpackIt(layout(t, layers, nil), t.TempDir())
				c.check(t)
				if err != nil {
					return
				}
				filepath.WalkDir(filepath.Dir(u.Dir), func(p string, d fs.DirEntry, err error) error {
					if err != nil {
						return nil
					}
					fi, _ := os.Lstat(p)
					if fi.Mode()&(fs.ModeDevice|fs.ModeCharDevice|fs.ModeNamedPipe|fs.ModeSocket|fs.ModeSetuid|fs.ModeSetgid) != 0 {
						t.Errorf("%s has mode %v", p, fi.Mode())
					}
					if st := fi.Sys().(*syscall.Stat_t); fi.Mode().IsRegular() && st.Nlink > 1 {
						var hst syscall.Stat_t
						syscall.Stat(cd+"/file", &hst)
						if hst.Ino == st.Ino && hst.Dev == st.Dev {
							t.Errorf("%s is a hard link to the host's %s", p, cd+"/file")
						}
					}
					return nil
				})
			})
		})
	}
}

// TestAttackHugeAndMany: a header of a huge name, more entries than the
// limit and deeper folders than the limit are refused with a message that
// names the limit.
func TestAttackHugeAndMany(t *testing.T) {
	t.Run("huge-name", func(t *testing.T) {
		u, err := unpackIt(layout(t, [][]entry{{dir("usr/"), file(strings.Repeat("a/", 3000)+"f", "x")}}, nil), t.TempDir())
		if err == nil {
			t.Errorf("Unpack of a 6000-byte name = %+v, want a refusal", u)
		}
	})
	t.Run("deep", func(t *testing.T) {
		u, err := unpackIt(layout(t, [][]entry{{dir("usr/"), file(strings.Repeat("d/", 1000)+"f", "x")}}, nil), t.TempDir())
		if err == nil || !strings.Contains(err.Error(), "deep") {
			t.Errorf("Unpack of a file 1000 folders deep = %+v, %v; want a refusal naming the depth", u, err)
		}
	})
	t.Run("header-bomb", func(t *testing.T) {
		// Small files with huge PAX headers: the uncompressed stream is
		// bounded, not only the files' bytes.
		oldB, oldE := maxBytes, maxEntries
		maxBytes, maxEntries = 1<<20, 100
		defer func() { maxBytes, maxEntries = oldB, oldE }()
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		for i := range 8 {
			tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("f%d", i), Typeflag: tar.TypeReg, Mode: 0o644, Format: tar.FormatPAX,
				PAXRecords: map[string]string{"SCHILY.xattr.user.x": strings.Repeat("x", 900<<10)}})
		}
		tw.Close()
		cfg, _ := json.Marshal(map[string]any{"os": "linux", "rootfs": map[string]any{"type": "layers", "diff_ids": []string{sum(b.Bytes())}}})
		// Stored as they are, the blobs are over the bound before they
		// are read; gzipped, the stream read from them is.
		if _, err := unpackIt(dockerArchive(t, cfg, b.Bytes()), t.TempDir()); err == nil || !strings.Contains(err.Error(), "the image's layers are") {
			t.Errorf("Unpack of 7 MiB of headers over a bound of 1.8 MiB = %v", err)
		}
		if _, err := unpackIt(dockerArchive(t, cfg, gz(t, b.Bytes())), t.TempDir()); err == nil || !strings.Contains(err.Error(), "uncompressed bytes") {
			t.Errorf("Unpack of 7 MiB of headers, gzipped, over a bound of 1.8 MiB = %v", err)
		}
	})
	t.Run("many", func(t *testing.T) {
		old := maxEntries
		maxEntries = 100
		defer func() { maxEntries = old }()
		var es []entry
		for i := range 200 {
			es = append(es, file(fmt.Sprintf("f%d", i), ""))
		}
		if _, err := unpackIt(layout(t, [][]entry{es}, nil), t.TempDir()); err == nil || !strings.Contains(err.Error(), "more than 100") {
			t.Errorf("Unpack of 200 entries over a limit of 100 = %v", err)
		}
	})
}

// TestAttackTamperedEntry: an entry at the image's key that is not what
// airlock leaves there (a symlink to a folder elsewhere, no marker, a
// marker naming another image or through a symlink, a root that is a
// symlink, a stray file) is refused, saying to remove it, and never used.
func TestAttackTamperedEntry(t *testing.T) {
	src := layout(t, [][]entry{{dir("usr/"), dir("usr/lib/"), file("usr/who", "good")}}, nil)
	elsewhere := t.TempDir()
	for _, tt := range []struct {
		name   string
		tamper func(entry string)
	}{
		{"entry-is-symlink", func(e string) {
			os.Rename(e, filepath.Join(elsewhere, "moved"))
			os.Symlink(filepath.Join(elsewhere, "moved"), e)
		}},
		{"no-marker", func(e string) { os.Remove(filepath.Join(e, "done")) }},
		{"marker-of-another-image", func(e string) {
			os.Remove(filepath.Join(e, "done"))
			doc, _ := Key(KindOCI, sum([]byte("other")), nil, nil)
			os.WriteFile(filepath.Join(e, "done"), []byte(doc), 0o444)
		}},
		{"marker-is-symlink", func(e string) {
			os.Rename(filepath.Join(e, "done"), filepath.Join(elsewhere, "done"))
			os.Symlink(filepath.Join(elsewhere, "done"), filepath.Join(e, "done"))
		}},
		{"marker-writable", func(e string) { os.Chmod(filepath.Join(e, "done"), 0o666) }},
		{"rootfs-is-symlink", func(e string) {
			os.Rename(filepath.Join(e, "rootfs"), filepath.Join(elsewhere, "rootfs"))
			os.Symlink(filepath.Join(elsewhere, "rootfs"), filepath.Join(e, "rootfs"))
		}},
		{"entry-is-file", func(e string) {
			os.Rename(e, filepath.Join(elsewhere, "gone"))
			os.WriteFile(e, nil, 0o600)
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cache := t.TempDir()
			u, err := unpackIt(src, cache)
			if err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(u.Dir, "usr/who"), []byte("evil"), 0o644)
			os.RemoveAll(filepath.Join(elsewhere, "moved"))
			os.RemoveAll(filepath.Join(elsewhere, "rootfs"))
			os.RemoveAll(filepath.Join(elsewhere, "done"))
			tt.tamper(filepath.Dir(u.Dir))
			again, err := unpackIt(src, cache)
			if err == nil {
				got, _ := os.ReadFile(filepath.Join(again.Dir, "usr/who"))
				t.Fatalf("Unpack used the tampered entry (usr/who %q, cached %v)", got, again.Cached)
			}
			if !strings.Contains(err.Error(), "remove it") {
				t.Errorf("Unpack refused the tampered entry with %q, which does not say what to do", err)
			}
		})
	}
}
