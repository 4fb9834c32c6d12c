package sandbox_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// miniLayer returns a tar of the least of root that runs cat: the
// top-level links, cat, libc and the loader, with their folders.
func miniLayer(t *testing.T, root string) []byte {
	t.Helper()
	keep := map[string]bool{}
	for _, pat := range []string{"bin", "lib", "lib64", "sbin", "usr/bin/cat", "usr/lib/*/libc.so.6", "usr/lib/*/ld-linux*", "usr/lib/ld-linux*", "usr/lib64/ld-linux*"} {
		ms, _ := filepath.Glob(filepath.Join(root, pat))
		for _, m := range ms {
			rel, _ := filepath.Rel(root, m)
			for p := rel; p != "."; p = filepath.Dir(p) {
				keep[p] = true
			}
		}
	}
	keep["usr/lib"] = true
	names := make([]string, 0, len(keep))
	for n := range keep {
		names = append(names, n)
	}
	sort.Strings(names)
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, n := range names {
		fi, err := os.Lstat(filepath.Join(root, n))
		if err != nil {
			t.Fatal(err)
		}
		link := ""
		if fi.Mode()&os.ModeSymlink != 0 {
			link, _ = os.Readlink(filepath.Join(root, n))
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			t.Fatal(err)
		}
		h.Name, h.Uid, h.Gid, h.Uname, h.Gname = n, 0, 0, "", ""
		if fi.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if fi.Mode().IsRegular() {
			data, err := os.ReadFile(filepath.Join(root, n))
			if err != nil {
				t.Fatal(err)
			}
			tw.Write(data)
		}
	}
	tw.Close()
	return b.Bytes()
}

// oneFile returns a tar holding usr/lib/who with body.
func oneFile(t *testing.T, body string) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	if err := tw.WriteHeader(&tar.Header{Name: "usr/lib/who", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body))}); err != nil {
		t.Fatal(err)
	}
	tw.Write([]byte(body))
	tw.Close()
	return b.Bytes()
}

func digest(b []byte) string { s := sha256.Sum256(b); return "sha256:" + hex.EncodeToString(s[:]) }

// tarFiles writes a tar archive of the named contents and returns its path.
func tarFiles(t *testing.T, files map[string][]byte) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "image.tar")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(f)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		tw.WriteHeader(&tar.Header{Name: n, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(files[n]))})
		tw.Write(files[n])
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return out
}

// TestEnvironmentImageKeys: a Docker archive whose config is, byte for
// byte, a vetted OCI archive's manifest (one JSON document can be both)
// runs first; then the OCI archive runs its own content. The two reports
// name two rootfs digests, each the image it ran.
func TestEnvironmentImageKeys(t *testing.T) {
	requireSandbox(t)
	root := testRootfs(t)
	base, good, evil := miniLayer(t, root), oneFile(t, "good"), oneFile(t, "evil")
	cfg, _ := json.Marshal(map[string]any{"os": "linux", "architecture": runtime.GOARCH,
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{digest(base), digest(good)}}})
	layer := func(b []byte) map[string]any {
		return map[string]any{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": digest(b), "size": len(b)}
	}
	man, _ := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": digest(cfg), "size": len(cfg)},
		"layers": []any{layer(base), layer(good)},
		// Ignored by the OCI reading; the Docker archive's config.
		"os": "linux", "rootfs": map[string]any{"type": "layers", "diff_ids": []string{digest(base), digest(evil)}}})
	idx, _ := json.Marshal(map[string]any{"schemaVersion": 2, "manifests": []any{map[string]any{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": digest(man), "size": len(man)}}})
	blob := func(b []byte) string { return "blobs/sha256/" + strings.TrimPrefix(digest(b), "sha256:") }
	oci := tarFiles(t, map[string][]byte{"index.json": idx, "oci-layout": []byte(`{"imageLayoutVersion":"1.0.0"}`),
		blob(cfg): cfg, blob(man): man, blob(base): base, blob(good): good})
	dman, _ := json.Marshal([]map[string]any{{"Config": "config.json", "Layers": []string{"base/layer.tar", "evil/layer.tar"}}})
	docker := tarFiles(t, map[string][]byte{"manifest.json": dman, "config.json": man, "base/layer.tar": base, "evil/layer.tar": evil})

	cache := t.TempDir()
	run := func(src string) *sandbox.Report {
		t.Helper()
		p, err := policy.New(policy.Spec{Rootfs: src, AllowedTools: []string{"cat"}, AllowDowngrade: airtest.RootlessDowngrades()})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		rep, err := (&sandbox.Cmd{Config: sandbox.Config{Policy: p, ImageCache: cache}, Args: []string{"cat", "/usr/lib/who"}}).Run(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if rep.ExitCode != 0 {
			t.Fatalf("cat /usr/lib/who in %s: exit %d %q %q", src, rep.ExitCode, rep.Stderr, rep.Error)
		}
		return rep
	}
	d, o := run(docker), run(oci)
	if d.Stdout != "evil" || o.Stdout != "good" || d.Enforcement.RootfsDigest == o.Enforcement.RootfsDigest {
		t.Errorf("the docker archive ran %q with rootfs_digest %s; the OCI archive after it ran %q with rootfs_digest %s: want evil, good and two digests",
			d.Stdout, d.Enforcement.RootfsDigest, o.Stdout, o.Enforcement.RootfsDigest)
	}
}
