package writeback_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/internal/writeback"
)

// The stage is built by hand here as overlayfs lays out an upper layer
// (whiteouts are 0/0 character devices, opaque folders carry
// user.overlay.opaque=y); the sandbox tests run the real overlay.

type fixture struct {
	stage, host, outside string
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	d := t.TempDir()
	f := fixture{stage: filepath.Join(d, "stage"), host: filepath.Join(d, "host"), outside: filepath.Join(d, "outside")}
	for _, p := range []string{f.stage + "/0/upper", f.host, f.outside} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(f.outside, "secret"), "OUTSIDE\n")
	return f
}

func write(t *testing.T, p, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (f fixture) upper(rel string) string { return filepath.Join(f.stage, "0/upper", rel) }

func whiteout(t *testing.T, p string) {
	t.Helper()
	airtest.RequireRoot(t)                                 // mknod of a 0/0 device outside overlayfs
	if err := unix.Mknod(p, unix.S_IFCHR, 0); err != nil { // mode 0, device 0/0: a whiteout
		t.Fatal(err)
	}
}

func (f fixture) run(t *testing.T, refuse func(string) string, pins ...string) writeback.Result {
	t.Helper()
	sfd, err := unix.Open(f.stage, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(sfd)
	hfd, err := writeback.OpenHost(f.host)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(hfd)
	res, _ := writeback.WriteBack(writeback.Config{StageFD: sfd, Grants: []writeback.Grant{{Host: f.host, Stage: "0", HostFD: hfd}}, Refuse: refuse, Pinned: pins, MaxBytes: 1 << 30})
	return res
}

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		return "<" + err.Error() + ">"
	}
	return string(b)
}

func TestWriteBackChanges(t *testing.T) {
	f := newFixture(t)
	write(t, filepath.Join(f.host, "kept.txt"), "old\n")
	write(t, filepath.Join(f.host, "changed.txt"), "old\n")
	write(t, filepath.Join(f.host, "gone.txt"), "old\n")
	write(t, filepath.Join(f.host, "dir/old.txt"), "old\n")
	write(t, f.upper("changed.txt"), "new\n")
	write(t, f.upper("new/deep/file.txt"), "deep\n")
	if err := os.Symlink("new/deep", f.upper("link")); err != nil {
		t.Fatal(err)
	}
	whiteout(t, f.upper("gone.txt"))
	if err := os.Mkdir(f.upper("dir"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(f.upper("dir"), "user.overlay.opaque", []byte("y"), 0); err != nil {
		t.Skipf("user xattrs unsupported on the test filesystem: %v", err)
	}
	write(t, f.upper("dir/fresh.txt"), "fresh\n")

	res := f.run(t, nil)
	if !res.Complete || res.FailedTotal != 0 {
		t.Fatalf("result = %+v, want complete", res)
	}
	for rel, want := range map[string]string{"kept.txt": "old\n", "changed.txt": "new\n", "new/deep/file.txt": "deep\n", "dir/fresh.txt": "fresh\n"} {
		if got := read(t, filepath.Join(f.host, rel)); got != want {
			t.Errorf("host %s = %q, want %q", rel, got, want)
		}
	}
	for _, rel := range []string{"gone.txt", "dir/old.txt"} {
		if _, err := os.Lstat(filepath.Join(f.host, rel)); !os.IsNotExist(err) {
			t.Errorf("host %s still exists (%v): its deletion inside was not copied back", rel, err)
		}
	}
	if l, err := os.Readlink(filepath.Join(f.host, "link")); err != nil || l != "new/deep" {
		t.Errorf("host link = %q, %v", l, err)
	}
	if fi, _ := os.Stat(filepath.Join(f.host, "dir")); fi == nil || fi.Mode().Perm() != 0o750 {
		t.Errorf("host dir mode = %v, want 0750", fi)
	}
	ents, _ := os.ReadDir(f.host)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".airlock-") {
			t.Errorf("a temporary file was left behind: %s", e.Name())
		}
	}
}

func TestWriteBackNeverFollowsHostSymlinks(t *testing.T) {
	f := newFixture(t)
	// The host holds symlinks where the stage has folders and files: the
	// copy back replaces the links, it never writes through them.
	if err := os.Symlink(f.outside, filepath.Join(f.host, "sub")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(f.outside, "secret"), filepath.Join(f.host, "file")); err != nil {
		t.Fatal(err)
	}
	write(t, f.upper("sub/secret"), "PLANTED\n")
	write(t, f.upper("file"), "PLANTED\n")
	res := f.run(t, nil)
	if got := read(t, filepath.Join(f.outside, "secret")); got != "OUTSIDE\n" {
		t.Fatalf("a file outside the grant was written through a host symlink: %q (result %+v)", got, res)
	}
	if fi, err := os.Lstat(filepath.Join(f.host, "sub")); err != nil || !fi.IsDir() {
		t.Errorf("host sub = %v, %v; want the staged folder in place of the link", fi, err)
	}
}

func TestWriteBackRemovalStaysInside(t *testing.T) {
	f := newFixture(t)
	if err := os.MkdirAll(filepath.Join(f.host, "tree"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(f.outside, filepath.Join(f.host, "tree/link")); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(f.host, "tree/a.txt"), "a\n")
	whiteout(t, f.upper("tree"))
	res := f.run(t, nil)
	if got := read(t, filepath.Join(f.outside, "secret")); got != "OUTSIDE\n" {
		t.Fatalf("removing a folder followed a symlink out of the grant: %q", got)
	}
	if _, err := os.Lstat(filepath.Join(f.host, "tree")); !os.IsNotExist(err) {
		t.Errorf("host tree still exists: %v (%+v)", err, res)
	}
}

func TestWriteBackRefusals(t *testing.T) {
	f := newFixture(t)
	gitDir := filepath.Join(f.host, "repo", ".git")
	write(t, filepath.Join(gitDir, "config"), "[core]\n")
	write(t, filepath.Join(f.host, "nested", "keep"), "nested grant\n")
	write(t, f.upper(".git/hooks/pre-commit"), "evil\n")
	write(t, f.upper("bare/HEAD"), "ref: refs/heads/main\n")
	if err := os.MkdirAll(f.upper("bare/objects"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, f.upper("bare/hooks/update"), "evil\n")
	write(t, f.upper("bare/config"), "[core]\n\tfsmonitor = evil\n")
	write(t, f.upper("sub/.git"), "gitdir: ../bare\n")
	write(t, f.upper("ok.txt"), "ok\n")
	whiteout(t, f.upper("nested"))
	if err := unix.Mkfifo(f.upper("fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	suid := f.upper("suid")
	write(t, suid, "x")
	if err := os.Chmod(suid, 0o4755|os.ModeSetuid); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Chmod(suid, 0o6755); err != nil {
		t.Fatal(err)
	}
	refuse := func(p string) string {
		if strings.Contains(p, "/.git/hooks") {
			return "protected"
		}
		return ""
	}
	res := f.run(t, refuse, filepath.Join(f.host, "nested", "keep"))
	for _, rel := range []string{".git/hooks/pre-commit", "bare/hooks/update", "sub/.git", "fifo"} {
		if _, err := os.Lstat(filepath.Join(f.host, rel)); err == nil {
			t.Errorf("%s reached the host", rel)
		}
	}
	if got := read(t, filepath.Join(f.host, "bare/config")); strings.Contains(got, "fsmonitor") {
		t.Errorf("a planted repository's config reached the host: %q", got)
	}
	if got := read(t, filepath.Join(f.host, "nested/keep")); got != "nested grant\n" {
		t.Errorf("a pinned path (another grant) was removed: %q", got)
	}
	if got := read(t, filepath.Join(f.host, "ok.txt")); got != "ok\n" {
		t.Errorf("ok.txt = %q", got)
	}
	fi, err := os.Stat(filepath.Join(f.host, "suid"))
	if err != nil || fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
		t.Errorf("suid on the host = %v, %v: want it without setuid and setgid", fi, err)
	}
	if res.ModesDropped != 1 || res.RefusedTotal < 5 {
		t.Errorf("result = %+v, want modes_dropped 1 and the refusals listed", res)
	}
}

func TestWriteBackFileGrantAndMoved(t *testing.T) {
	d := t.TempDir()
	stage := filepath.Join(d, "stage")
	host := filepath.Join(d, "notes.txt")
	write(t, filepath.Join(stage, "0", "file"), "edited\n")
	write(t, host, "original\n")
	sfd, err := unix.Open(stage, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(sfd)
	hfd, err := writeback.OpenHost(host)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(hfd)
	var st0 unix.Stat_t
	if err := unix.Fstat(hfd, &st0); err != nil {
		t.Fatal(err)
	}
	g := writeback.Grant{Host: host, Stage: "0", File: true, HostFD: hfd}
	if writeback.Moved(g) {
		t.Fatal("Moved = true before anything moved")
	}
	res, _ := writeback.WriteBack(writeback.Config{StageFD: sfd, Grants: []writeback.Grant{g}, MaxBytes: 1 << 30})
	if got := read(t, host); got != "edited\n" || res.Files != 1 {
		t.Fatalf("host file = %q, result %+v", got, res)
	}
	var st1 unix.Stat_t
	if err := unix.Stat(host, &st1); err != nil || st1.Ino != st0.Ino {
		t.Errorf("a file grant was replaced (inode %d -> %d), not written in place", st0.Ino, st1.Ino)
	}
	// The host renames the file away and puts another in its place.
	if err := os.Rename(host, host+".old"); err != nil {
		t.Fatal(err)
	}
	write(t, host, "someone else's\n")
	if !writeback.Moved(g) {
		t.Error("Moved = false after the host path was replaced")
	}
}

func TestOpenHostRefusesSymlinks(t *testing.T) {
	d := t.TempDir()
	if err := os.Mkdir(filepath.Join(d, "real"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real", filepath.Join(d, "link")); err != nil {
		t.Fatal(err)
	}
	if fd, err := writeback.OpenHost(filepath.Join(d, "link", ".")); err == nil {
		unix.Close(fd)
		t.Fatal("OpenHost followed a symlink in the grant's path")
	}
}
