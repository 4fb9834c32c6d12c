package k8stest_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/airlock-sandbox/airlock/internal/k8stest"
)

// TestControlPlane starts a control plane in a subtest, uses it through
// the clientset and through kubectl with the kubeconfig, and checks after
// the subtest that both processes are gone and the folder removed.
func TestControlPlane(t *testing.T) {
	var (
		pids []int
		kc   string
	)
	t.Run("up", func(t *testing.T) {
		cp := k8stest.Start(t)
		pids, kc = cp.Pids(), cp.Kubeconfig
		ctx := context.Background()
		v, err := cp.Client.Discovery().ServerVersion()
		if err != nil || v.GitVersion != "v1.37.2" {
			t.Errorf("ServerVersion = %v, %v; want v1.37.2, the version .ci/k8s builds", v, err)
		}

		cp.Namespace(t, "k8stest-a", map[string]string{"team": "a"})
		ns, err := cp.Client.CoreV1().Namespaces().Get(ctx, "k8stest-a", metav1.GetOptions{})
		if err != nil || ns.Labels["team"] != "a" {
			t.Errorf("namespace k8stest-a: %v, labels %v", err, ns.Labels)
		}
		r := cp.Kubectl(t, "get", "serviceaccount", "default", "--namespace=k8stest-a", "-o", "name")
		if r.Err != nil || strings.TrimSpace(r.Stdout) != "serviceaccount/default" {
			t.Errorf("kubectl get serviceaccount default: %v, stdout %q, stderr %q", r.Err, r.Stdout, r.Stderr)
		}

		// The admission plugins a cluster has run here: a Pod whose
		// account is missing is refused, one with the default account is
		// stored (and never runs: there is no scheduler or kubelet).
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "p"},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.example/x:1"}}},
		}
		missing := pod.DeepCopy()
		missing.Spec.ServiceAccountName = "nobody"
		if _, err := cp.Client.CoreV1().Pods("k8stest-a").Create(ctx, missing, metav1.CreateOptions{}); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "nobody") {
			t.Errorf("create a Pod of a missing ServiceAccount = %v, want forbidden by the ServiceAccount admission plugin", err)
		}
		if _, err := cp.Client.CoreV1().Pods("k8stest-a").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Errorf("create a Pod of the default ServiceAccount: %v", err)
		}

		// Only the token authenticates: an anonymous request is refused.
		resp, err := insecureGet(cp.URL + "/api/v1/namespaces")
		if err != nil || (resp != http.StatusUnauthorized && resp != http.StatusForbidden) {
			t.Errorf("anonymous GET /api/v1/namespaces = %d, %v; want 401 or 403", resp, err)
		}
	})
	if pids == nil {
		return // skipped or failed before the control plane was up
	}
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("pid %d is still running after the test's Cleanup", pid)
		}
	}
	if _, err := os.Stat(filepath.Dir(kc)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the control plane's folder %s is still there after the test: %v", filepath.Dir(kc), err)
	}
}

// TestNamespaceCreatesAccount: every namespace Namespace makes has the
// default ServiceAccount the controller-manager would have made.
func TestNamespaceCreatesAccount(t *testing.T) {
	cp := k8stest.Start(t)
	for _, ns := range []string{"k8stest-b", "k8stest-c"} {
		cp.Namespace(t, ns, nil)
		if _, err := cp.Client.CoreV1().ServiceAccounts(ns).Get(context.Background(), "default", metav1.GetOptions{}); err != nil {
			t.Errorf("namespace %s has no default ServiceAccount: %v", ns, err)
		}
	}
}

// insecureGet sends an anonymous GET, trusting any certificate, and
// returns the status code.
func insecureGet(url string) (int, error) {
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// alive reports whether pid runs: it exists and is not a zombie (an
// orphan waits for init to reap it).
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return runtime.GOOS != "linux" // no /proc to tell a zombie: kill found it
	}
	// pid (comm) state ...: comm may hold spaces and parentheses.
	s := string(b)
	rest := s[strings.LastIndexByte(s, ')')+1:]
	f := strings.Fields(rest)
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}
