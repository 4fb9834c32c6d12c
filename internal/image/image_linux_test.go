package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// entry is one tar entry of a test layer.
type entry struct {
	name, body, link string
	typ              byte
	mode             int64
}

func file(name, body string) entry {
	return entry{name: name, body: body, typ: tar.TypeReg, mode: 0o644}
}
func dir(name string) entry { return entry{name: name, typ: tar.TypeDir, mode: 0o755} }
func symlink(name, to string) entry {
	return entry{name: name, link: to, typ: tar.TypeSymlink, mode: 0o777}
}
func hardlink(name, to string) entry {
	return entry{name: name, link: to, typ: tar.TypeLink, mode: 0o644}
}

// layerTar returns the uncompressed tar of entries.
func layerTar(t testing.TB, es []entry) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range es {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Linkname: e.link, Size: int64(len(e.body))}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if e.typ == tar.TypeReg {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func gz(t testing.TB, b []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	w := gzip.NewWriter(&out)
	w.Write(b)
	w.Close()
	return out.Bytes()
}

func sum(b []byte) string { s := sha256.Sum256(b); return "sha256:" + hex.EncodeToString(s[:]) }

// layout writes an OCI image layout of the layers (each gzipped) into a
// new folder; tamper, when set, changes a layer blob after its digest
// was taken.
func layout(t testing.TB, layers [][]entry, tamper func(i int, blob []byte) []byte) string {
	t.Helper()
	dir := t.TempDir()
	blobs := filepath.Join(dir, "blobs", "sha256")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		t.Fatal(err)
	}
	put := func(b []byte) string {
		d := sum(b)
		if err := os.WriteFile(filepath.Join(blobs, strings.TrimPrefix(d, "sha256:")), b, 0o644); err != nil {
			t.Fatal(err)
		}
		return d
	}
	var diffs []string
	var descs []descriptor
	for i, l := range layers {
		raw := layerTar(t, l)
		diffs = append(diffs, sum(raw))
		blob := gz(t, raw)
		d := descriptor{MediaType: "application/vnd.oci.image.layer.v1.tar+gzip", Digest: sum(blob), Size: int64(len(blob))}
		if tamper != nil {
			blob = tamper(i, blob)
		}
		os.WriteFile(filepath.Join(blobs, strings.TrimPrefix(d.Digest, "sha256:")), blob, 0o644)
		descs = append(descs, d)
	}
	cfg, _ := json.Marshal(map[string]any{"os": "linux", "architecture": runtime.GOARCH, "rootfs": map[string]any{"type": "layers", "diff_ids": diffs}})
	cd := put(cfg)
	man, _ := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": mediaManifest,
		"config": descriptor{MediaType: "application/vnd.oci.image.config.v1+json", Digest: cd, Size: int64(len(cfg))}, "layers": descs})
	md := put(man)
	idx, _ := json.Marshal(map[string]any{"schemaVersion": 2, "manifests": []descriptor{{MediaType: mediaManifest, Digest: md, Size: int64(len(man))}}})
	os.WriteFile(filepath.Join(dir, "index.json"), idx, 0o644)
	os.WriteFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644)
	return dir
}

// tarOf archives a folder (an OCI archive, as docker save writes).
func tarOf(t *testing.T, dir string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "image.tar")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(f)
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		rel, _ := filepath.Rel(dir, p)
		if rel == "." || d.IsDir() {
			return nil
		}
		b, _ := os.ReadFile(p)
		tw.WriteHeader(&tar.Header{Name: rel, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(b))})
		tw.Write(b)
		return nil
	})
	tw.Close()
	f.Close()
	return out
}

var base = []entry{
	dir("usr/"), dir("usr/lib/"), dir("usr/bin/"), dir("etc/"), dir("opq/"),
	file("usr/bin/tool", "#!/bin/sh\necho tool\n"),
	file("etc/gone", "lower"), file("opq/lower", "lower"),
	{name: "usr/bin/suid", body: "x", typ: tar.TypeReg, mode: 0o4755},
	{name: "dev-null", typ: tar.TypeChar, mode: 0o666},
	{name: "tmp/", typ: tar.TypeDir, mode: 0o1777},
}

var upper = []entry{
	file("etc/.wh.gone", ""),
	dir("opq/"), file("opq/.wh..wh..opq", ""), file("opq/upper", "upper"),
	symlink("usr/bin/sh", "/bin/dash"), hardlink("usr/bin/tool2", "usr/bin/tool"),
	file("../../outside", "climbs"),
}

// TestUnpackLayout: layers apply in order with their whiteouts (a removed
// file, an opaque folder), symlinks keep their text, hard links stay
// inside, set-id bits are dropped, device nodes are not made, an entry
// that climbs with .. lands inside; a second unpack of the same image is
// the cache; the OCI archive (a tar of the layout) is the same image.
func TestUnpackLayout(t *testing.T) {
	src := layout(t, [][]entry{base, upper}, nil)
	if !IsImage(src) {
		t.Fatal("IsImage(layout) = false")
	}
	cache := t.TempDir()
	u, err := Unpack(src, cache, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if u.Cached || !validDigest(u.Digest) || u.Dir != filepath.Join(cache, strings.TrimPrefix(u.Digest, "sha256:"), "rootfs") {
		t.Errorf("Unpack = %+v", u)
	}
	read := func(p string) string { b, _ := os.ReadFile(filepath.Join(u.Dir, p)); return string(b) }
	exists := func(p string) bool { _, err := os.Lstat(filepath.Join(u.Dir, p)); return err == nil }
	if read("usr/bin/tool") == "" || read("opq/upper") != "upper" || read("outside") != "climbs" {
		t.Errorf("files missing: tool %q, opq/upper %q, outside %q", read("usr/bin/tool"), read("opq/upper"), read("outside"))
	}
	if exists("etc/gone") || exists("opq/lower") || exists("etc/.wh.gone") || exists("opq/.wh..wh..opq") {
		t.Errorf("whiteouts not applied")
	}
	if l, _ := os.Readlink(filepath.Join(u.Dir, "usr/bin/sh")); l != "/bin/dash" {
		t.Errorf("symlink text %q", l)
	}
	a, _ := os.Stat(filepath.Join(u.Dir, "usr/bin/tool"))
	b, _ := os.Stat(filepath.Join(u.Dir, "usr/bin/tool2"))
	if !os.SameFile(a, b) {
		t.Errorf("hard link not made")
	}
	if fi, _ := os.Stat(filepath.Join(u.Dir, "usr/bin/suid")); fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != 0 {
		t.Errorf("set-id bit kept: %v", fi.Mode())
	}
	if fi, _ := os.Stat(filepath.Join(u.Dir, "tmp")); fi.Mode()&fs.ModeSticky == 0 || fi.Mode().Perm() != 0o777 {
		t.Errorf("/tmp mode %v, want sticky 0777", fi.Mode())
	}
	if exists("dev-null") {
		t.Errorf("a device node was made")
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(cache), "outside")); err == nil {
		t.Errorf("an entry climbed out of the root")
	}
	again, err := Unpack(src, cache, Options{})
	if err != nil || !again.Cached || again.Dir != u.Dir {
		t.Errorf("second Unpack = %+v, %v; want the cache", again, err)
	}
	arch, err := Unpack(tarOf(t, src), t.TempDir(), Options{})
	if err != nil || arch.Digest != u.Digest {
		t.Errorf("the OCI archive of the layout: %+v %v, want digest %s", arch, err, u.Digest)
	}
}

// TestUnpackDockerArchive: a Docker archive (manifest.json, config, layer
// tars) unpacks, with the config's digest as the image's.
func TestUnpackDockerArchive(t *testing.T) {
	dirp := t.TempDir()
	raw := layerTar(t, []entry{dir("usr/"), dir("usr/lib/"), file("usr/lib/x", "x")})
	os.MkdirAll(filepath.Join(dirp, "abc"), 0o755)
	os.WriteFile(filepath.Join(dirp, "abc", "layer.tar"), raw, 0o644)
	cfg, _ := json.Marshal(map[string]any{"os": "linux", "rootfs": map[string]any{"type": "layers", "diff_ids": []string{sum(raw)}}})
	os.WriteFile(filepath.Join(dirp, "cfg.json"), cfg, 0o644)
	man, _ := json.Marshal([]map[string]any{{"Config": "cfg.json", "Layers": []string{"abc/layer.tar"}}})
	os.WriteFile(filepath.Join(dirp, "manifest.json"), man, 0o644)
	u, err := Unpack(tarOf(t, dirp), t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, want := Key(KindDocker, sum(cfg), []string{sum(raw)}, []string{sum(raw)}); u.Digest != want {
		t.Errorf("digest %s, want the key of the config %s and the layer, %s", u.Digest, sum(cfg), want)
	}
	if b, _ := os.ReadFile(filepath.Join(u.Dir, "usr/lib/x")); string(b) != "x" {
		t.Errorf("usr/lib/x = %q", b)
	}
}

// TestUnpackRefusesHostileImages: an entry written through a symlink an
// earlier entry or layer made, a hard link to a host file or through a
// symlink, a layer whose bytes do not match the config's diff_id or the
// manifest's digest, a zstd layer, more bytes than the limit, and an
// index with two images are refused; nothing is written outside the
// root and no cache folder is left.
func TestUnpackRefusesHostileImages(t *testing.T) {
	outside := t.TempDir()
	tamperLast := func(i int, b []byte) []byte {
		if i == 1 { // another, valid layer in its place
			return gz(t, layerTar(t, []entry{file("usr/x", "evil")}))
		}
		return b
	}
	for _, tt := range []struct {
		name   string
		layers [][]entry
		tamper func(int, []byte) []byte
		want   string
	}{
		{"through-symlink-same-layer", [][]entry{{dir("usr/"), symlink("usr/esc", outside), file("usr/esc/pwned", "x")}}, nil, "is a symlink"},
		{"through-symlink-lower-layer", [][]entry{{dir("usr/"), symlink("usr/esc", outside)}, {file("usr/esc/pwned", "x")}}, nil, "is a symlink"},
		{"hardlink-to-host", [][]entry{{dir("usr/"), hardlink("usr/passwd", "/etc/passwd")}}, nil, "not a file the image made"},
		{"hardlink-through-symlink", [][]entry{{dir("usr/"), symlink("usr/etc", "/etc"), hardlink("usr/passwd", "usr/etc/passwd")}}, nil, "is a symlink"},
		{"diff-id-mismatch", [][]entry{{dir("usr/")}, {file("usr/x", "x")}}, tamperLast, "damaged or was altered"},
		{"whiteout-of-dotdot", [][]entry{{dir("usr/"), file("usr/keep", "k")}, {file("usr/.wh...", "")}}, nil, "names no entry"},
		{"whiteout-of-dot", [][]entry{{dir("usr/"), file("usr/keep", "k")}, {file("usr/.wh..", "")}}, nil, "names no entry"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cache := t.TempDir()
			_, err := Unpack(layout(t, tt.layers, tt.tamper), cache, Options{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Unpack = %v, want an error containing %q", err, tt.want)
			}
			if _, err := os.Stat(filepath.Join(outside, "pwned")); err == nil {
				t.Errorf("an entry was written outside the root")
			}
			if es, _ := os.ReadDir(cache); len(es) != 0 {
				t.Errorf("the cache keeps %v after a refused unpack", es)
			}
		})
	}

	t.Run("blob-digest", func(t *testing.T) {
		src := layout(t, [][]entry{{dir("usr/")}}, nil)
		// Same uncompressed content, another compression: the diff_id
		// holds, the manifest's blob digest does not.
		blobs, _ := filepath.Glob(filepath.Join(src, "blobs/sha256/*"))
		for _, b := range blobs {
			data, _ := os.ReadFile(b)
			if bytes.HasPrefix(data, magicGzip) {
				var out bytes.Buffer
				w, _ := gzip.NewWriterLevel(&out, gzip.NoCompression)
				w.Write(layerTar(t, []entry{dir("usr/")}))
				w.Close()
				os.WriteFile(b, out.Bytes(), 0o644)
			}
		}
		if _, err := Unpack(src, t.TempDir(), Options{}); err == nil || !strings.Contains(err.Error(), "damaged or was altered") {
			t.Errorf("Unpack with a swapped blob = %v", err)
		}
	})
	t.Run("zstd", func(t *testing.T) {
		src := layout(t, [][]entry{{dir("usr/")}}, func(int, []byte) []byte { return append(append([]byte{}, magicZstd...), 0, 0, 0) })
		if _, err := Unpack(src, t.TempDir(), Options{}); err == nil || !strings.Contains(err.Error(), "zstd") {
			t.Errorf("Unpack of a zstd layer = %v", err)
		}
	})
	t.Run("too-large", func(t *testing.T) {
		old := maxBytes
		maxBytes = 10
		defer func() { maxBytes = old }()
		if _, err := Unpack(layout(t, [][]entry{{file("big", strings.Repeat("x", 11))}}, nil), t.TempDir(), Options{}); err == nil || !strings.Contains(err.Error(), "too large") {
			t.Errorf("Unpack over the limit = %v", err)
		}
	})
	t.Run("not-an-image", func(t *testing.T) {
		empty := t.TempDir()
		os.WriteFile(filepath.Join(empty, "readme"), nil, 0o644)
		if _, err := Unpack(empty, t.TempDir(), Options{}); err == nil || !strings.Contains(err.Error(), "neither an OCI image layout") {
			t.Errorf("Unpack of a folder = %v", err)
		}
	})
	t.Run("two-images", func(t *testing.T) {
		src := layout(t, [][]entry{{dir("usr/")}}, nil)
		b, _ := os.ReadFile(filepath.Join(src, "index.json"))
		var idx map[string][]descriptor
		json.Unmarshal(b, &idx)
		idx["manifests"] = append(idx["manifests"], idx["manifests"][0])
		b, _ = json.Marshal(idx)
		os.WriteFile(filepath.Join(src, "index.json"), b, 0o644)
		if _, err := Unpack(src, t.TempDir(), Options{}); err == nil || !strings.Contains(err.Error(), "lists 2 manifests") {
			t.Errorf("Unpack of two images = %v", err)
		}
	})
}

// TestUnpackReplaces: a later entry or layer replaces what an earlier one
// made, whatever the types: a folder by a symlink, a symlink by a file or
// a folder, a file by a hard link; a whiteout and a new entry of the same
// name; and the replaced folder's mode goes nowhere.
func TestUnpackReplaces(t *testing.T) {
	eachMode(t, func(t *testing.T) {
		layers := [][]entry{
			{dir("usr/"), dir("usr/lib/"), {name: "d/", typ: tar.TypeDir, mode: 0o777}, file("d/f", "f"), symlink("s", "/nowhere"), symlink("s2", "/nowhere"), file("h", "h"), file("a", "a"), dir("w/"), file("w/old", "old")},
			{symlink("d", "/usr"), file("s", "file now"), {name: "s2/", typ: tar.TypeDir, mode: 0o750}, hardlink("h", "a"), file(".wh.w", ""), dir("w/"), file("w/new", "new")},
		}
		u, err := Unpack(layout(t, layers, nil), t.TempDir(), Options{})
		if err != nil {
			t.Fatal(err)
		}
		p := func(n string) string { return filepath.Join(u.Dir, n) }
		if l, err := os.Readlink(p("d")); err != nil || l != "/usr" {
			t.Errorf("d = %q %v, want the symlink to /usr", l, err)
		}
		if b, _ := os.ReadFile(p("s")); string(b) != "file now" {
			t.Errorf("s = %q", b)
		}
		if fi, err := os.Lstat(p("s2")); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o750 {
			t.Errorf("s2 = %v %v, want a folder 0750", fi, err)
		}
		a, _ := os.Stat(p("a"))
		h, _ := os.Stat(p("h"))
		if !os.SameFile(a, h) {
			t.Errorf("h is not a hard link to a")
		}
		if _, err := os.Lstat(p("w/old")); err == nil {
			t.Errorf("w/old survived the whiteout of w")
		}
		if b, _ := os.ReadFile(p("w/new")); string(b) != "new" {
			t.Errorf("w/new = %q", b)
		}
		if fi, _ := os.Stat("/usr"); fi.Mode().Perm() != 0o755 {
			t.Errorf("the host's /usr is %v now", fi.Mode())
		}
	})
}
