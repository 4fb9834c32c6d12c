package landlock_test

import (
	"bufio"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/internal/enforce/landlock"
	"golang.org/x/sys/unix"
)

// op is one operation a restricted child tries, with the outcome it must
// have: "ok", an errno name such as "EACCES", or "exit N".
type op struct {
	name string
	do   func() error
	want string
}

// outcome names what an operation's error was, in op.want's terms.
func outcome(err error) string {
	var exit *exec.ExitError
	var errno syscall.Errno
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &exit):
		return fmt.Sprintf("exit %d", exit.ExitCode())
	case errors.As(err, &errno):
		return unix.ErrnoName(errno)
	default:
		return "error " + strings.ReplaceAll(err.Error(), "\n", " ")
	}
}

// cgoLinked reports whether this test binary links cgo (as -race builds
// do), where syscall.AllThreadsSyscall is unsupported and Restrict needs
// ThreadOnly.
func cgoLinked() bool {
	_, _, errno := syscall.AllThreadsSyscall(syscall.SYS_GETPID, 0, 0, 0)
	return errno == syscall.ENOTSUP
}

// runOps runs setup, Restrict and then every op in a child process, and
// checks each op's outcome in a subtest of t. setup runs in the child only
// and returns the Config to enforce; ThreadOnly is forced for cgo builds.
func runOps(t *testing.T, setup func() (landlock.Config, error), ops []op) {
	t.Helper()
	out := airtest.RunInChild(t, func() error {
		// Scoped abstract sockets compare the domains of the threads
		// that made them; keep every op on one thread.
		runtime.LockOSThread()
		cfg, err := setup()
		if err != nil {
			return err
		}
		cfg.ThreadOnly = cfg.ThreadOnly || cgoLinked()
		st, err := landlock.Restrict(cfg)
		if err != nil {
			return err
		}
		if !st.FS || st.AllThreads == cfg.ThreadOnly {
			return fmt.Errorf("Restrict status = %+v, want FS and AllThreads=%v", st, !cfg.ThreadOnly)
		}
		for _, o := range ops {
			fmt.Printf("%s\t%s\n", o.name, outcome(o.do()))
		}
		return nil
	})
	got := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if name, res, ok := strings.Cut(sc.Text(), "\t"); ok {
			got[name] = res
		}
	}
	for _, o := range ops {
		t.Run(o.name, func(t *testing.T) {
			res, ok := got[o.name]
			if !ok {
				t.Fatalf("child did not report %s; its output:\n%s", o.name, out)
			}
			if res != o.want {
				t.Errorf("%s after Restrict = %s, want %s", o.name, res, o.want)
			}
		})
	}
}

const treeEnv = "AIRLOCK_LANDLOCK_TEST_TREE"

// tree builds, in the parent, a temporary tree with ro/, rw/, secret/ and
// exec/ (and wo/, write-only) and hands its path to the child through the environment; in the
// child it returns that path.
func tree(t *testing.T) string {
	t.Helper()
	if airtest.InChild() {
		return os.Getenv(treeEnv)
	}
	root := t.TempDir()
	for _, d := range []string{"ro/sub", "rw/sub", "wo", "secret", "exec"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"ro/file", "rw/file", "rw/other", "wo/file", "secret/file"} {
		if err := os.WriteFile(filepath.Join(root, f), []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for dst, src := range map[string]string{"exec/true": "/bin/true", "rw/true": "/bin/true", "exec/cat": "/bin/cat"} {
		copyFile(t, src, filepath.Join(root, dst))
	}
	for link, target := range map[string]string{"rw/link": "../secret", "rw/filelink": "../secret/file"} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv(treeEnv, root)
	return root
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	airtest.RequireBinary(t, src)
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// systemRules are what the copied dynamically linked tools need to start:
// Execute on the loader named in /bin/true's PT_INTERP, Read on the
// libraries and the loader cache, Read|Write on /dev/null (os/exec opens it
// for unset stdio).
func systemRules() ([]landlock.PathRule, error) {
	f, err := elf.Open("/bin/true")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rules := []landlock.PathRule{{Path: "/dev/null", Access: landlock.Read | landlock.Write}}
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

func TestRestrictFilesystem(t *testing.T) {
	airtest.RequireLandlockABI(t, 3) // TRUNCATE
	root := tree(t)
	p := func(rel string) string { return filepath.Join(root, rel) }
	open := func(rel string, flags int) func() error {
		return func() error {
			fd, err := unix.Open(p(rel), flags|unix.O_CLOEXEC, 0o644)
			if err == nil {
				unix.Close(fd)
			}
			return err
		}
	}
	readDir := func(rel string) func() error {
		return func() error { _, err := os.ReadDir(p(rel)); return err }
	}
	run := func(name string, args ...string) func() error {
		return func() error { return exec.Command(name, args...).Run() }
	}
	ops := []op{
		{"ro-read", open("ro/file", unix.O_RDONLY), "ok"},
		{"ro-list", readDir("ro"), "ok"},
		{"ro-write", open("ro/file", unix.O_WRONLY), "EACCES"},
		{"ro-create", open("ro/new", unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL), "EACCES"},
		{"ro-mkdir", func() error { return unix.Mkdir(p("ro/newdir"), 0o755) }, "EACCES"},
		{"ro-truncate", func() error { return unix.Truncate(p("ro/file"), 0) }, "EACCES"},
		{"ro-unlink", func() error { return unix.Unlink(p("ro/file")) }, "EACCES"},
		{"rw-read", open("rw/file", unix.O_RDONLY), "ok"},
		{"rw-list", readDir("rw"), "ok"},
		{"rw-write", open("rw/file", unix.O_WRONLY|unix.O_APPEND), "ok"},
		{"rw-truncate", func() error { return unix.Truncate(p("rw/file"), 1) }, "ok"},
		{"rw-create", open("rw/new", unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL), "ok"},
		{"rw-mkfifo", func() error { return unix.Mkfifo(p("rw/fifo"), 0o600) }, "ok"},
		{"rw-mknod-char", func() error { return unix.Mknod(p("rw/null"), unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3))) }, "EACCES"},
		{"rw-rename-within", func() error { return unix.Rename(p("rw/new"), p("rw/sub/new")) }, "ok"},
		{"rw-rename-to-ro", func() error { return unix.Rename(p("rw/other"), p("ro/other")) }, "EACCES"},
		{"rw-rename-to-secret", func() error { return unix.Rename(p("rw/other"), p("secret/other")) }, "EACCES"},
		{"rw-link-to-ro", func() error { return unix.Link(p("rw/other"), p("ro/other")) }, "EACCES"},
		// REFER: a moved file must not gain rights; rw/ grants read, wo/ does not.
		{"rw-rename-to-wo", func() error { return unix.Rename(p("rw/sub/new"), p("wo/new")) }, "ok"},
		{"wo-rename-to-rw", func() error { return unix.Rename(p("wo/file"), p("rw/file-from-wo")) }, "EXDEV"},
		{"wo-link-to-rw", func() error { return unix.Link(p("wo/file"), p("rw/link-from-wo")) }, "EXDEV"},
		{"wo-read", open("wo/file", unix.O_RDONLY), "EACCES"},
		{"rw-rename-from-ro", func() error { return unix.Rename(p("ro/file"), p("rw/stolen")) }, "EACCES"},
		{"secret-open-dir", open("secret", unix.O_RDONLY|unix.O_DIRECTORY), "EACCES"},
		{"secret-list", readDir("secret"), "EACCES"},
		{"secret-read", open("secret/file", unix.O_RDONLY), "EACCES"},
		{"symlink-dir-to-secret", open("rw/link/file", unix.O_RDONLY), "EACCES"},
		{"symlink-file-to-secret", open("rw/filelink", unix.O_RDONLY), "EACCES"},
		{"outside-tree", func() error { _, err := os.ReadFile("/etc/passwd"); return err }, "EACCES"},
		{"dev-null-write", func() error { return os.WriteFile("/dev/null", []byte("x"), 0) }, "ok"},
		{"exec-granted", run(p("exec/true")), "ok"},
		{"exec-copy-in-rw", run(p("rw/true")), "EACCES"},
		{"child-reads-ro", run(p("exec/cat"), p("ro/file")), "ok"},
		{"child-reads-secret", run(p("exec/cat"), p("secret/file")), "exit 1"},
		{"selftest-secret", func() error { return landlock.SelfTest(p("secret/file")) }, "ok"},
	}
	runOps(t, func() (landlock.Config, error) {
		sys, err := systemRules()
		return landlock.Config{Paths: append(sys,
			landlock.PathRule{Path: p("ro"), Access: landlock.Read},
			landlock.PathRule{Path: p("rw"), Access: landlock.Read | landlock.Write},
			landlock.PathRule{Path: p("wo"), Access: landlock.Write},
			landlock.PathRule{Path: p("exec/true"), Access: landlock.Read | landlock.Execute},
			landlock.PathRule{Path: p("exec/cat"), Access: landlock.Read | landlock.Execute},
		)}, err
	}, ops)
}

func TestRestrictDevices(t *testing.T) {
	airtest.RequireLandlockABI(t, 5) // IOCTL_DEV
	airtest.RequireBinary(t, "/dev/zero")
	// TCGETS reaches the driver only with IOCTL_DEV: ENOTTY from the
	// driver means allowed, EACCES means Landlock refused.
	tcgets := func(dev string) func() error {
		return func() error {
			fd, err := unix.Open(dev, unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			_, err = unix.IoctlGetTermios(fd, unix.TCGETS)
			return err
		}
	}
	ops := []op{
		{"null-write", func() error { return os.WriteFile("/dev/null", []byte("x"), 0) }, "ok"},
		{"null-ioctl", tcgets("/dev/null"), "ENOTTY"},
		{"zero-read", func() error {
			f, err := os.Open("/dev/zero")
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.Read(make([]byte, 8))
			return err
		}, "ok"},
		{"zero-write", func() error { return os.WriteFile("/dev/zero", []byte("x"), 0) }, "EACCES"},
		{"zero-ioctl", tcgets("/dev/zero"), "EACCES"},
		{"dev-list", func() error { _, err := os.ReadDir("/dev"); return err }, "EACCES"},
	}
	runOps(t, func() (landlock.Config, error) {
		return landlock.Config{Paths: []landlock.PathRule{
			{Path: "/dev/null", Access: landlock.Read | landlock.Write},
			{Path: "/dev/zero", Access: landlock.Read},
		}}, nil
	}, ops)
}

func TestRestrictLogNewExec(t *testing.T) {
	airtest.RequireLandlockABI(t, 7)
	runOps(t, func() (landlock.Config, error) {
		return landlock.Config{LogNewExec: true, MinABI: 7}, nil
	}, []op{{"root-denied", func() error { _, err := os.ReadDir("/"); return err }, "EACCES"}})
}

// TestRestrictAllThreads checks that a goroutine on another OS thread, one
// that existed before Restrict or was created after it, is restricted too.
func TestRestrictAllThreads(t *testing.T) {
	airtest.RequireLandlockABI(t, 1)
	if cgoLinked() {
		t.Skip("this test binary links cgo (e.g. -race), where only ThreadOnly is possible")
	}
	airtest.RunInChild(t, func() error {
		runtime.LockOSThread()
		if _, err := landlock.Restrict(landlock.Config{}); err != nil {
			return err
		}
		me := unix.Gettid()
		type result struct {
			tid int
			err error
		}
		results := make(chan result)
		for range 4 {
			go func() {
				runtime.LockOSThread() // never unlocked: this thread then exits
				_, err := os.ReadDir("/")
				results <- result{unix.Gettid(), err}
			}()
		}
		for range 4 {
			r := <-results
			if r.tid == me {
				return fmt.Errorf("airlock bug: goroutine ran on the restricting thread %d", me)
			}
			if !errors.Is(r.err, unix.EACCES) {
				return fmt.Errorf("thread %d: ReadDir(/) = %v, want EACCES", r.tid, r.err)
			}
		}
		return nil
	})
}

// TestRestrictThreadOnly checks the guarantee ThreadOnly keeps: the calling
// goroutine and every program it starts are restricted.
func TestRestrictThreadOnly(t *testing.T) {
	airtest.RequireLandlockABI(t, 1)
	root := tree(t)
	cat := filepath.Join(root, "exec/cat")
	ops := []op{
		{"caller-denied", func() error { _, err := os.ReadFile("/etc/passwd"); return err }, "EACCES"},
		{"command-denied", func() error { return exec.Command(cat, "/etc/passwd").Run() }, "exit 1"},
	}
	runOps(t, func() (landlock.Config, error) {
		sys, err := systemRules()
		return landlock.Config{ThreadOnly: true, Paths: append(sys,
			landlock.PathRule{Path: cat, Access: landlock.Read | landlock.Execute})}, err
	}, ops)
}

// TestRestrictCgo checks that a cgo binary without ThreadOnly is refused
// and left unrestricted.
func TestRestrictCgo(t *testing.T) {
	airtest.RequireLandlockABI(t, 1)
	if !cgoLinked() {
		t.Skip("this test binary does not link cgo; run it with -race to cover this case")
	}
	airtest.RunInChild(t, func() error {
		if _, err := landlock.Restrict(landlock.Config{}); !errors.Is(err, unix.ENOTSUP) {
			return fmt.Errorf("Restrict(Config{}) in a cgo binary = %v, want an error wrapping ENOTSUP", err)
		}
		if err := landlock.SelfTest("/"); err == nil {
			return fmt.Errorf("SelfTest(/) = nil after a refused Restrict, want an error")
		}
		return nil
	})
}

func TestRestrictRefuses(t *testing.T) {
	airtest.RequireLandlockABI(t, 1)
	tests := []struct {
		name   string
		cfg    landlock.Config
		target error
	}{
		{"min-abi-above-kernel", landlock.Config{MinABI: airtest.LandlockABI() + 1}, landlock.ErrABI},
		{"missing-path", landlock.Config{Paths: []landlock.PathRule{{Path: "/nonexistent/airlock", Access: landlock.Read}}}, unix.ENOENT},
		{"selftest-path-missing", landlock.Config{SelfTestPath: "/nonexistent/airlock"}, unix.ENOENT},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			airtest.RunInChild(t, func() error {
				tt.cfg.ThreadOnly = cgoLinked()
				st, err := landlock.Restrict(tt.cfg)
				if !errors.Is(err, tt.target) {
					return fmt.Errorf("Restrict(%+v) = %+v, %v; want an error wrapping %v", tt.cfg, st, err, tt.target)
				}
				if tt.target == unix.ENOENT && !strings.Contains(err.Error(), "/nonexistent/airlock") {
					return fmt.Errorf("Restrict error %q does not name the missing path", err)
				}
				if tt.target == landlock.ErrABI {
					// Nothing may have been restricted: / still opens.
					if err := landlock.SelfTest("/"); err == nil {
						return fmt.Errorf("SelfTest(/) = nil after a refused Restrict, want an error")
					}
				}
				return nil
			})
		})
	}
}

func TestSelfTestUnrestricted(t *testing.T) {
	tests := []struct {
		name, path string
	}{
		{"readable-dir", t.TempDir()},
		{"readable-root", "/"},
		{"missing", "/nonexistent/airlock"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := landlock.SelfTest(tt.path); err == nil {
				t.Errorf("SelfTest(%q) without Restrict = nil, want an error", tt.path)
			}
		})
	}
}

func TestABI(t *testing.T) {
	airtest.RequireLandlockABI(t, 1)
	got, err := landlock.ABI()
	if err != nil || got != airtest.LandlockABI() {
		t.Errorf("ABI() = %d, %v, want %d, nil", got, err, airtest.LandlockABI())
	}
}
