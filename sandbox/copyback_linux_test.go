package sandbox_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// The copy back (internal/writeback) puts on the host disk what the
// sandbox staged: these tests try to make it put more than max_write
// there, names no terminal shows as they are, or files where the grant's
// owner could not write them.

const copyBackMax = 16 << 20

// smallDisk returns an empty folder on a tmpfs of size bytes that the test
// mounts, so that a copy back that writes far more than it should fills
// the tmpfs and fails, not the host's disk.
func smallDisk(t *testing.T, size int64) string {
	t.Helper()
	airtest.RequireRoot(t) // mounting the bounded tmpfs the grant lives on
	dir := filepath.Join(t.TempDir(), "disk")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size="+strconv.FormatInt(size, 10)+",mode=0755"); err != nil {
		t.Fatalf("mount a tmpfs for the grant: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) }) // the test's own mount
	out := filepath.Join(dir, "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	return out
}

// allocated returns the bytes allocated on disk under dir (st_blocks),
// folders and links included.
func allocated(t *testing.T, dir string) int64 {
	t.Helper()
	var total int64
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		total += fi.Sys().(*syscall.Stat_t).Blocks * 512
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return total
}

// sparseScript makes n files of 1 GiB apparent size holding 150 KiB of
// data at the start and "tail" 512 MiB in.
func sparseScript(dir string, n int) string {
	return `
import os
for i in range(` + strconv.Itoa(n) + `):
    with open(os.path.join("` + dir + `", "sparse%d" % i), "wb") as f:
        f.write(b"x" * 150000)
        f.seek(512 << 20)
        f.write(b"tail")
        f.truncate(1 << 30)
print("ok")`
}

// checkSparse checks what the host got for sparse file p.
func checkSparse(t *testing.T, p string) {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatalf("%s did not reach the host: %v", p, err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	if fi.Size() != 1<<30 {
		t.Errorf("%s is %d bytes, want 1 GiB (its holes kept)", p, fi.Size())
	}
	head, tail := make([]byte, 150000), make([]byte, 4)
	if _, err := f.ReadAt(head, 0); err != nil || strings.Trim(string(head), "x") != "" {
		t.Errorf("%s: the data at its start did not survive: %v", p, err)
	}
	if _, err := f.ReadAt(tail, 512<<20); err != nil || string(tail) != "tail" {
		t.Errorf("%s: the data 512 MiB in = %q, %v", p, tail, err)
	}
}

func TestAttackSparseFileCopyBack(t *testing.T) {
	requireSandbox(t)
	spec := func(out string) policy.Spec {
		return policy.Spec{FSWrite: []string{out}, Budget: budget.Limits{Write: copyBackMax, Memory: 256 << 20}}
	}
	t.Run("run", func(t *testing.T) {
		out := smallDisk(t, 4*copyBackMax)
		rep := py(t, spec(out), sparseScript(out, 1))
		wantExit(t, rep, 0)
		if got := allocated(t, out); got > copyBackMax+4096 {
			t.Fatalf("the copy back put %d bytes on the host disk for a run of max_write %d (writes %+v)", got, copyBackMax, rep.Writes)
		}
		if rep.Writes == nil || !rep.Writes.Complete || rep.Writes.Files != 1 {
			t.Fatalf("writes = %+v, want the sparse file written back, holes kept", rep.Writes)
		}
		checkSparse(t, filepath.Join(out, "sparse0"))
	})
	t.Run("session", func(t *testing.T) {
		out := smallDisk(t, 4*copyBackMax)
		sp := spec(out)
		sp.AllowedTools = []string{"python3"}
		s := newSession(t, sp)
		wantExit(t, execIn(t, s, sandbox.ExecRequest{Args: []string{"python3", "-c", sparseScript(out, 1)}}), 0)
		s.Close()
		if w := s.Writes(); w == nil || !w.Complete || w.Files != 1 {
			t.Fatalf("writes = %+v, want the sparse file written back, holes kept", w)
		}
		if got := allocated(t, out); got > copyBackMax+4096 {
			t.Fatalf("the copy back put %d bytes on the host disk for a session of max_write %d (writes %+v)", got, copyBackMax, s.Writes())
		}
		checkSparse(t, filepath.Join(out, "sparse0"))
	})
	t.Run("many", func(t *testing.T) {
		out := smallDisk(t, 4*copyBackMax)
		rep := py(t, spec(out), sparseScript(out, 40))
		wantExit(t, rep, 0)
		if got := allocated(t, out); got > copyBackMax+4096 {
			t.Fatalf("the copy back put %d bytes on the host disk for a run of max_write %d (writes %+v)", got, copyBackMax, rep.Writes)
		}
		if rep.Writes == nil || !rep.Writes.Complete || rep.Writes.Files != 40 {
			t.Fatalf("writes = %+v, want the 40 sparse files written back, holes kept", rep.Writes)
		}
		for _, i := range []int{0, 39} {
			checkSparse(t, filepath.Join(out, "sparse"+strconv.Itoa(i)))
		}
	})
}

// TestAttackCopyBackAmplification: what the stage holds once may land on
// the host several times (hard links), or take more room there than on
// the stage (data allocated past the end of a file does not).
func TestAttackCopyBackAmplification(t *testing.T) {
	requireSandbox(t)
	t.Run("hard-links", func(t *testing.T) {
		out := smallDisk(t, 4*copyBackMax)
		rep := py(t, policy.Spec{FSWrite: []string{out}, Budget: budget.Limits{Write: copyBackMax, Memory: 256 << 20}}, `
import os
p = "`+out+`/big"
open(p, "wb").write(os.urandom(6 << 20))
for i in range(4):
    os.link(p, p + str(i))
print("ok")`)
		wantExit(t, rep, 0)
		if got := allocated(t, out); got > copyBackMax+4096 {
			t.Fatalf("5 names of one 6 MiB file put %d bytes on the host disk, max_write %d (writes %+v)", got, copyBackMax, rep.Writes)
		}
		if rep.Writes == nil || rep.Writes.Files != 2 || rep.Writes.RefusedTotal != 3 || !strings.Contains(rep.Writes.Refused[0].Reason, "max_write") {
			t.Fatalf("writes = %+v, want two copies written and three refused for max_write", rep.Writes)
		}
		denied := false
		for _, d := range rep.Denials {
			denied = denied || d.Op == "write back" && d.Rule == "max_write"
		}
		if !denied {
			t.Errorf("no write-back denial with rule max_write in the report: %+v", rep.Denials)
		}
	})
	t.Run("allocated-past-the-end", func(t *testing.T) {
		// 4 MiB of data, 10 MiB more allocated past the end: the stage
		// holds 14 MiB, the host gets the 4 MiB the file holds.
		out := smallDisk(t, 4*copyBackMax)
		rep := py(t, policy.Spec{FSWrite: []string{out}, Budget: budget.Limits{Write: copyBackMax, Memory: 256 << 20}}, `
import os
fd = os.open("`+out+`/pre", os.O_WRONLY | os.O_CREAT)
os.write(fd, b"y" * (4 << 20))
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
print(libc.fallocate(fd, 1, 4 << 20, 10 << 20), os.fstat(fd).st_blocks * 512)`)
		wantExit(t, rep, 0)
		fi, err := os.Stat(filepath.Join(out, "pre"))
		if err != nil || fi.Size() != 4<<20 {
			t.Fatalf("host pre = %v, %v (stdout %q, writes %+v)", fi, err, rep.Stdout, rep.Writes)
		}
		if got := fi.Sys().(*syscall.Stat_t).Blocks * 512; got > 4<<20+4096 {
			t.Errorf("host pre takes %d bytes on disk, want its 4 MiB", got)
		}
	})
}

// TestAttackControlCharacterNames: names that a terminal would act on
// never reach the host; each is refused, named escaped.
func TestAttackControlCharacterNames(t *testing.T) {
	requireSandbox(t)
	tr := newTree(t)
	rep := py(t, policy.Spec{FSWrite: []string{tr.out}}, `
import os
out = b"`+tr.out+`"
for n in [b"new\nline", b"esc\x1b[31mred", b"del\x7f", b"bad\xff\xfeutf8", b"c1\xc2\x9bcsi", b"bidi\xe2\x80\xaeexe.txt", b"tab\there"]:
    open(out + b"/" + n, "w").write("x")
os.mkdir(out + b"/dir\x1b]0;title\x07")
open(out + b"/dir\x1b]0;title\x07/inner", "w").write("x")
os.symlink(b"target\x1b[2J", out + b"/link")
open(out + b"/plain.txt", "w").write("ok")
print("ok")`)
	wantExit(t, rep, 0)
	ents, err := os.ReadDir(tr.out)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name() != "plain.txt" {
			t.Errorf("%q reached the host", e.Name())
		}
	}
	if rep.Writes == nil || rep.Writes.RefusedTotal != 9 || rep.Writes.Files != 1 {
		t.Fatalf("writes = %+v, want 9 refusals and plain.txt written", rep.Writes)
	}
	for _, e := range rep.Writes.Refused {
		for _, r := range e.Path {
			if r < 0x20 || r == 0x7f || r == 0x9b || r == 0x202e || r == 0xfffd {
				t.Errorf("refusal path %q holds %U: want it escaped", e.Path, r)
			}
		}
	}
}

// TestAttackCopyBackAsOwner: the copy back writes as the grant folder's
// owner, so it writes nothing the owner could not, and what it writes is
// the owner's.
func TestAttackCopyBackAsOwner(t *testing.T) {
	requireSandbox(t)
	airtest.RequireRoot(t) // a grant owned by another user than the supervisor
	tr := newTree(t)
	rootDir := filepath.Join(tr.out, "rootdir")
	if err := os.Mkdir(rootDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rootDir, "keep"), []byte("root's\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const owner = 4242
	if err := os.Chown(tr.out, owner, owner); err != nil {
		t.Fatal(err)
	}
	rep := sh(t, policy.Spec{FSWrite: []string{tr.out}}, `cd `+tr.out+` && echo new > new.txt && mkdir sub && echo deep > sub/f &&
echo planted > rootdir/planted; echo changed > rootdir/keep; true`, "mkdir")
	wantExit(t, rep, 0)
	for _, rel := range []string{"new.txt", "sub", "sub/f"} {
		fi, err := os.Lstat(filepath.Join(tr.out, rel))
		if err != nil {
			t.Fatalf("%s did not reach the host: %v (writes %+v)", rel, err, rep.Writes)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != owner || st.Gid != owner {
			t.Errorf("%s belongs to %d:%d, want the grant's owner %d:%d", rel, st.Uid, st.Gid, owner, owner)
		}
	}
	if _, err := os.Lstat(filepath.Join(rootDir, "planted")); err == nil {
		t.Errorf("the copy back wrote into root's folder, where the grant's owner may not write (writes %+v)", rep.Writes)
	}
	if b, _ := os.ReadFile(filepath.Join(rootDir, "keep")); string(b) != "root's\n" {
		t.Errorf("the copy back replaced root's file in root's folder: %q", b)
	}
	if rep.Writes == nil || rep.Writes.Complete || rep.Writes.FailedTotal != 2 {
		t.Errorf("writes = %+v, want the two writes into root's folder listed as failed", rep.Writes)
	}
}
