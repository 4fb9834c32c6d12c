package image

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The argv[0] of children that stand for an unpack child taken over by
// the image it read: the test sets resolverArg0 or unpackerArg0 to one of
// them; the real code path never does.
const (
	// compromisedArg0 is a child taken over by the image once the real
	// child's setup is done: it reads the image with the real resolver,
	// except that a file evil.json in a layout (the attacker's payload)
	// makes it name the manifest it holds instead of the index's; it
	// writes usr/who = "evil" into any root it was handed and reports
	// done without reading a layer.
	compromisedArg0 = "airlock-image-compromised"
	// hangArg0 never answers and never ends.
	hangArg0 = "airlock-image-hang"
	// fsizeArg0 is a resolver taken over once the real setup is done that
	// writes a 1 MiB file into its root and fails saying what became of
	// it.
	fsizeArg0 = "airlock-image-fsize"
	// bloatArg0 is compromisedArg0 that, as the unpacker, writes three
	// files of 1 MiB each instead of usr/who, whatever its limits say.
	bloatArg0 = "airlock-image-bloat"
)

// compromisedChild is the child of compromisedArg0 (see there).
func compromisedChild() {
	fail := func(err error) {
		_ = send(childSock, message{Op: "error", Error: "compromised: " + err.Error()}, -1)
		os.Exit(1)
	}
	phase, source := os.Args[1], os.Args[3]
	root, err := setup(phase, os.Args[2], os.Args[5])
	if err != nil {
		fail(err)
	}
	if os.Args[0] == fsizeArg0 {
		wrote := "wrote 1 MiB"
		if fd, err := unix.Openat(root, "big", unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW, 0o644); err != nil {
			wrote = err.Error()
		} else {
			if _, err := unix.Write(fd, make([]byte, 1<<20)); err != nil {
				wrote = err.Error()
			}
			unix.Close(fd)
		}
		fail(errors.New(wrote))
	}
	if phase == phaseUnpack {
		// The unpacker: the layers are the parent's business; it
		// writes what it likes and says done.
		_ = send(childSock, message{Op: "ready"}, -1)
		for {
			m, fd, err := recv(childSock)
			if err != nil {
				fail(err)
			}
			if fd >= 0 {
				f := os.NewFile(uintptr(fd), "layer")
				buf := make([]byte, 1<<16)
				for {
					if _, err := f.Read(buf); err != nil {
						break
					}
				}
				f.Close()
			}
			if m.Op == "end" {
				break
			}
		}
		if os.Args[0] == bloatArg0 {
			for i := range 3 {
				fd, err := unix.Openat(root, fmt.Sprintf("bloat%d", i), unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW, 0o644)
				if err == nil {
					_, _ = unix.Write(fd, make([]byte, 1<<20))
					unix.Close(fd)
				}
			}
		} else {
			writeEvil(root)
		}
		_ = send(childSock, message{Op: "done"}, -1)
		os.Exit(0)
	}
	var st *store
	if source == "file" {
		var err error
		if st, err = archiveStore(os.NewFile(childSrc, "image")); err != nil {
			fail(err)
		}
	} else {
		st = &store{opener: askCaller}
	}
	var img *image
	if b, rerr := st.readAll("evil.json", maxJSON); rerr == nil {
		img, err = st.fromIndex(b, 0)
	} else {
		img, err = st.resolve()
	}
	if err != nil {
		fail(err)
	}
	writeEvil(root) // the resolver's root, thrown away
	p, err := st.proposal(img)
	if err != nil {
		fail(err)
	}
	if err := send(childSock, p, -1); err != nil {
		fail(err)
	}
	if m, _, err := recv(childSock); err == nil && m.Op == "unpack" {
		// A caller that has the child that read the documents unpack
		// the layers too (one child for both, as airlock's unpack once
		// was): it writes its content and says done.
		writeEvil(root)
		_ = send(childSock, message{Op: "done"}, -1)
	}
	os.Exit(0)
}

// writeEvil writes usr/who = "evil" beneath the folder fd root.
func writeEvil(root int) {
	_ = unix.Mkdirat(root, "usr", 0o755)
	fd, err := unix.Openat(root, "usr/who", unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_NOFOLLOW, 0o644)
	if err == nil {
		_, _ = unix.Write(fd, []byte("evil"))
		unix.Close(fd)
	}
}

// ociLayout writes an OCI layout holding the config cfg and the layer
// blobs (as they are, gzipped or not) into dir, and returns the
// manifest's descriptor.
func ociLayout(t *testing.T, dir string, cfg []byte, blobs ...[]byte) descriptor {
	t.Helper()
	bd := filepath.Join(dir, "blobs", "sha256")
	if err := os.MkdirAll(bd, 0o755); err != nil {
		t.Fatal(err)
	}
	put := func(b []byte) string {
		d := sum(b)
		if err := os.WriteFile(filepath.Join(bd, d[7:]), b, 0o644); err != nil {
			t.Fatal(err)
		}
		return d
	}
	var descs []descriptor
	for _, b := range blobs {
		descs = append(descs, descriptor{MediaType: "application/vnd.oci.image.layer.v1.tar+gzip", Digest: put(b), Size: int64(len(b))})
	}
	man, _ := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": mediaManifest,
		"config": descriptor{MediaType: "application/vnd.oci.image.config.v1+json", Digest: put(cfg), Size: int64(len(cfg))}, "layers": descs})
	md := descriptor{MediaType: mediaManifest, Digest: put(man), Size: int64(len(man))}
	idx, _ := json.Marshal(map[string]any{"schemaVersion": 2, "manifests": []descriptor{md}})
	if err := os.WriteFile(filepath.Join(dir, "index.json"), idx, 0o644); err != nil {
		t.Fatal(err)
	}
	return md
}

// configOf is an image config promising the layers' uncompressed tars.
func configOf(raws ...[]byte) []byte {
	var diffs []string
	for _, r := range raws {
		diffs = append(diffs, sum(r))
	}
	b, _ := json.Marshal(map[string]any{"os": "linux", "architecture": runtime.GOARCH, "rootfs": map[string]any{"type": "layers", "diff_ids": diffs}})
	return b
}

// TestAttackCompromisedChild: an unpack child taken over by a hostile
// image (a child program the test substitutes) must not get its content
// into the cache under the key of a vetted image. The vetted image V
// unpacks usr/who = "good"; after the hostile image H ran, V still
// unpacks "good".
//   - resolver: H's layout holds V's blobs and a payload that makes the
//     child name V's manifest; the child that read H's documents tries
//     to write its content for it.
//   - unpacker: H has V's config, byte for byte, and a layer of its own;
//     the child that read H's layer writes its content and says done.
func TestAttackCompromisedChild(t *testing.T) {
	raw := layerTar(t, []entry{dir("usr/"), dir("usr/lib/"), file("usr/who", "good")})
	good := gz(t, raw)
	cfg := configOf(raw)
	bad := gz(t, layerTar(t, []entry{dir("usr/"), dir("usr/lib/"), file("usr/who", "bad")}))
	for _, tt := range []struct {
		name string
		hook *string
		evil func(t *testing.T, v descriptor) string
	}{
		{"resolver", &resolverArg0, func(t *testing.T, v descriptor) string {
			h := t.TempDir()
			ociLayout(t, h, cfg, good) // V's blobs, in H
			ociLayout(t, h, configOf(layerTar(t, []entry{dir("usr/")})), gz(t, layerTar(t, []entry{dir("usr/")})))
			payload, _ := json.Marshal(map[string]any{"manifests": []descriptor{v}})
			if err := os.WriteFile(filepath.Join(h, "evil.json"), payload, 0o644); err != nil {
				t.Fatal(err)
			}
			return h
		}},
		{"unpacker", &unpackerArg0, func(t *testing.T, _ descriptor) string {
			h := t.TempDir()
			ociLayout(t, h, cfg, bad)
			return h
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			eachMode(t, func(t *testing.T) {
				v := t.TempDir()
				vm := ociLayout(t, v, cfg, good)
				h := tt.evil(t, vm)
				cache := t.TempDir()
				*tt.hook = compromisedArg0
				hu, herr := Unpack(h, cache, Options{})
				*tt.hook = ChildArg0
				u, err := Unpack(v, cache, Options{})
				if err != nil {
					t.Fatalf("the vetted image, after the hostile one (%+v, %v): %v", hu, herr, err)
				}
				if got, _ := os.ReadFile(filepath.Join(u.Dir, "usr/who")); string(got) != "good" {
					t.Errorf("the vetted image unpacks usr/who = %q (digest %s, cached %v) after a compromised %s ran the hostile one (%+v, %v): its cache entry was poisoned", got, u.Digest, u.Cached, tt.name, hu, herr)
				}
			})
		})
	}
}

// TestAttackCompromisedBytes: an unpacker taken over by its layer, which
// ignores the bound on bytes it was given, does not get more than that
// bound into the cache: the caller counts what it made.
func TestAttackCompromisedBytes(t *testing.T) {
	eachMode(t, func(t *testing.T) {
		old := maxBytes
		maxBytes = 2 << 20
		unpackerArg0 = bloatArg0
		defer func() { maxBytes, unpackerArg0 = old, ChildArg0 }()
		cache := t.TempDir()
		u, err := Unpack(layout(t, [][]entry{{dir("usr/"), file("usr/who", "good")}}, nil), cache, Options{})
		if err == nil || !strings.Contains(err.Error(), "bytes") {
			t.Errorf("Unpack by an unpacker that wrote 3 MiB under a bound of 2 MiB = %+v, %v; want a refusal naming the bytes", u, err)
		}
		if es, _ := os.ReadDir(cache); len(es) != 0 {
			t.Errorf("the cache keeps %v", es)
		}
	})
}

// TestResolverWritesNothing: the resolver, taken over by the image after
// its setup, cannot write a file of even one byte (RLIMIT_FSIZE 0).
func TestResolverWritesNothing(t *testing.T) {
	eachMode(t, func(t *testing.T) {
		resolverArg0 = fsizeArg0
		defer func() { resolverArg0 = ChildArg0 }()
		_, err := Unpack(layout(t, [][]entry{{dir("usr/")}}, nil), t.TempDir(), Options{})
		if err == nil || !strings.Contains(err.Error(), "file too large") {
			t.Errorf("a resolver's write of 1 MiB: %v; want EFBIG", err)
		}
	})
}

// TestAttackUnpackDeadline: a child that never ends (an extractor stuck
// on a hostile layer) is killed at the unpack's deadline; Unpack says
// which bound it hit and what to do, and the cache keeps nothing of it.
func TestAttackUnpackDeadline(t *testing.T) {
	for _, hook := range []*string{&resolverArg0, &unpackerArg0} {
		t.Run(map[*string]string{&resolverArg0: "resolver", &unpackerArg0: "unpacker"}[hook], func(t *testing.T) {
			eachMode(t, func(t *testing.T) {
				old := unpackDeadline
				unpackDeadline = time.Second
				*hook = hangArg0
				defer func() { unpackDeadline, *hook = old, ChildArg0 }()
				src := layout(t, [][]entry{{dir("usr/"), file("usr/who", "good")}}, nil)
				cache := t.TempDir()
				type result struct {
					u   *Unpacked
					err error
				}
				done := make(chan result, 1)
				go func() { u, err := Unpack(src, cache, Options{}); done <- result{u, err} }()
				var r result
				select {
				case r = <-done:
				case <-time.After(2 * time.Minute): // the bound of the test, not of airlock
					t.Fatalf("Unpack still waits after 2 minutes for a child that never ends")
				}
				if r.err == nil || !strings.Contains(r.err.Error(), "deadline") || !strings.Contains(r.err.Error(), "rootfs") {
					t.Errorf("Unpack with a child that never ends = %+v, %v; want a refusal naming the deadline and what to do", r.u, r.err)
				}
				if es, _ := os.ReadDir(cache); len(es) != 0 {
					t.Errorf("the cache keeps %v", es)
				}
			})
		})
	}
}

// TestAttackBoundsClean: an image that blows a bound (many tiny entries,
// deep folders, a sparse file whose header claims a terabyte) is refused
// with a message that names the bound and says what to do, and its
// staging folder is gone.
func TestAttackBoundsClean(t *testing.T) {
	oldE := maxEntries
	maxEntries = 100
	defer func() { maxEntries = oldE }()
	var many []entry
	for i := range 200 {
		many = append(many, file(fmt.Sprintf("f%d", i), ""))
	}
	for _, tt := range []struct {
		name  string
		layer []byte
		bound string
	}{
		{"many-tiny", layerTar(t, many), "more than 100 files"},
		{"deep", layerTar(t, []entry{dir("usr/"), file(strings.Repeat("d/", 1000)+"f", "x")}), "folders deep"},
		{"sparse-terabyte", sparseTar(t, 1<<40), "bytes in all"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cache := t.TempDir()
			h := t.TempDir()
			ociLayout(t, h, configOf(tt.layer), gz(t, tt.layer))
			u, err := Unpack(h, cache, Options{})
			if err == nil || !strings.Contains(err.Error(), tt.bound) || !strings.Contains(err.Error(), "rootfs") {
				t.Errorf("Unpack = %+v, %v; want a refusal naming %q and saying what to do", u, err, tt.bound)
			}
			if es, _ := os.ReadDir(cache); len(es) != 0 {
				t.Errorf("the cache keeps %v", es)
			}
		})
	}
}

// sparseTar is a tar of one old-GNU sparse file ('S') of size bytes of
// which one 512-byte block is stored: the header is 1 KiB, the file it
// claims a terabyte.
func sparseTar(t *testing.T, size int64) []byte {
	t.Helper()
	h := make([]byte, 512)
	octal := func(b []byte, v int64) {
		if v < 1<<33 {
			copy(b, fmt.Sprintf("%0*o\x00", len(b)-1, v))
			return
		}
		b[0] = 0x80 // base-256, for what octal cannot hold
		for i := len(b) - 1; i > 0; i, v = i-1, v>>8 {
			b[i] = byte(v)
		}
	}
	copy(h[0:], "sparse")
	octal(h[100:108], 0o644)
	octal(h[108:116], 0)
	octal(h[116:124], 0)
	octal(h[124:136], 512) // stored bytes
	octal(h[136:148], 0)
	h[156] = 'S'
	copy(h[257:], "ustar  \x00")
	octal(h[386:398], size-512) // the one data block, at the end
	octal(h[398:410], 512)
	octal(h[483:495], size) // the real size
	copy(h[148:156], "        ")
	var s int64
	for _, c := range h {
		s += int64(c)
	}
	copy(h[148:156], fmt.Sprintf("%06o\x00 ", s))
	out := append(h, make([]byte, 512)...)
	return append(out, make([]byte, 1024)...)
}

// TestStaleStagingRemoved: the staging folders an unpack that was killed
// left behind are removed by the next unpack into the cache, without
// following a link in them; a staging folder an unpack still uses (it
// holds its lock), a link named like one and everything else in the cache
// stay, and nothing outside the cache changes.
func TestStaleStagingRemoved(t *testing.T) {
	can := newCanary(t)
	cache := t.TempDir()
	stale := filepath.Join(cache, ".unpack-00112233445566ff")
	root := filepath.Join(stale, entryRoot)
	for _, d := range []string{root, root + "/usr/lib", root + "/deep/" + strings.Repeat("d/", 40)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink(can.dir, root+"/usr/out"))
	must(os.Symlink(can.dir+"/file", root+"/usr/lib/f"))
	must(os.Symlink(can.dir+"/file", stale+"/"+entryMarker))
	must(os.WriteFile(root+"/usr/who", []byte("half"), 0o644))
	must(os.Chmod(root+"/usr/lib", 0o500)) // a folder the killed child had not yet opened up
	must(os.Symlink(can.dir, filepath.Join(cache, ".unpack-0011223344556677")))
	must(os.Mkdir(filepath.Join(cache, "keep-me"), 0o700))
	live := filepath.Join(cache, ".unpack-aabbccddeeff0011")
	must(os.MkdirAll(filepath.Join(live, entryRoot), 0o700))
	lfd, err := unix.Open(live, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	must(err)
	defer unix.Close(lfd)
	must(unix.Flock(lfd, unix.LOCK_EX|unix.LOCK_NB))

	if _, err := Unpack(layout(t, [][]entry{{dir("usr/"), file("usr/who", "good")}}, nil), cache, Options{}); err != nil {
		t.Fatal(err)
	}
	can.check(t)
	if _, err := os.Lstat(stale); err == nil {
		t.Errorf("the stale staging folder %s is still there", stale)
	}
	for _, keep := range []string{live, filepath.Join(cache, "keep-me"), filepath.Join(cache, ".unpack-0011223344556677")} {
		if _, err := os.Lstat(keep); err != nil {
			t.Errorf("%s was removed: %v", keep, err)
		}
	}
}
