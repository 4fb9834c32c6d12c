package k8stest_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/airlock-sandbox/airlock/internal/k8stest"
)

// TestNodeRunsPod: a pod given to the harness's node runs to its end on
// this machine, with its exit code and termination message reported in
// its status. Pods here use the host's network: containerd 1.6 needs an
// address from a CNI plugin for a pod network, and the tests add none.
func TestNodeRunsPod(t *testing.T) {
	cp := k8stest.Start(t)
	base := k8stest.BaseLayer(t)
	var dir string
	var pids, containerPids []int
	t.Run("pod", func(t *testing.T) {
		n := k8stest.StartNode(t, cp, []k8stest.Layer{base})
		dir, pids = n.Dir(), n.Pids()
		runPod(t, cp, n, base)
		containerPids = sleepers(t)
		if len(containerPids) == 0 {
			t.Error("no pause container (/bin/sleep infinity) runs while the node does")
		}
	})
	// The node has stopped: nothing of it is left.
	for _, pid := range append(pids, containerPids...) {
		if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid))); err == nil {
			t.Errorf("process %d of the node is still there after it stopped", pid)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the node's folder %s is still there (%v)", dir, err)
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mi), dir) {
		t.Errorf("a mount below %s is left after the node stopped", dir)
	}
	if left, _ := filepath.Glob("/sys/fs/cgroup/*/k8s.io/*/"); len(left) > 0 {
		t.Errorf("containers' cgroups are left after the node stopped: %v", left)
	}
}

// sleepers returns the pids of the pause containers: processes running
// /bin/sleep infinity in a cgroup of containerd's k8s.io namespace.
func sleepers(t *testing.T) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		cg, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		if err == nil && string(b) == "/bin/sleep\x00infinity\x00" && strings.Contains(string(cg), "/k8s.io/") {
			if pid, err := strconv.Atoi(e.Name()); err == nil {
				out = append(out, pid)
			}
		}
	}
	return out
}

func runPod(t *testing.T, cp *k8stest.ControlPlane, n *k8stest.Node, base k8stest.Layer) {
	img := &k8stest.Image{Name: "localhost/k8stest/base:1", Layers: []k8stest.Layer{base}}
	if err := n.Import(t, img); err != nil {
		t.Fatal(err)
	}
	no := false
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName:                     n.Name,
			HostNetwork:                  true,
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: &no,
			Containers: []corev1.Container{{
				Name: "c", Image: img.Name, ImagePullPolicy: corev1.PullNever,
				Command: []string{"/bin/sh", "-c", `echo -n hello > /dev/termination-log; exit 3`},
			}},
		},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	began := time.Now()
	if _, err := cp.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	term := k8stest.WaitTerminated(t, ctx, cp, "default", "hello", "c")
	t.Logf("the pod ended %.1f s after it was created", time.Since(began).Seconds())
	if term.ExitCode != 3 || term.Message != "hello" {
		t.Errorf("the container ended with exit code %d and message %q, want 3 and %q", term.ExitCode, term.Message, "hello")
	}
}
