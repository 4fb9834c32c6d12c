package sandbox_test

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// testRootfs returns the Debian root filesystem CI builds with debootstrap
// (.ci/rootfs; AIRLOCK_TEST_ROOTFS names it), which has tree, a tool this
// host lacks.
func testRootfs(t *testing.T) string {
	t.Helper()
	root := os.Getenv("AIRLOCK_TEST_ROOTFS")
	if root == "" {
		airtest.SkipOrFail(t, "AIRLOCK_TEST_ROOTFS is not set: build a Debian root with .ci/rootfs (debootstrap, as root) and point it there")
	}
	if _, err := os.Stat(root + "/usr/bin/tree"); err != nil {
		airtest.SkipOrFail(t, "AIRLOCK_TEST_ROOTFS %s has no /usr/bin/tree: rebuild it with .ci/rootfs", root)
	}
	return root
}

// TestEnvironmentRuns: in an environment the command, the tools and the
// libraries come from its root filesystem: a tool the host lacks runs
// (tree), a tool only the host has is not found (exit 127, naming the
// environment), the host's own binaries and libraries are absent inside,
// and the report and the plan name the environment. Grants and the
// filesystem attacks behave as on the host's base: a write grant is
// written, the host's secrets stay absent, and /proc leads nowhere.
func TestEnvironmentRuns(t *testing.T) {
	requireSandbox(t)
	root := testRootfs(t)
	if _, err := os.Stat("/usr/bin/tree"); err == nil {
		t.Skip("this host has tree itself: the test needs a tool only the environment has")
	}
	ws := t.TempDir()
	if err := os.WriteFile("/tmp/airlock-host-only-marker", []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove("/tmp/airlock-host-only-marker")

	spec := policy.Spec{Rootfs: root, FSWrite: []string{ws}, AllowedTools: []string{"tree", "sh", "cat", "ls"}}
	rep := run(t, spec, "tree", "-a", ws)
	wantExit(t, rep, 0)
	if rep.Enforcement.Rootfs != root {
		t.Errorf("report enforcement.rootfs = %q, want %q", rep.Enforcement.Rootfs, root)
	}

	rep = run(t, policy.Spec{Rootfs: root, AllowedTools: []string{"jq"}}, "/bin/true")
	if rep.ExitCode != 127 || !strings.Contains(rep.Error, root) {
		t.Errorf("a host-only tool in the environment: exit %d %q, want 127 naming the environment", rep.ExitCode, rep.Error)
	}

	script := `
for p in /usr/bin/jq /usr/bin/go /usr/local/go /etc/shadow /root /home /tmp/airlock-host-only-marker /proc/1/root/etc/shadow /proc/self/root/root; do
  if [ -e "$p" ]; then echo "present $p"; fi
done
cat /etc/shadow 2>/dev/null && echo "read shadow"
echo written > ` + ws + `/out.txt
ls /usr/lib/x86_64-linux-gnu > /dev/null && echo libs-listed
`
	rep = sh(t, spec, script)
	wantExit(t, rep, 0)
	if strings.Contains(rep.Stdout, "present") || strings.Contains(rep.Stdout, "read shadow") {
		t.Errorf("host files visible in the environment:\n%s", rep.Stdout)
	}
	if b, err := os.ReadFile(ws + "/out.txt"); err != nil || string(b) != "written\n" {
		t.Errorf("fs_write grant in the environment: %q %v", b, err)
	}

	// The environment's own libraries, not the host's: a library only the
	// host has is absent inside.
	hostOnly := ""
	for _, l := range []string{"libjq.so.1", "libonig.so.5", "libpython3.11.so.1.0"} {
		if _, err := os.Stat("/usr/lib/x86_64-linux-gnu/" + l); err == nil {
			if _, err := os.Stat(root + "/usr/lib/x86_64-linux-gnu/" + l); err != nil {
				hostOnly = l
				break
			}
		}
	}
	if hostOnly != "" {
		rep = sh(t, spec, "test -e /usr/lib/x86_64-linux-gnu/"+hostOnly+" && echo host-lib")
		if strings.Contains(rep.Stdout, "host-lib") {
			t.Errorf("the host's %s is visible in the environment", hostOnly)
		}
	}

	// Sessions run in it too.
	p, err := policy.New(policy.Spec{Rootfs: root, AllowedTools: []string{"tree"}, AllowDowngrade: airtest.RootlessDowngrades()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := sandbox.NewSession(ctx, sandbox.Config{Policy: p})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	srep, err := s.Exec(ctx, sandbox.ExecRequest{Args: []string{"tree", "--version"}})
	if err != nil || srep.ExitCode != 0 || !strings.Contains(srep.Stdout, "tree v") {
		t.Errorf("session exec of tree in the environment: %+v %v", srep, err)
	}
}

// TestEnvironmentOnEveryBackend: the OCI runtimes (runc, and runsc under
// gVisor) run the same plan with the environment's mounts, and the report
// names it; the landlock backend, which has no mount namespace to put the
// environment in, refuses it, naming it, and nothing starts.
func TestEnvironmentOnEveryBackend(t *testing.T) {
	requireSandbox(t)
	root := testRootfs(t)
	p, err := policy.New(policy.Spec{Rootfs: root, AllowedTools: []string{"tree"}, AllowDowngrade: airtest.RootlessDowngrades()})
	if err != nil {
		t.Fatal(err)
	}
	runOn := func(iso string) (*sandbox.Report, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		return (&sandbox.Cmd{Config: sandbox.Config{Policy: p, Isolation: iso}, Args: []string{"tree", "--version"}}).Run(ctx)
	}
	for _, c := range []struct{ iso, bin string }{{sandbox.IsolationOCI, "/usr/sbin/runc"}, {sandbox.IsolationGVisor, "/usr/bin/runsc"}} {
		t.Run(c.iso, func(t *testing.T) {
			airtest.RequireRoot(t) // airlock drives the OCI runtimes as root
			airtest.RequireBinary(t, c.bin)
			rep, err := runOn(c.iso)
			if err != nil {
				t.Fatal(err)
			}
			if rep.ExitCode != 0 || !strings.Contains(rep.Stdout, "tree v") || rep.Enforcement.Rootfs != root {
				t.Errorf("tree in the environment under %s: exit %d, stdout %q, error %q, rootfs %q", c.iso, rep.ExitCode, rep.Stdout, rep.Error, rep.Enforcement.Rootfs)
			}
		})
	}
	rep, err := runOn(sandbox.IsolationLandlock)
	msg := ""
	if err != nil {
		msg = err.Error()
	} else {
		msg = rep.Error
		if rep.ExitCode != 125 {
			t.Errorf("isolation landlock with a rootfs: exit %d, want 125", rep.ExitCode)
		}
	}
	if !strings.Contains(msg, "rootfs") || !strings.Contains(msg, root) || !strings.Contains(msg, "nothing was started") {
		t.Errorf("isolation landlock with a rootfs: %q, want a refusal naming the environment", msg)
	}
}

// ociLayoutOf writes an OCI image layout holding dir as one uncompressed
// layer, as `podman save --format oci-dir` of an imported root would.
func ociLayoutOf(t *testing.T, dir string) string {
	t.Helper()
	out := t.TempDir()
	blobs := filepath.Join(out, "blobs", "sha256")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		t.Fatal(err)
	}
	layer, err := os.CreateTemp(blobs, "layer")
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	tw := tar.NewWriter(io.MultiWriter(layer, h))
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrPermission) {
			return nil // a folder this user cannot read (rootless: ROOT/root): left out
		}
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return nil // sockets and the like: not in an image
		}
		var f *os.File
		if fi.Mode().IsRegular() {
			if f, err = os.Open(p); errors.Is(err, fs.ErrPermission) {
				return nil // unreadable by this user (rootless: ROOT/etc/shadow): left out
			} else if err != nil {
				return err
			}
		}
		hdr.Name = rel
		if fi.IsDir() {
			hdr.Name += "/"
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			_, err = io.Copy(tw, f)
			f.Close()
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	size, _ := layer.Seek(0, io.SeekCurrent)
	layer.Close()
	ld := "sha256:" + hex.EncodeToString(h.Sum(nil))
	if err := os.Rename(layer.Name(), filepath.Join(blobs, ld[7:])); err != nil {
		t.Fatal(err)
	}
	put := func(v any) (string, int) {
		b, _ := json.Marshal(v)
		s := sha256.Sum256(b)
		d := "sha256:" + hex.EncodeToString(s[:])
		if err := os.WriteFile(filepath.Join(blobs, d[7:]), b, 0o644); err != nil {
			t.Fatal(err)
		}
		return d, len(b)
	}
	cd, cs := put(map[string]any{"os": "linux", "architecture": runtime.GOARCH, "rootfs": map[string]any{"type": "layers", "diff_ids": []string{ld}}})
	md, ms := put(map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cd, "size": cs},
		"layers": []map[string]any{{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": ld, "size": size}}})
	idx, _ := json.Marshal(map[string]any{"schemaVersion": 2, "manifests": []map[string]any{{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": md, "size": ms}}})
	if err := os.WriteFile(filepath.Join(out, "index.json"), idx, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestEnvironmentFromImage: the same Debian root as an OCI image layout
// is an environment too: unpacked once into the image cache (checked
// against its digests), the tool only it has runs, the host's secrets
// stay absent, the report names the image and its digest, and a second
// run uses the cache.
func TestEnvironmentFromImage(t *testing.T) {
	requireSandbox(t)
	root := testRootfs(t)
	src := ociLayoutOf(t, root)
	cache := t.TempDir()
	p, err := policy.New(policy.Spec{Rootfs: src, AllowedTools: []string{"tree", "sh", "cat"}, AllowDowngrade: airtest.RootlessDowngrades()})
	if err != nil {
		t.Fatal(err)
	}
	runIt := func(argv ...string) *sandbox.Report {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		rep, err := (&sandbox.Cmd{Config: sandbox.Config{Policy: p, ImageCache: cache}, Args: argv}).Run(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	rep := runIt("tree", "--version")
	if rep.ExitCode != 0 || !strings.Contains(rep.Stdout, "tree v") {
		t.Fatalf("tree from the image: exit %d %q %q", rep.ExitCode, rep.Stdout, rep.Error)
	}
	if rep.Enforcement.Rootfs != src || !strings.HasPrefix(rep.Enforcement.RootfsDigest, "sha256:") {
		t.Errorf("enforcement rootfs %q digest %q, want the image and its digest", rep.Enforcement.Rootfs, rep.Enforcement.RootfsDigest)
	}
	unpacked := filepath.Join(cache, strings.TrimPrefix(rep.Enforcement.RootfsDigest, "sha256:"), "rootfs")
	if _, err := os.Stat(unpacked + "/usr/bin/tree"); err != nil {
		t.Errorf("the image was not unpacked at %s: %v", unpacked, err)
	}
	rep = runIt("sh", "-c", "cat /etc/shadow /root/.bashrc 2>&1; test -e /usr/bin/jq && echo host-jq; true")
	if strings.Contains(rep.Stdout, "host-jq") || strings.Contains(rep.Stdout, "root:") {
		t.Errorf("host files visible in the image's environment: %q", rep.Stdout)
	}
	before, _ := os.Stat(unpacked)
	rep = runIt("tree", "--version")
	after, _ := os.Stat(unpacked)
	if rep.ExitCode != 0 || !os.SameFile(before, after) || !before.ModTime().Equal(after.ModTime()) {
		t.Errorf("second run: exit %d; the cache was not reused", rep.ExitCode)
	}
}

// TestAttacksInEnvironment: the filesystem attack tests again, with the
// sandbox in the Debian environment: the host's secrets, its other users'
// homes, a sibling of a grant, .., /proc's roots, symlinks and hard links,
// grants through symlinks, and writes outside the grants stay out of
// reach when the system base is the environment's.
func TestAttacksInEnvironment(t *testing.T) {
	requireSandbox(t)
	root := testRootfs(t)
	if _, err := os.Stat(root + "/usr/bin/python3"); err != nil {
		airtest.SkipOrFail(t, "the environment %s has no python3, which the attack tests run: rebuild it with .ci/rootfs", root)
	}
	specVariant = func(s *policy.Spec) { s.Rootfs = root }
	defer func() { specVariant = nil }()
	t.Run("FilesystemReads", TestAttackFilesystemReads)
	t.Run("HomeCredentialsViaEnv", TestAttackHomeCredentialsViaEnv)
	t.Run("SymlinkAndHardlink", TestAttackSymlinkAndHardlink)
	t.Run("GrantThroughSymlinkRefused", TestAttackGrantThroughSymlinkRefused)
	t.Run("WritesAndMounts", TestAttackWritesAndMounts)
}
