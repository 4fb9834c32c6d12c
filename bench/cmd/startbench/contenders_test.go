package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// skipOrFail skips, or fails when AIRLOCK_TEST_STRICT=1 (CI as root), like
// airlock's internal/airtest, which this module may not import.
func skipOrFail(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("AIRLOCK_TEST_STRICT") == "1" {
		t.Fatalf("strict: "+format, args...)
	}
	t.Skipf(format, args...)
}

// sandboxProbe prints what the sandbox does to a process, one fact a line:
// the seccomp mode, what the filter answers to calls it must refuse (an
// ioctl TIOCSTI on stdin, which is not a terminal, so the kernel alone
// would say ENOTTY; unshare of a user namespace; io_uring_setup), the
// synthesized /etc files, the root's writability, the environment and the
// working directory.
const sandboxProbe = `
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def errno_of(r):
    return ctypes.get_errno() if r == -1 else 0
st = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines())
print("seccomp", st["Seccomp"].strip(), "nnp", st["NoNewPrivs"].strip())
print("tiocsti", errno_of(libc.ioctl(0, 0x5412, ctypes.c_char_p(b"x"))))
print("unshare-user", errno_of(libc.unshare(0x10000000)))
print("io_uring_setup", errno_of(libc.syscall(425, 1, None)))
for f in ("passwd", "group", "hosts", "resolv.conf", "nsswitch.conf"):
    print("etc", f, repr(open("/etc/" + f).read()))
try:
    open("/pwned", "w")
    print("root writable")
except OSError as e:
    print("root refuses writes")
print("env", sorted(k for k in os.environ if k not in ("PWD", "SHLVL", "_", "container")))
print("cwd", os.getcwd())
`

// TestContendersApplyAirlocksSandbox runs the probe under airlock itself
// and under every contender that rebuilds airlock's sandbox (bwrap on the
// plan, runc and crun on the exported bundle) and wants the same answers:
// a benchmark of a weaker sandbox (a filter that lets ioctl TIOCSTI
// through, other /etc files) would compare the wrong thing.
func TestContendersApplyAirlocksSandbox(t *testing.T) {
	if os.Geteuid() != 0 {
		skipOrFail(t, "needs root (the OCI runtimes and reading a seccomp filter with ptrace)")
	}
	const python = "/usr/bin/python3" // the benchmark's workload; not a PATH shim
	if _, err := os.Stat(python); err != nil {
		skipOrFail(t, "needs %s for the probe: %v", python, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// The OCI runtimes' mapped root must reach the bundle and the binaries.
	work, err := os.MkdirTemp("", "airlock-bench-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(work) })
	if err := os.Chmod(work, 0o755); err != nil {
		t.Fatal(err)
	}
	// Built in the airlock module (the repository root), as bench/run does.
	airlockBin := filepath.Join(work, "airlock")
	build := exec.CommandContext(ctx, "go", "build", "-o", work, "./cmd/airlock", "./cmd/airlock-init")
	build.Dir = filepath.Join("..", "..", "..")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build airlock: %v\n%s", err, out)
	}

	argv := []string{python, "-c", sandboxProbe}
	run := func(c *Contender) (string, error) {
		cmd, release, err := c.Command(ctx, argv)
		if err != nil {
			return "", err
		}
		defer release()
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		err = c.Run(cmd)
		return out.String(), err
	}
	cs, notes := contenders(ctx, work, airlockBin, 200)
	if len(notes) > 0 {
		t.Errorf("contenders: %s", strings.Join(notes, "; "))
	}
	byName := map[string]*Contender{}
	for _, c := range cs {
		byName[c.Name] = c
	}
	want, err := run(byName["airlock"])
	if err != nil {
		t.Fatalf("probe under airlock run: %v\n%s", err, want)
	}
	for _, line := range []string{"seccomp 2 nnp 1", "tiocsti 1", "unshare-user 1", "io_uring_setup 1", "root refuses writes"} {
		if !strings.Contains(want, line+"\n") {
			t.Fatalf("airlock run: probe output lacks %q:\n%s", line, want)
		}
	}
	for _, name := range []string{"bwrap", "runc", "crun"} {
		t.Run(name, func(t *testing.T) {
			c := byName[name]
			if c == nil || !c.Available {
				reason := "not built"
				if c != nil {
					reason = c.Reason
				}
				skipOrFail(t, "%s unavailable: %s", name, reason)
			}
			got, err := run(c)
			if err != nil {
				t.Fatalf("probe under %s: %v\n%s", name, err, got)
			}
			if got != want {
				t.Errorf("%s does not apply airlock's sandbox:\n%s", name, diffLines(want, got))
			}
		})
	}
}

// diffLines lists the lines of want and got that differ.
func diffLines(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for i := range max(len(w), len(g)) {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			fmt.Fprintf(&b, "  airlock: %s\n  got:     %s\n", wl, gl)
		}
	}
	return b.String()
}
