// Package airtest is the test kit: probes that skip a test with a precise
// reason when a kernel feature or privilege is missing (and fail instead when
// AIRLOCK_TEST_STRICT=1, as in CI), RunInChild for restrictions that cannot
// be undone, a fake clock, and golden files. Only tests import it; a test in
// deps_test.go keeps it out of production packages.
package airtest

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// Strict reports whether AIRLOCK_TEST_STRICT=1, which turns skips into failures.
func Strict() bool { return os.Getenv("AIRLOCK_TEST_STRICT") == "1" }

// SkipOrFail skips t with the formatted reason, or fails it in strict mode.
func SkipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if Strict() {
		t.Fatalf("AIRLOCK_TEST_STRICT=1 and a required feature is missing: %s", msg)
	}
	t.Skip(msg)
}

// RequireRoot skips unless the test runs as uid 0.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		SkipOrFail(t, "needs root (euid is %d)", os.Geteuid())
	}
}

// RequireNonRoot skips unless the test runs as an unprivileged user (the
// rootless subset that CI runs under setpriv).
func RequireNonRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		t.Skip("rootless test: runs only as an unprivileged user (CI runs it under setpriv)")
	}
}

// childEnv names the test a re-executed test binary must run as a child.
const childEnv = "AIRLOCK_AIRTEST_CHILD"

// InChild reports whether this process is a RunInChild child.
func InChild() bool { return os.Getenv(childEnv) != "" }

// RunInChild runs fn in a fresh copy of the test binary so that
// irreversible restrictions (Landlock, seccomp, no_new_privs, setns) never
// touch the test process. The parent returns what fn printed on stdout;
// it fails t when fn returns an error or the child dies. fn runs on the
// child's main goroutine's thread with the OS thread locked.
//
// Call it as the only statement that matters in a test or subtest: in the
// child, every other test body is skipped by -test.run.
func RunInChild(t *testing.T, fn func() error) string {
	t.Helper()
	if os.Getenv(childEnv) == t.Name() {
		err := fn()
		if err != nil {
			fmt.Fprintf(os.Stderr, "child error: %v\n", err)
			os.Exit(3)
		}
		os.Exit(0)
	}
	parts := strings.Split(t.Name(), "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	cmd := exec.Command(os.Args[0], "-test.run="+strings.Join(parts, "/"), "-test.count=1", "-test.timeout=120s")
	cmd.Env = append(os.Environ(), childEnv+"="+t.Name())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		t.Fatalf("child %s: %v\nstdout:\n%s\nstderr:\n%s", t.Name(), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// FakeClock is a manual clock for budget tests. The zero value starts at
// the Unix epoch; it is safe for concurrent use.
type FakeClock struct {
	mu  sync.Mutex
	now time.Time // guarded by mu
}

// NewFakeClock returns a clock reading start.
func NewFakeClock(start time.Time) *FakeClock { return &FakeClock{now: start} }

// Now returns the fake time.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

// Golden compares got with testdata/name.golden, or rewrites the file when
// the test runs with -update.
func Golden(t testing.TB, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden file: %v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from golden file (run go test -update and review the diff)\n--- got:\n%s\n--- want:\n%s", name, got, want)
	}
}

// RootlessDowngrades is what a test's policy accepts so that it runs as a
// normal user, where no cgroup is delegated (this machine, and most):
// max_memory, max_pids and max_cpu, which only cgroups enforce for the
// whole tree. As root it is nil,
// so CI's root run enforces, and tests, every limit. A test of those
// limits themselves needs root (RequireRoot), not this.
func RootlessDowngrades() []string {
	if os.Geteuid() == 0 {
		return nil
	}
	return []string{"max_memory", "max_pids", "max_cpu"}
}

// RootlessFlags is RootlessDowngrades as `airlock run` flags.
func RootlessFlags() []string {
	if d := RootlessDowngrades(); d != nil {
		return []string{"--allow-downgrade", strings.Join(d, ",")}
	}
	return nil
}
