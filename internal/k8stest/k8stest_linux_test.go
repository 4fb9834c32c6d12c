package k8stest_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/k8stest"
)

// helperEnv makes the test binary run TestHelperControlPlane as a helper
// process: "fail" fails the test once the control plane is up, "hang"
// waits to be killed.
const helperEnv = "AIRLOCK_K8STEST_HELPER"

// TestHelperControlPlane is not a test: the tests below run the test
// binary as it. It prints the control plane's pids and folder.
func TestHelperControlPlane(t *testing.T) {
	mode := os.Getenv(helperEnv)
	if mode == "" {
		return // only a helper process runs it
	}
	cp := k8stest.Start(t)
	fmt.Printf("helper: %d %d %s\n", cp.Pids()[0], cp.Pids()[1], filepath.Dir(cp.Kubeconfig))
	switch mode {
	case "fail":
		t.Fatal("helper: failing on purpose")
	case "hang":
		var b [1]byte
		_, _ = os.Stdin.Read(b[:]) // returns when the parent kills the process or closes stdin
	}
}

// helper starts the test binary as TestHelperControlPlane in mode and
// returns it with the pids and folder it printed.
func helper(t *testing.T, mode string) (*exec.Cmd, []int, string) {
	t.Helper()
	k8stest.Bin(t) // skips here, not in the child, when the binaries are absent
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperControlPlane$", "-test.v")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, "TMPDIR="+t.TempDir())
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close() })
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		f := strings.Fields(strings.TrimPrefix(sc.Text(), "helper: "))
		if !strings.HasPrefix(sc.Text(), "helper: ") || len(f) != 3 {
			continue
		}
		etcd, err1 := strconv.Atoi(f[0])
		api, err2 := strconv.Atoi(f[1])
		if err1 != nil || err2 != nil {
			t.Fatalf("helper printed %q", sc.Text())
		}
		go func() { _, _ = bufio.NewReader(out).WriteTo(os.Stdout) }() // the rest of its -test.v output
		return cmd, []int{etcd, api}, f[2]
	}
	err = cmd.Wait()
	t.Fatalf("the helper ended (%v) without printing its control plane", err)
	return nil, nil, ""
}

// TestCleanupAfterFailure: a test that fails still stops the control
// plane and removes its folder.
func TestCleanupAfterFailure(t *testing.T) {
	cmd, pids, dir := helper(t, "fail")
	if err := cmd.Wait(); err == nil {
		t.Fatal("the helper test passed, want it failed")
	}
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("pid %d is still running after the failed test ended", pid)
		}
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the folder %s is still there after the failed test: %v", dir, err)
	}
}

// TestDiesWithTestBinary: a test binary killed outright (as go test
// -timeout does after its panic) runs no Cleanup, and the control plane
// dies with it all the same (PR_SET_PDEATHSIG).
func TestDiesWithTestBinary(t *testing.T) {
	cmd, pids, _ := helper(t, "hang")
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait() // killed: the error says so
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for _, pid := range pids {
		for alive(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("pid %d still runs 10 s after the test binary was killed", pid)
			}
			<-tick.C
		}
	}
}
