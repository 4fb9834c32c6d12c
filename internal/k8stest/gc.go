package k8stest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// StartGarbageCollector starts kube-controller-manager with its garbage
// collector alone (and the ServiceAccount controller), so that objects
// owned by a deleted object are deleted, as in a cluster. It waits until
// the collector deletes an orphan it makes for the purpose. Cleanup stops
// it. It skips or fails like Bin when the binary is missing.
func (cp *ControlPlane) StartGarbageCollector(t testing.TB) {
	t.Helper()
	bin := filepath.Join(cp.bin, "kube-controller-manager")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("k8stest: %s: %v: run .ci/k8s again, which builds it", bin, err)
	}
	dir := t.TempDir()
	p, err := startProc("kube-controller-manager", filepath.Join(dir, "kube-controller-manager.log"), []string{
		bin,
		"--kubeconfig=" + cp.Kubeconfig,
		"--controllers=garbagecollector,serviceaccount",
		"--secure-port=0",
		"--leader-elect=false",
		"--use-service-account-credentials=false",
		"--concurrent-gc-syncs=2",
	}, os.Environ())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("k8stest: kube-controller-manager's log ends:\n%s", p.tail(20))
		}
		p.stop(stopGrace)
	})
	// The collector works once its graph has synced: an object owned by
	// one that no longer exists goes away then.
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	began := time.Now()
	owner, err := cp.Client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "k8stest-gc-owner-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	orphan := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "k8stest-gc-orphan-", OwnerReferences: []metav1.OwnerReference{{
		APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID,
	}}}}
	if orphan, err = cp.Client.CoreV1().ConfigMaps("default").Create(ctx, orphan, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cp.Client.CoreV1().ConfigMaps("default").Delete(ctx, owner.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := p.waitReady(ctx, 200*time.Millisecond, func(ctx context.Context) error {
		if _, err := cp.Client.CoreV1().ConfigMaps("default").Get(ctx, orphan.Name, metav1.GetOptions{}); err == nil {
			return fmt.Errorf("the garbage collector has not deleted %s, whose owner is gone", orphan.Name)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("k8stest: garbage collector working %.1f s after start", time.Since(began).Seconds())
}
