package fsaudit_test

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/internal/enforce/fsaudit"
	"github.com/airlock-sandbox/airlock/internal/enforce/landlock"
)

// The files of one child live in syncDir: secret (read by the child
// itself, before any execve), secret2 (read by cat after execve, logged
// only thanks to LogNewExec) and three fifos: the child writes its pid to
// "pid", waits on "go" until the parent tracks it, and waits on "done"
// until the parent saw its denials, so that its restricting thread is
// still alive when its domain record is attributed.
func syncDir(parent int, name string) string {
	return filepath.Join(os.TempDir(), "airlock-fsaudit-"+strconv.Itoa(parent), name)
}

// TestCollectorKernel restricts two concurrent children with Landlock,
// denies each a read before execve, an execve and a read after execve, and
// checks that each Run holds exactly its own child's denials.
func TestCollectorKernel(t *testing.T) {
	airtest.RequireRoot(t)
	airtest.RequireLandlockABI(t, 7)
	var c *fsaudit.Collector
	if !airtest.InChild() {
		if err := fsaudit.Available(); err != nil {
			airtest.SkipOrFail(t, "landlock audit records cannot be read here: %v", err)
		}
		var err error
		c, err = fsaudit.Start(fsaudit.Options{})
		if err != nil {
			t.Fatalf("Start() = %v", err)
		}
		base := filepath.Dir(syncDir(os.Getpid(), "x"))
		t.Cleanup(func() {
			if err := c.Close(); err != nil {
				t.Errorf("Close() = %v", err)
			}
			os.RemoveAll(base)
		})
	}
	names := []string{"a", "b"}
	for i, name := range names {
		other := names[1-i]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if airtest.InChild() {
				airtest.RunInChild(t, func() error { return child(syncDir(os.Getppid(), name)) })
				return
			}
			dir := syncDir(os.Getpid(), name)
			fifos := prepare(t, dir)
			res := make(chan handshake, 1)
			go func() { res <- track(c, dir, fifos) }()
			out := airtest.RunInChild(t, func() error { return child(syncDir(os.Getppid(), name)) })
			h := <-res
			if h.err != nil {
				t.Fatalf("parent side: %v\nchild said:\n%s", h.err, out)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			settleStart := time.Now()
			ds, err := h.run.Settle(ctx)
			t.Logf("Settle took %v", time.Since(settleStart))
			if err != nil {
				t.Errorf("Settle() = %v: the kernel did not release the child's domain in time", err)
			}
			for _, d := range ds {
				t.Logf("denial: %+v", d)
			}
			check(t, ds, dir, syncDir(os.Getpid(), other))
			if st := h.run.Stats(); st.Incomplete() {
				t.Errorf("Stats() = %+v, want complete", st)
			}
		})
	}
}

// fifos are the parent's ends of the three fifos, opened O_RDWR so that
// no open blocks and a read sees no end-of-file before the child writes.
type fifos struct{ pid, goOn, done *os.File }

func prepare(t *testing.T, dir string) fifos {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"secret", "secret2"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("token\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	open := func(name string) *os.File {
		p := filepath.Join(dir, name)
		if err := unix.Mkfifo(p, 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	return fifos{pid: open("pid"), goOn: open("go"), done: open("done")}
}

type handshake struct {
	run *fsaudit.Run
	err error
}

// track reads the child's pid, tracks it, lets the child restrict itself
// and waits (bounded) until its three denials arrived. It always releases
// the child.
func track(c *fsaudit.Collector, dir string, f fifos) (h handshake) {
	defer func() {
		f.goOn.Write([]byte{1}) // a second byte is harmless: the child reads one
		f.done.Write([]byte{1})
	}()
	deadline := time.Now().Add(30 * time.Second)
	if err := f.pid.SetReadDeadline(deadline); err != nil {
		return handshake{err: err}
	}
	buf := make([]byte, 32)
	n, err := f.pid.Read(buf)
	if err != nil {
		return handshake{err: fmt.Errorf("read the child's pid: %w", err)}
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(buf[:n])))
	if err != nil {
		return handshake{err: err}
	}
	h.run = c.Track(pid)
	if _, err := f.goOn.Write([]byte{1}); err != nil {
		return handshake{run: h.run, err: err}
	}
	want := expected(dir)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	ds, err := h.run.Wait(ctx, func(ds []fsaudit.Denial) bool { return len(missing(ds, want)) == 0 })
	if err != nil {
		return handshake{run: h.run, err: fmt.Errorf("waiting for the denials: %w; missing %q; got %+v", err, missing(ds, want), ds)}
	}
	return h
}

// expected lists "op target rule" of the denials a child must cause.
func expected(dir string) []string {
	dir, _ = filepath.EvalSymlinks(dir)
	tool, _ := filepath.EvalSymlinks("/bin/true")
	return []string{
		"read " + filepath.Join(dir, "secret") + " fs_read",
		"exec " + tool + " allowed_tools",
		"read " + filepath.Join(dir, "secret2") + " fs_read",
	}
}

func missing(ds []fsaudit.Denial, want []string) []string {
	have := map[string]bool{}
	for _, d := range ds {
		have[d.Op+" "+d.Target+" "+d.Rule] = true
	}
	var out []string
	for _, w := range want {
		if !have[w] {
			out = append(out, w)
		}
	}
	return out
}

// check asserts the denials hold every expected one, nothing of the other
// child, and not the self-test.
func check(t *testing.T, ds []fsaudit.Denial, dir, otherDir string) {
	t.Helper()
	if m := missing(ds, expected(dir)); len(m) > 0 {
		t.Errorf("Denials() lacks %q; got %+v", m, ds)
	}
	for _, d := range ds {
		if strings.HasPrefix(d.Target, otherDir) {
			t.Errorf("Denials() holds the other child's %+v", d)
		}
		if d.Target == "/" {
			t.Errorf("Denials() holds the self-test %+v", d)
		}
		if d.Message == "" || d.Count < 1 {
			t.Errorf("denial %+v lacks a message or count", d)
		}
	}
}

// child runs in the restricted child process.
func child(dir string) error {
	pidW, err := os.OpenFile(filepath.Join(dir, "pid"), os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	fmt.Fprintf(pidW, "%d\n", os.Getpid())
	pidW.Close()
	goOn, err := os.Open(filepath.Join(dir, "go"))
	if err != nil {
		return err
	}
	done, err := os.Open(filepath.Join(dir, "done"))
	if err != nil {
		return err
	}
	if _, err := io.ReadFull(goOn, make([]byte, 1)); err != nil {
		return err
	}
	rules, err := catRules()
	if err != nil {
		return err
	}
	_, _, errno := syscall.AllThreadsSyscall(syscall.SYS_GETPID, 0, 0, 0)
	cfg := landlock.Config{Paths: rules, LogNewExec: true, ThreadOnly: errno == syscall.ENOTSUP}
	if _, err := landlock.Restrict(cfg); err != nil {
		return err
	}
	var errs []error
	if _, err := os.ReadFile(filepath.Join(dir, "secret")); !errors.Is(err, unix.EACCES) {
		errs = append(errs, fmt.Errorf("read secret = %v, want EACCES", err))
	}
	if err := exec.Command("/bin/true").Run(); !errors.Is(err, unix.EACCES) {
		errs = append(errs, fmt.Errorf("exec /bin/true = %v, want EACCES", err))
	}
	out, err := exec.Command("/bin/cat", filepath.Join(dir, "secret2")).CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		errs = append(errs, fmt.Errorf("cat secret2 = %v (%q), want exit 1", err, out))
	}
	fmt.Printf("cat said: %s", out)
	if _, err := io.ReadFull(done, make([]byte, 1)); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// catRules lets /bin/cat run: Read|Execute on it, Execute on the loader
// named in its PT_INTERP, Read on the libraries and the loader cache,
// Read|Write on /dev/null (os/exec opens it for unset stdio). /bin/true
// is left out: its execve must be denied.
func catRules() ([]landlock.PathRule, error) {
	f, err := elf.Open("/bin/cat")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rules := []landlock.PathRule{
		{Path: "/dev/null", Access: landlock.Read | landlock.Write},
		{Path: "/bin/cat", Access: landlock.Read | landlock.Execute},
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b, err := io.ReadAll(p.Open())
			if err != nil {
				return nil, err
			}
			rules = append(rules, landlock.PathRule{Path: strings.TrimRight(string(b), "\x00"), Access: landlock.Execute})
		}
	}
	for _, p := range []string{"/lib", "/lib64", "/usr/lib", "/usr/lib64", "/etc/ld.so.cache"} {
		if _, err := os.Stat(p); err == nil {
			rules = append(rules, landlock.PathRule{Path: p, Access: landlock.Read})
		}
	}
	return rules, nil
}

// TestSync: Sync's marker record comes back through the read-only log
// group, so Sync returns well before its deadline; a second Collector's
// marker does not release the first one's Sync.
func TestSync(t *testing.T) {
	airtest.RequireRoot(t)
	airtest.RequireLandlockABI(t, 7)
	if err := fsaudit.Available(); err != nil {
		airtest.SkipOrFail(t, "landlock audit records cannot be read here: %v", err)
	}
	c, err := fsaudit.Start(fsaudit.Options{})
	if err != nil {
		t.Fatalf("Start() = %v", err)
	}
	defer c.Close()
	for i := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := c.Sync(ctx)
		cancel()
		if err != nil {
			t.Fatalf("Sync #%d = %v: its marker record never came back", i, err)
		}
	}
	// A cancelled Sync reports the context's error and leaves nothing behind.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Sync(ctx); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("Sync with a cancelled context = %v", err)
	}
}
