//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/airtest"
)

// TestPythonClient runs the Python client's tests
// (clients/python/test_airlock_client.py) against the airlock binary under
// test: a real `airlock serve` that they start and stop themselves, and a
// hostile fake server. They must all run: a skip among them fails this
// test, since AIRLOCK_BIN is set.
func TestPythonClient(t *testing.T) {
	airtest.RequireUserNS(t)
	airtest.RequireLandlockABI(t, 4)
	python, err := exec.LookPath("python3")
	if err != nil {
		airtest.SkipOrFail(t, "python3 is not on PATH (%v): install Python 3.9 or later to test the Python client", err)
	}
	if out, err := exec.Command(python, "-c", "import sys; sys.exit(sys.version_info < (3, 9))").CombinedOutput(); err != nil {
		airtest.SkipOrFail(t, "%s is older than Python 3.9, which the Python client needs: %v %s", python, err, out)
	}
	bin := mcpBinary(t)
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-m", "unittest", "-v", "clients/python/test_airlock_client.py")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "AIRLOCK_BIN="+bin, "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1")
	// The tests' `airlock serve` is in python's process group: a timeout
	// kills both.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err = cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("the Python client's tests did not end within 5m: killed\n%s", out.String())
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("run %s -m unittest: %v\n%s", python, err, out.String())
	}
	if err != nil {
		t.Fatalf("the Python client's tests failed (%v):\n%s", err, out.String())
	}
	if strings.Contains(out.String(), "skipped") {
		t.Fatalf("some of the Python client's tests were skipped, though AIRLOCK_BIN is set:\n%s", out.String())
	}
	t.Logf("python3 -m unittest -v clients/python/test_airlock_client.py:\n%s", out.String())
}
