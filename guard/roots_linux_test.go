package guard_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/guard"
	"github.com/airlock-sandbox/airlock/policy"
)

func TestHeldRootsSurviveAncestorSwap(t *testing.T) {
	base := t.TempDir()
	data := filepath.Join(base, "ws", "a", "data")
	mustDo(t, os.MkdirAll(data, 0o755))
	mustDo(t, os.WriteFile(filepath.Join(data, "f.txt"), []byte("granted"), 0o644))
	host := filepath.Join(base, "host")
	mustDo(t, os.MkdirAll(filepath.Join(host, "data"), 0o755))
	mustDo(t, os.WriteFile(filepath.Join(host, "data", "f.txt"), []byte("HOST"), 0o644))
	p, err := policy.New(policy.Spec{FSRead: []string{data}})
	mustDo(t, err)
	g, err := guard.New(guard.Config{Policy: p})
	mustDo(t, err)
	defer g.Close()
	// The grant's parent is renamed and a symlink to a host folder put in
	// its place, after the guard opened the grant.
	mustDo(t, os.Rename(filepath.Join(base, "ws", "a"), filepath.Join(base, "ws", "a.orig")))
	mustDo(t, os.Symlink(host, filepath.Join(base, "ws", "a")))
	got, err := g.Read(filepath.Join(data, "f.txt"))
	if err != nil || string(got) != "granted" {
		t.Fatalf("Read through the swapped ancestor = %q, %v; want the granted file", got, err)
	}
}

func TestNewRefusesSymlinkedGrant(t *testing.T) {
	base := t.TempDir()
	mustDo(t, os.MkdirAll(filepath.Join(base, "real"), 0o755))
	mustDo(t, os.Symlink(filepath.Join(base, "real"), filepath.Join(base, "link")))
	p, err := policy.New(policy.Spec{FSRead: []string{filepath.Join(base, "link")}})
	mustDo(t, err)
	if g, err := guard.New(guard.Config{Policy: p}); err == nil {
		g.Close()
		t.Fatal("New opened a grant whose path is a symlink")
	}
}

func TestSingleFileGrants(t *testing.T) {
	base := t.TempDir()
	ro, rw := filepath.Join(base, "in.csv"), filepath.Join(base, "out.json")
	mustDo(t, os.WriteFile(ro, []byte("a,b\n"), 0o644))
	mustDo(t, os.WriteFile(rw, []byte("{}"), 0o644))
	mustDo(t, os.WriteFile(filepath.Join(base, "beside.txt"), []byte("not granted"), 0o644))
	p, err := policy.New(policy.Spec{FSRead: []string{ro}, FSWrite: []string{rw}})
	mustDo(t, err)
	g, err := guard.New(guard.Config{Policy: p})
	mustDo(t, err)
	if got, err := g.Read(ro); err != nil || string(got) != "a,b\n" {
		t.Fatalf("Read(file grant) = %q, %v", got, err)
	}
	mustDo(t, g.Write(rw, []byte(`{"ok":true}`)))
	if b, _ := os.ReadFile(rw); string(b) != `{"ok":true}` {
		t.Fatalf("file grant after Write = %q", b)
	}
	if err := g.Write(ro, []byte("x")); err == nil {
		t.Error("Write to a read-only file grant succeeded")
	}
	if _, err := g.Read(filepath.Join(base, "beside.txt")); err == nil {
		t.Error("Read of a file beside a file grant succeeded")
	}
	if _, err := g.List(ro); !errors.Is(err, unix.ENOTDIR) {
		t.Errorf("List(file grant) = %v, want ENOTDIR", err)
	}
	// The file is replaced on the host: the grant is the file opened first.
	mustDo(t, os.Rename(ro, ro+".old"))
	mustDo(t, os.WriteFile(ro, []byte("replaced"), 0o644))
	if got, err := g.Read(ro); err != nil || string(got) != "a,b\n" {
		t.Fatalf("Read after the host replaced the file = %q, %v; want the granted file", got, err)
	}
	mustDo(t, g.Close())
	if _, err := g.Read(ro); err == nil {
		t.Error("Read after Close succeeded")
	}
}
