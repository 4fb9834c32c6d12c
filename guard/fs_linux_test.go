package guard_test

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/guard"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
)

// fixture is a tree with a granted root and things an attacker plants in it:
//
//	base/secret.txt          outside every grant
//	base/hardsecret.txt      outside, hard-linked as work/hard
//	base/outside/o.txt       outside, reached through work/outdir
//	base/workshop/x.txt      shares a prefix with work
//	base/work/hello.txt      granted
//	base/work/sub/f.txt      granted
//	base/work/empty/         granted, empty
//	base/work/inside-link -> hello.txt
//	base/work/secret-link -> base/secret.txt (absolute)
//	base/work/secret-rel  -> ../secret.txt
//	base/work/outdir      -> base/outside (absolute)
//	base/work/outrel      -> ../outside
//	base/work/loop        -> loop
//	base/work/dangle      -> ../planted.txt (does not exist)
//	base/work/fifo           a named pipe
type fixture struct {
	base, work, secret, hardsecret, outside string
}

const (
	secretData = "top secret"
	helloData  = "hello"
)

func newFixture(t testing.TB) fixture {
	t.Helper()
	base := t.TempDir()
	f := fixture{
		base:       base,
		work:       filepath.Join(base, "work"),
		secret:     filepath.Join(base, "secret.txt"),
		hardsecret: filepath.Join(base, "hardsecret.txt"),
		outside:    filepath.Join(base, "outside"),
	}
	for _, d := range []string{f.work, f.outside, f.work + "/sub", f.work + "/empty", base + "/workshop"} {
		mustDo(t, os.MkdirAll(d, 0o755))
	}
	for name, data := range map[string]string{
		f.secret:                 secretData,
		f.hardsecret:             secretData,
		f.outside + "/o.txt":     secretData,
		base + "/workshop/x.txt": secretData,
		f.work + "/hello.txt":    helloData,
		f.work + "/sub/f.txt":    "f",
	} {
		mustDo(t, os.WriteFile(name, []byte(data), 0o644))
	}
	for link, target := range map[string]string{
		"inside-link": "hello.txt",
		"secret-link": f.secret,
		"secret-rel":  "../secret.txt",
		"outdir":      f.outside,
		"outrel":      "../outside",
		"loop":        "loop",
		"dangle":      "../planted.txt",
	} {
		mustDo(t, os.Symlink(target, filepath.Join(f.work, link)))
	}
	mustDo(t, os.Link(f.hardsecret, f.work+"/hard"))
	mustDo(t, unix.Mkfifo(f.work+"/fifo", 0o644))
	return f
}

func mustDo(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// requireUnchanged fails t unless the file at path still holds want.
func requireUnchanged(t testing.TB, path, want string) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil || string(got) != want {
		t.Errorf("%s = %q, %v; want it unchanged (%q)", path, got, err, want)
	}
}

func requireAbsent(t testing.TB, path string) {
	t.Helper()
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s exists (Lstat error %v), want it never created", path, err)
	}
}

// outcome is what an operation must end in.
type outcome int

const (
	ok       outcome = iota
	denied           // *policy.DenyError
	failed           // admitted, then an ordinary error (wantErrno when set)
	notExist         // admitted, file missing
)

func checkOutcome(t testing.TB, what string, err error, want outcome, wantErrno error) {
	t.Helper()
	switch want {
	case ok:
		if err != nil {
			t.Fatalf("%s = %v, want nil", what, err)
		}
	case denied:
		var de *policy.DenyError
		if !errors.As(err, &de) || !errors.Is(err, policy.ErrDenied) {
			t.Fatalf("%s = %v (%T), want *policy.DenyError", what, err, err)
		}
	case failed:
		if err == nil || errors.Is(err, policy.ErrDenied) {
			t.Fatalf("%s = %v, want a non-policy error", what, err)
		}
		if wantErrno != nil && !errors.Is(err, wantErrno) {
			t.Fatalf("%s = %v, want errors.Is %v", what, err, wantErrno)
		}
	case notExist:
		if !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s = %v, want fs.ErrNotExist", what, err)
		}
	}
}

func TestRead(t *testing.T) {
	f := newFixture(t)
	tests := []struct {
		name, path string
		want       outcome
		wantData   string
		wantErrno  error
	}{
		{"file", f.work + "/hello.txt", ok, helloData, nil},
		{"relative-to-cwd", "sub/f.txt", ok, "f", nil},
		{"symlink-inside", f.work + "/inside-link", ok, helloData, nil},
		{"prefix-not-child", f.base + "/workshop/x.txt", denied, "", nil},
		{"dotdot-escape", f.work + "/../secret.txt", denied, "", nil},
		{"relative-dotdot-escape", "../secret.txt", denied, "", nil},
		{"symlink-absolute-outside", f.work + "/secret-link", denied, "", nil},
		{"symlink-relative-outside", f.work + "/secret-rel", denied, "", nil},
		{"symlinked-dir-outside", f.work + "/outdir/o.txt", denied, "", nil},
		{"relative-symlinked-dir-outside", f.work + "/outrel/o.txt", denied, "", nil},
		{"hardlink-to-outside", f.work + "/hard", denied, "", nil},
		{"symlink-loop", f.work + "/loop", denied, "", nil},
		{"fifo", f.work + "/fifo", denied, "", nil},
		{"directory", f.work + "/sub", failed, "", unix.EISDIR},
		{"missing", f.work + "/nope", notExist, "", nil},
		{"empty-path", "", denied, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newGuard(t, policy.Spec{FSRead: []string{f.work}}, guard.Config{Cwd: f.work})
			got, err := g.Read(tt.path)
			checkOutcome(t, "Read("+tt.path+")", err, tt.want, tt.wantErrno)
			if string(got) != tt.wantData {
				t.Errorf("Read(%q) = %q, want %q", tt.path, got, tt.wantData)
			}
		})
	}
}

func TestWrite(t *testing.T) {
	tests := []struct {
		name      string
		path      func(f fixture) string
		want      outcome
		wantErrno error
		check     func(t *testing.T, f fixture)
	}{
		{"new-file-and-parents", func(f fixture) string { return f.work + "/a/b/c.txt" }, ok, nil, func(t *testing.T, f fixture) {
			requireUnchanged(t, f.work+"/a/b/c.txt", "data")
			st, err := os.Stat(f.work + "/a/b/c.txt")
			if err != nil || st.Mode().Perm()&^0o644 != 0 || !st.Mode().IsRegular() {
				t.Errorf("new file mode = %v, %v; want a regular file with at most 0644", st.Mode(), err)
			}
		}},
		{"truncate-existing", func(f fixture) string { return f.work + "/hello.txt" }, ok, nil, func(t *testing.T, f fixture) {
			requireUnchanged(t, f.work+"/hello.txt", "data")
		}},
		{"relative-to-cwd", func(f fixture) string { return "sub/new.txt" }, ok, nil, func(t *testing.T, f fixture) {
			requireUnchanged(t, f.work+"/sub/new.txt", "data")
		}},
		{"symlink-to-outside-file", func(f fixture) string { return f.work + "/secret-link" }, denied, nil, func(t *testing.T, f fixture) {
			requireUnchanged(t, f.secret, secretData)
		}},
		{"relative-symlink-to-outside-file", func(f fixture) string { return f.work + "/secret-rel" }, denied, nil, func(t *testing.T, f fixture) {
			requireUnchanged(t, f.secret, secretData)
		}},
		{"symlink-inside", func(f fixture) string { return f.work + "/inside-link" }, denied, nil, func(t *testing.T, f fixture) {
			requireUnchanged(t, f.work+"/hello.txt", helloData)
		}},
		{"symlinked-dir-outside", func(f fixture) string { return f.work + "/outdir/new/f.txt" }, denied, nil, func(t *testing.T, f fixture) {
			requireAbsent(t, f.outside+"/new")
		}},
		{"relative-symlinked-dir-outside", func(f fixture) string { return f.work + "/outrel/new/f.txt" }, denied, nil, func(t *testing.T, f fixture) {
			requireAbsent(t, f.outside+"/new")
		}},
		{"symlinked-dir-outside-existing-file", func(f fixture) string { return f.work + "/outdir/o.txt" }, denied, nil, func(t *testing.T, f fixture) {
			requireUnchanged(t, f.outside+"/o.txt", secretData)
		}},
		{"dangling-symlink-to-outside", func(f fixture) string { return f.work + "/dangle" }, denied, nil, func(t *testing.T, f fixture) {
			requireAbsent(t, f.base+"/planted.txt")
		}},
		{"hardlink-to-outside", func(f fixture) string { return f.work + "/hard" }, denied, nil, func(t *testing.T, f fixture) {
			requireUnchanged(t, f.hardsecret, secretData)
		}},
		{"prefix-not-child", func(f fixture) string { return f.base + "/workshop/a/b.txt" }, denied, nil, func(t *testing.T, f fixture) {
			requireAbsent(t, f.base+"/workshop/a")
		}},
		{"dotdot-escape", func(f fixture) string { return f.work + "/../outside/a/x.txt" }, denied, nil, func(t *testing.T, f fixture) {
			requireAbsent(t, f.outside+"/a")
		}},
		{"fifo", func(f fixture) string { return f.work + "/fifo" }, denied, nil, nil},
		{"grant-root", func(f fixture) string { return f.work }, failed, unix.EISDIR, nil},
		{"parent-is-file", func(f fixture) string { return f.work + "/hello.txt/x" }, failed, unix.ENOTDIR, func(t *testing.T, f fixture) {
			requireUnchanged(t, f.work+"/hello.txt", helloData)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			g := newGuard(t, policy.Spec{FSWrite: []string{f.work}}, guard.Config{Cwd: f.work})
			p := tt.path(f)
			checkOutcome(t, "Write("+p+")", g.Write(p, []byte("data")), tt.want, tt.wantErrno)
			if tt.check != nil {
				tt.check(t, f)
			}
		})
	}
}

func TestRemove(t *testing.T) {
	tests := []struct {
		name      string
		path      string // relative to work
		want      outcome
		wantErrno error
		gone      string // relative to base, must not exist afterwards
		kept      string // relative to base, must still exist
	}{
		{"file", "hello.txt", ok, nil, "work/hello.txt", ""},
		{"empty-dir", "empty", ok, nil, "work/empty", ""},
		{"symlink-not-target", "secret-link", ok, nil, "work/secret-link", "secret.txt"},
		{"dir-symlink-not-target", "outdir", ok, nil, "work/outdir", "outside/o.txt"},
		{"nonempty-dir", "sub", failed, unix.ENOTEMPTY, "", "work/sub/f.txt"},
		{"missing", "nope", notExist, nil, "", ""},
		{"through-symlinked-dir", "outdir/o.txt", denied, nil, "", "outside/o.txt"},
		{"dotdot-escape", "../secret.txt", denied, nil, "", "secret.txt"},
		{"prefix-not-child", "../workshop/x.txt", denied, nil, "", "workshop/x.txt"},
		{"grant-root", ".", failed, nil, "", "work/hello.txt"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			g := newGuard(t, policy.Spec{FSWrite: []string{f.work}}, guard.Config{})
			p := f.work + "/" + tt.path
			checkOutcome(t, "Remove("+p+")", g.Remove(p), tt.want, tt.wantErrno)
			if tt.gone != "" {
				requireAbsent(t, filepath.Join(f.base, tt.gone))
			}
			if tt.kept != "" {
				if _, err := os.Lstat(filepath.Join(f.base, tt.kept)); err != nil {
					t.Errorf("%s: %v, want it kept", tt.kept, err)
				}
			}
		})
	}
}

func TestList(t *testing.T) {
	f := newFixture(t)
	g := newGuard(t, policy.Spec{FSRead: []string{f.work}}, guard.Config{})
	entries, err := g.List(f.work)
	if err != nil {
		t.Fatalf("List(%q) = %v", f.work, err)
	}
	var names []string
	byName := map[string]guard.Entry{}
	for _, e := range entries {
		names = append(names, e.Name)
		byName[e.Name] = e
	}
	want := []string{"dangle", "empty", "fifo", "hard", "hello.txt", "inside-link", "loop", "outdir", "outrel", "secret-link", "secret-rel", "sub"}
	if !slices.Equal(names, want) {
		t.Errorf("List(%q) names = %q, want %q", f.work, names, want)
	}
	if e := byName["sub"]; !e.Dir || !e.Mode.IsDir() {
		t.Errorf("sub = %+v, want a directory", e)
	}
	if e := byName["outdir"]; e.Dir || e.Mode&fs.ModeSymlink == 0 {
		t.Errorf("outdir = %+v, want a symlink, not followed", e)
	}
	if e := byName["hello.txt"]; e.Dir || e.Size != int64(len(helloData)) || !e.Mode.IsRegular() {
		t.Errorf("hello.txt = %+v, want a regular file of %d bytes", e, len(helloData))
	}

	tests := []struct {
		name, path string
		want       outcome
		wantErrno  error
	}{
		{"subdir", f.work + "/sub", ok, nil},
		{"symlinked-dir-outside", f.work + "/outdir", denied, nil},
		{"prefix-not-child", f.base + "/workshop", denied, nil},
		{"parent", f.work + "/..", denied, nil},
		{"file", f.work + "/hello.txt", failed, unix.ENOTDIR},
		{"fifo", f.work + "/fifo", failed, unix.ENOTDIR},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := g.List(tt.path)
			checkOutcome(t, "List("+tt.path+")", err, tt.want, tt.wantErrno)
		})
	}
}

func TestWriteImpliesRead(t *testing.T) {
	f := newFixture(t)
	g := newGuard(t, policy.Spec{FSWrite: []string{f.work}}, guard.Config{})
	if got, err := g.Read(f.work + "/hello.txt"); err != nil || string(got) != helloData {
		t.Errorf("Read with fs_write = %q, %v; want %q", got, err, helloData)
	}
	if _, err := g.List(f.work); err != nil {
		t.Errorf("List with fs_write = %v, want nil", err)
	}
}

func TestReadDoesNotImplyWrite(t *testing.T) {
	f := newFixture(t)
	g := newGuard(t, policy.Spec{FSRead: []string{f.work}}, guard.Config{})
	checkOutcome(t, "Write with fs_read", g.Write(f.work+"/hello.txt", []byte("x")), denied, nil)
	checkOutcome(t, "Write new file with fs_read", g.Write(f.work+"/new/x.txt", []byte("x")), denied, nil)
	checkOutcome(t, "Remove with fs_read", g.Remove(f.work+"/hello.txt"), denied, nil)
	requireUnchanged(t, f.work+"/hello.txt", helloData)
	requireAbsent(t, f.work+"/new")
}

// TestNestedGrants checks that a path is confined to the most specific
// grant root, and may use a broader one only when that is granted too.
func TestNestedGrants(t *testing.T) {
	f := newFixture(t)
	g := newGuard(t, policy.Spec{FSRead: []string{f.base}, FSWrite: []string{f.work}}, guard.Config{})
	if got, err := g.Read(f.work + "/secret-rel"); err != nil || string(got) != secretData {
		t.Errorf("Read through a symlink into the broader read grant = %q, %v; want %q", got, err, secretData)
	}
	checkOutcome(t, "Write through a symlinked dir out of the write grant", g.Write(f.work+"/outdir/new.txt", []byte("x")), denied, nil)
	requireAbsent(t, f.outside+"/new.txt")

	// RESOLVE_BENEATH refuses absolute symlinks even when they land in a
	// grant: the guard fails closed rather than guess which root they mean.
	checkOutcome(t, "Read through an absolute symlink into the broader read grant", readErr(g, f.work+"/secret-link"), denied, nil)

	g = newGuard(t, policy.Spec{FSWrite: []string{f.base, f.work}}, guard.Config{})
	checkOutcome(t, "Write through a symlinked dir within the broader write grant", g.Write(f.work+"/outrel/new.txt", []byte("x")), ok, nil)
	requireUnchanged(t, f.outside+"/new.txt", "x")
}

func readErr(g *guard.Guard, path string) error {
	_, err := g.Read(path)
	return err
}

func TestReadOutputBudget(t *testing.T) {
	f := newFixture(t)
	mustDo(t, os.WriteFile(f.work+"/big", bytes.Repeat([]byte("x"), 1<<20), 0o644))
	rec := &audit.Recorder{}
	g := newGuard(t, policy.Spec{FSRead: []string{f.work}, Budget: budget.Limits{OutputBytes: 8}}, guard.Config{Audit: rec})
	got, err := g.Read(f.work + "/hello.txt")
	if err != nil || string(got) != helloData {
		t.Fatalf("Read within max_output_bytes = %q, %v; want %q", got, err, helloData)
	}
	got, err = g.Read(f.work + "/big")
	requireExhausted(t, "Read of 1 MiB with max_output_bytes 8", err, budget.MaxOutputBytes)
	if got != nil {
		t.Errorf("Read past max_output_bytes returned %d bytes, want none", len(got))
	}
	_, err = g.Read(f.work + "/sub/f.txt")
	requireExhausted(t, "Read after the halt", err, budget.MaxOutputBytes)
	requireEvent(t, rec, audit.Event{Kind: audit.Halt, Layer: audit.LayerBudget, Op: "read", Target: f.work + "/big", Rule: "max_output_bytes"})
}

func TestFSAudit(t *testing.T) {
	f := newFixture(t)
	rec := &audit.Recorder{}
	g := newGuard(t, policy.Spec{FSRead: []string{f.base}, FSWrite: []string{f.work}}, guard.Config{Audit: rec})
	_, _ = g.Read(f.work + "/hello.txt")                      // allowed
	_ = g.Write(f.base+"/workshop/x.txt", []byte("x"))        // outside fs_write
	_ = g.Write(f.work+"/secret-link", []byte("x"))           // symlink
	_, _ = g.List(f.work + "/../../" + filepath.Base(f.base)) // allowed: canonical base
	requireEvent(t, rec, audit.Event{Kind: audit.Allow, Layer: audit.LayerFS, Op: "read", Target: f.work + "/hello.txt", Rule: "fs_read"})
	requireEvent(t, rec, audit.Event{Kind: audit.Deny, Layer: audit.LayerFS, Op: "write", Target: f.base + "/workshop/x.txt", Rule: "fs_write",
		Suggestion: `add "` + f.base + `/workshop/x.txt" to fs_write`})
	requireEvent(t, rec, audit.Event{Kind: audit.Deny, Layer: audit.LayerFS, Op: "write", Target: f.work + "/secret-link", Rule: "fs_write"})
	requireEvent(t, rec, audit.Event{Kind: audit.Allow, Layer: audit.LayerFS, Op: "list", Target: f.base, Rule: "fs_read"})
}

func BenchmarkReadAllowed(b *testing.B) {
	f := newFixture(b)
	g := newGuard(b, policy.Spec{FSRead: []string{f.work},
		Budget: budget.Limits{Ops: 1e9, OutputBytes: 1 << 30, Wall: 24 * time.Hour}}, guard.Config{})
	p := f.work + "/sub/f.txt"
	b.ReportAllocs()
	for b.Loop() {
		if _, err := g.Read(p); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReadBaseline is os.ReadFile of the same file, the cost floor
// that BenchmarkReadAllowed is compared with.
func BenchmarkReadBaseline(b *testing.B) {
	f := newFixture(b)
	p := f.work + "/sub/f.txt"
	b.ReportAllocs()
	for b.Loop() {
		if _, err := os.ReadFile(p); err != nil {
			b.Fatal(err)
		}
	}
}

// TestReadToWriteFrom: the streaming forms check paths as Read and Write
// do, charge the output budget before a chunk reaches the writer, and move
// files whole.
func TestReadToWriteFrom(t *testing.T) {
	f := newFixture(t)
	big := bytes.Repeat([]byte("0123456789abcdef"), 100<<10) // 1.6 MB: many chunks
	mustDo(t, os.WriteFile(f.work+"/big", big, 0o644))
	g := newGuard(t, policy.Spec{FSWrite: []string{f.work}, Budget: budget.Limits{OutputBytes: 4 << 20}}, guard.Config{Cwd: f.work})

	var out bytes.Buffer
	n, err := g.ReadTo(f.work+"/big", &out)
	if err != nil || n != int64(len(big)) || !bytes.Equal(out.Bytes(), big) {
		t.Fatalf("ReadTo(big) = %d, %v (%d bytes out), want %d", n, err, out.Len(), len(big))
	}
	for _, p := range []string{f.work + "/secret-link", f.work + "/hard", f.work + "/fifo", f.work + "/../secret.txt"} {
		out.Reset()
		if _, err := g.ReadTo(p, &out); err == nil || out.Len() != 0 {
			t.Errorf("ReadTo(%s) = %v with %d bytes out, want a refusal and nothing", p, err, out.Len())
		}
	}

	n, err = g.WriteFrom("copy", bytes.NewReader(big))
	if err != nil || n != int64(len(big)) {
		t.Fatalf("WriteFrom(copy) = %d, %v", n, err)
	}
	if got, err := os.ReadFile(f.work + "/copy"); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("the file WriteFrom wrote holds %d bytes (%v), want %d", len(got), err, len(big))
	}
	if _, err := g.WriteFrom(f.work+"/hard", bytes.NewReader(big)); err == nil {
		t.Error("WriteFrom through a hard link succeeded")
	}
	requireUnchanged(t, f.hardsecret, secretData)

	// max_output_bytes is charged before the bytes reach the writer.
	small := newGuard(t, policy.Spec{FSRead: []string{f.work}, Budget: budget.Limits{OutputBytes: 1 << 20}}, guard.Config{})
	out.Reset()
	_, err = small.ReadTo(f.work+"/big", &out)
	requireExhausted(t, "ReadTo of 1.6 MB with max_output_bytes 1 MiB", err, budget.MaxOutputBytes)
	if out.Len() != 0 {
		t.Errorf("ReadTo past max_output_bytes wrote %d bytes, want none", out.Len())
	}
}

// TestListN: a listing holds at most max entries, says whether any were
// left out, and charges only the names it returns.
func TestListN(t *testing.T) {
	dir := t.TempDir()
	const n = 2500 // several getdents batches
	for i := range n {
		mustDo(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%04d", i)), nil, 0o644))
	}
	g := newGuard(t, policy.Spec{FSRead: []string{dir}}, guard.Config{})
	for _, tt := range []struct {
		max, want int
		more      bool
	}{{10, 10, true}, {n - 1, n - 1, true}, {n, n, false}, {n + 1, n, false}, {0, n, false}} {
		_, before := g.Meter().Usage()
		got, more, err := g.ListN(dir, tt.max)
		if err != nil || len(got) != tt.want || more != tt.more {
			t.Errorf("ListN(%d) = %d entries, more %v, %v; want %d, %v", tt.max, len(got), more, err, tt.want, tt.more)
		}
		if !slices.IsSortedFunc(got, func(a, b guard.Entry) int { return strings.Compare(a.Name, b.Name) }) {
			t.Errorf("ListN(%d) is not sorted", tt.max)
		}
		if _, after := g.Meter().Usage(); after-before != int64(5*len(got)) {
			t.Errorf("ListN(%d) charged %d output bytes, want %d (the names returned)", tt.max, after-before, 5*len(got))
		}
	}
}
