package writeback_test

import (
	"encoding/binary"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/internal/writeback"
)

// These tests attack the copy back with stages built by hand, as a
// sandbox could leave them; sandbox/copyback_linux_test.go does it
// through a real sandbox.

// runMax runs the copy back of f with max_write maxBytes.
func (f fixture) runMax(t *testing.T, maxBytes int64) (writeback.Result, []string) {
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
	return writeback.WriteBack(writeback.Config{StageFD: sfd, Grants: []writeback.Grant{{Host: f.host, Stage: "0", HostFD: hfd}}, MaxBytes: maxBytes})
}

// sparse makes p a file of size bytes with data only at the offsets of
// data.
func sparse(t *testing.T, p string, size int64, data map[int64]string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	fh, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	for off, s := range data {
		if _, err := fh.WriteAt([]byte(s), off); err != nil {
			t.Fatal(err)
		}
	}
	if err := fh.Truncate(size); err != nil {
		t.Fatal(err)
	}
}

func blocksOf(t *testing.T, p string) int64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

// diskUse is what dir takes on its disk, everything under it included.
func diskUse(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		n += fi.Sys().(*syscall.Stat_t).Blocks * 512
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func readAt(t *testing.T, p string, off int64, n int) string {
	t.Helper()
	fh, err := os.Open(p)
	if err != nil {
		return "<" + err.Error() + ">"
	}
	defer fh.Close()
	b := make([]byte, n)
	if _, err := fh.ReadAt(b, off); err != nil {
		return "<" + err.Error() + ">"
	}
	return string(b)
}

func TestWriteBackKeepsHoles(t *testing.T) {
	f := newFixture(t)
	data := map[int64]string{0: "head", 512 << 20: "tail"}
	sparse(t, f.upper("sparse"), 1<<30, data)
	res, _ := f.runMax(t, 1<<20)
	p := filepath.Join(f.host, "sparse")
	fi, err := os.Stat(p)
	if err != nil || fi.Size() != 1<<30 || !res.Complete || res.Files != 1 || res.Bytes > 64<<10 {
		t.Fatalf("host sparse = %v, %v; result %+v: want 1 GiB apparent, its two blocks of data written", fi, err, res)
	}
	if got := blocksOf(t, p); got > 64<<10 {
		t.Errorf("a 1 GiB file holding 8 bytes takes %d bytes on the host: its holes were filled", got)
	}
	for off, s := range data {
		if got := readAt(t, p, off, len(s)); got != s {
			t.Errorf("host sparse at %d = %q, want %q", off, got, s)
		}
	}

	// A single-file grant is written in place, holes kept too.
	d := t.TempDir()
	host := filepath.Join(d, "grant.bin")
	write(t, host, "old")
	sparse(t, filepath.Join(d, "stage", "0", "file"), 1<<30, data)
	sfd, err := unix.Open(filepath.Join(d, "stage"), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(sfd)
	hfd, err := writeback.OpenHost(host)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(hfd)
	res, _ = writeback.WriteBack(writeback.Config{StageFD: sfd, Grants: []writeback.Grant{{Host: host, Stage: "0", File: true, HostFD: hfd}}, MaxBytes: 1 << 20})
	if got := blocksOf(t, host); got > 64<<10 || !res.Complete || readAt(t, host, 512<<20, 4) != "tail" {
		t.Errorf("file grant: %d bytes on disk, tail %q, result %+v: want its holes kept", got, readAt(t, host, 512<<20, 4), res)
	}
}

func TestWriteBackChargesMaxBytes(t *testing.T) {
	const blk = 4096
	t.Run("hard-links-count-once-per-name", func(t *testing.T) {
		f := newFixture(t)
		write(t, f.upper("big"), strings.Repeat("x", 64<<10))
		for _, n := range []string{"l1", "l2", "l3"} {
			if err := os.Link(f.upper("big"), f.upper(n)); err != nil {
				t.Fatal(err)
			}
		}
		before := diskUse(t, f.host)
		res, rules := f.runMax(t, 150<<10)
		if res.Files != 2 || res.RefusedTotal != 2 || rules[0] != writeback.RuleMaxWrite || !strings.Contains(res.Refused[0].Reason, "max_write") {
			t.Errorf("result = %+v, rules %v: want two names written and two refused for max_write", res, rules)
		}
		if grew := diskUse(t, f.host) - before; grew > 150<<10+2*blk {
			t.Errorf("the host grant grew by %d bytes, max_write 150 KiB", grew)
		}
	})
	t.Run("folders-take-blocks", func(t *testing.T) {
		f := newFixture(t)
		for i := range 30 {
			if err := os.Mkdir(f.upper("d"+strconv.Itoa(i)), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		before := diskUse(t, f.host)
		res, _ := f.runMax(t, 40<<10)
		if grew := diskUse(t, f.host) - before; grew > 40<<10+2*blk {
			t.Errorf("30 empty folders grew the host grant by %d bytes, max_write 40 KiB (result %+v)", grew, res)
		}
		if res.Dirs+res.RefusedTotal != 30 || res.RefusedTotal == 0 {
			t.Errorf("result = %+v: want every folder written or refused", res)
		}
	})
	t.Run("zero-writes-no-data-and-still-removes", func(t *testing.T) {
		airtest.RequireRoot(t) // the whiteout
		f := newFixture(t)
		write(t, filepath.Join(f.host, "gone"), "old")
		whiteout(t, f.upper("gone"))
		write(t, f.upper("data"), "x")
		res, _ := f.runMax(t, 0)
		if _, err := os.Lstat(filepath.Join(f.host, "data")); err == nil || res.RefusedTotal != 1 || res.Removed != 1 {
			t.Errorf("result = %+v (data: %v): want data refused and gone removed", res, err)
		}
	})
}

func TestWriteBackRefusesUnprintableNames(t *testing.T) {
	f := newFixture(t)
	bad := []string{"new\nline", "esc\x1b[31m", "del\x7f", "bad\xffutf8", "c1\u009b", "bidi\u202etxt.exe", "zw\u200bsp", "tab\t"}
	for _, n := range bad {
		write(t, f.upper(n), "x")
	}
	if err := os.Mkdir(f.upper("dir\x1b]0;t\x07"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("target\x1b[2J", f.upper("link")); err != nil {
		t.Fatal(err)
	}
	write(t, f.upper("ok-ünïcødé ✓.txt"), "fine")
	res := f.run(t, nil)
	ents, _ := os.ReadDir(f.host)
	if len(ents) != 1 || ents[0].Name() != "ok-ünïcødé ✓.txt" {
		t.Errorf("host holds %v, want only the printable name", ents)
	}
	if res.RefusedTotal != len(bad)+2 {
		t.Errorf("result = %+v, want %d refusals", res, len(bad)+2)
	}
	for _, e := range res.Refused {
		airtest.CheckNoControls(t, e.Path)
	}
	// Removing a host entry with such a name writes no name: it is done.
	if os.Geteuid() == 0 {
		write(t, filepath.Join(f.host, "old\x1b"), "x")
		whiteout(t, f.upper("old\x1b"))
		f.run(t, nil)
		if _, err := os.Lstat(filepath.Join(f.host, "old\x1b")); err == nil {
			t.Error("a deletion inside of a host entry with an unprintable name was not copied back")
		}
	}
}

// capEff returns the CapEff line of the calling thread.
func capEff(t *testing.T) string {
	b, err := os.ReadFile("/proc/thread-self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "CapEff:") {
			return l
		}
	}
	return ""
}

func TestWriteBackAsOwner(t *testing.T) {
	airtest.RequireRoot(t) // a grant of another user than the supervisor
	f := newFixture(t)
	locked := filepath.Join(f.host, "locked")
	write(t, filepath.Join(locked, "keep"), "root's\n")
	write(t, filepath.Join(f.host, "replaced"), "root's\n")
	write(t, filepath.Join(f.host, "opq/old"), "old\n")
	const owner = 4242
	for _, rel := range []string{"", "opq", "opq/old"} {
		if err := os.Chown(filepath.Join(f.host, rel), owner, owner); err != nil {
			t.Fatal(err)
		}
	}
	// An opaque folder: the copy back reads the stage's xattrs as the owner too.
	write(t, f.upper("opq/new"), "new\n")
	if err := unix.Setxattr(f.upper("opq"), "user.overlay.opaque", []byte("y"), 0); err != nil {
		t.Skipf("user xattrs unsupported on the test filesystem: %v", err)
	}
	if err := os.Chmod(f.upper("opq"), 0o700); err != nil {
		t.Fatal(err)
	}
	write(t, f.upper("new.txt"), "new\n")
	write(t, f.upper("sub/f"), "deep\n")
	write(t, f.upper("replaced"), "the owner's\n")
	write(t, f.upper("locked/planted"), "planted\n")
	write(t, f.upper("locked/keep"), "changed\n")
	if err := os.Chmod(f.upper("sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(f.upper("sub/f"), 0); err != nil { // the stage's modes are the sandbox's
		t.Fatal(err)
	}
	want := capEff(t)
	res := f.run(t, nil)
	for _, rel := range []string{"new.txt", "sub", "sub/f", "replaced", "opq/new"} {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(f.host, rel), &st); err != nil {
			t.Fatalf("%s did not reach the host: %v (%+v)", rel, err, res)
		}
		if st.Uid != owner || st.Gid != owner {
			t.Errorf("%s belongs to %d:%d, want the grant's owner %d", rel, st.Uid, st.Gid, owner)
		}
	}
	if _, err := os.Lstat(filepath.Join(f.host, "opq/old")); err == nil || read(t, filepath.Join(f.host, "opq/new")) != "new\n" {
		t.Errorf("the opaque folder was not copied back as made anew: old %v, new %q", err, read(t, filepath.Join(f.host, "opq/new")))
	}
	if _, err := os.Lstat(filepath.Join(locked, "planted")); err == nil {
		t.Error("the copy back wrote into root's folder inside the grant, where the grant's owner may not")
	}
	if got := read(t, filepath.Join(locked, "keep")); got != "root's\n" {
		t.Errorf("root's file in root's folder = %q", got)
	}
	if res.FailedTotal != 2 || res.Complete {
		t.Errorf("result = %+v, want the two writes into root's folder failed", res)
	}
	// The owner's credentials ended with the copy back's thread: no
	// thread of the process kept them.
	for range 64 {
		done := make(chan string)
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			done <- capEff(t)
		}()
		if got := <-done; got != want {
			t.Fatalf("a thread of the test has %q after the copy back, want %q", got, want)
		}
	}
}

func TestWriteBackSpecialFilesAndMetadata(t *testing.T) {
	f := newFixture(t)
	if err := unix.Mkfifo(f.upper("fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", f.upper("sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	refusals := 2
	if os.Geteuid() == 0 {
		for name, dev := range map[string]uint32{"null": unix.S_IFCHR, "disk": unix.S_IFBLK} {
			if err := unix.Mknod(f.upper(name), dev|0o666, int(unix.Mkdev(1, 3))); err != nil {
				t.Fatal(err)
			}
			refusals++
		}
	}
	write(t, f.upper("tool"), "#!/bin/sh\n")
	if err := syscall.Chmod(f.upper("tool"), 0o6755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(f.upper("tool"), "user.note", []byte("x"), 0); err != nil {
		t.Skipf("user xattrs unsupported on the test filesystem: %v", err)
	}
	if os.Geteuid() == 0 {
		// A file capability: cap_sys_admin permitted and effective.
		capv := make([]byte, 20)
		binary.LittleEndian.PutUint32(capv, 0x02000001)
		binary.LittleEndian.PutUint32(capv[4:], 1<<unix.CAP_SYS_ADMIN)
		if err := unix.Setxattr(f.upper("tool"), "security.capability", capv, 0); err != nil {
			t.Fatal(err)
		}
	}
	res := f.run(t, nil)
	if res.RefusedTotal != refusals || res.Files != 1 {
		t.Errorf("result = %+v, want %d refusals and the tool written", res, refusals)
	}
	for _, n := range []string{"fifo", "sock", "null", "disk"} {
		if _, err := os.Lstat(filepath.Join(f.host, n)); err == nil {
			t.Errorf("%s reached the host", n)
		}
	}
	tool := filepath.Join(f.host, "tool")
	if fi, err := os.Stat(tool); err != nil || fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 || fi.Mode().Perm() != 0o755 {
		t.Errorf("host tool = %v, %v: want 0755 without setuid and setgid", fi, err)
	}
	buf := make([]byte, 256)
	for _, attr := range []string{"user.note", "security.capability"} {
		if n, err := unix.Lgetxattr(tool, attr, buf); err == nil {
			t.Errorf("host tool has %s = %q: xattrs must stay on the stage", attr, buf[:n])
		}
	}
}

func TestWriteBackDeepAndWide(t *testing.T) {
	f := newFixture(t)
	deep := f.upper("")
	for range 300 {
		deep = filepath.Join(deep, "d")
	}
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 600 {
		if err := os.WriteFile(f.upper("w"+strconv.Itoa(i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	res := f.run(t, nil)
	if res.Complete || res.FailedTotal != 1 || !strings.Contains(res.Failed[0].Reason, "deep") {
		t.Errorf("result = failed %v, complete %v: want the one folder past the depth bound failed", res.Failed, res.Complete)
	}
	if res.Files != 600 || res.Dirs != 257 {
		t.Errorf("files %d, dirs %d: want 600 and 257", res.Files, res.Dirs)
	}
}

func TestWriteBackRenamesOverFolders(t *testing.T) {
	f := newFixture(t)
	write(t, filepath.Join(f.host, "was-dir/inner"), "old")
	write(t, filepath.Join(f.host, "was-file"), "old")
	write(t, filepath.Join(f.host, "opaque/old"), "old")
	write(t, f.upper("was-dir"), "now a file")
	write(t, f.upper("was-file/inner"), "now a folder")
	write(t, f.upper("opaque/new"), "new")
	if err := unix.Setxattr(f.upper("opaque"), "user.overlay.opaque", []byte("y"), 0); err != nil {
		t.Skipf("user xattrs unsupported on the test filesystem: %v", err)
	}
	// The grant's root itself marked opaque: overlayfs never makes it so,
	// and the copy back never empties the grant for it.
	write(t, filepath.Join(f.host, "kept"), "kept")
	if err := unix.Setxattr(f.upper(""), "user.overlay.opaque", []byte("y"), 0); err != nil {
		t.Fatal(err)
	}
	res := f.run(t, nil)
	for rel, want := range map[string]string{"was-dir": "now a file", "was-file/inner": "now a folder", "opaque/new": "new", "kept": "kept"} {
		if got := read(t, filepath.Join(f.host, rel)); got != want {
			t.Errorf("host %s = %q, want %q (%+v)", rel, got, want, res)
		}
	}
	if _, err := os.Lstat(filepath.Join(f.host, "opaque/old")); err == nil {
		t.Error("opaque/old survived: the folder was made anew inside")
	}
}

// TestWriteBackReadOnlyFolders: a read-only folder of the owner's (Go's
// module cache keeps them so) that the sandbox made writable, or deleted,
// is written or removed as the owner would: by making it writable first.
func TestWriteBackReadOnlyFolders(t *testing.T) {
	airtest.RequireRoot(t) // the whiteout
	f := newFixture(t)
	write(t, filepath.Join(f.host, "ro/old"), "old")
	write(t, filepath.Join(f.host, "gone/inner/file"), "old")
	for _, rel := range []string{"ro", "gone/inner", "gone"} {
		if err := os.Chmod(filepath.Join(f.host, rel), 0o555); err != nil {
			t.Fatal(err)
		}
	}
	write(t, f.upper("ro/new"), "new")
	whiteout(t, f.upper("gone"))
	res := f.run(t, nil)
	if got := read(t, filepath.Join(f.host, "ro/new")); got != "new" || !res.Complete {
		t.Errorf("ro/new = %q, result %+v", got, res)
	}
	if _, err := os.Lstat(filepath.Join(f.host, "gone")); err == nil {
		t.Errorf("the read-only folder deleted inside is still on the host (%+v)", res)
	}
}
