package k8stest_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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

// TestGarbageCollector: with the controller-manager's collector started,
// a Pod owned by a ConfigMap goes when the ConfigMap is deleted.
func TestGarbageCollector(t *testing.T) {
	cp := k8stest.Start(t)
	cp.StartGarbageCollector(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	owner, err := cp.Client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	yes := true
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "owned", OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID, Controller: &yes}}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "localhost/none:1"}}},
	}
	if _, err := cp.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cp.Client.CoreV1().ConfigMaps("default").Delete(ctx, owner.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for {
		_, err := cp.Client.CoreV1().Pods("default").Get(ctx, "owned", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the owned Pod is still there a minute after its owner was deleted (last get: %v)", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
