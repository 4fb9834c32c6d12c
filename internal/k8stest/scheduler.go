package k8stest

import (
	"context"
	"crypto/tls"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// StartScheduler starts kube-scheduler (built by .ci/k8s) against the
// control plane, so that Pods that name no node are placed, as in a
// cluster; it returns once its /healthz answers. Cleanup stops it.
func (cp *ControlPlane) StartScheduler(t testing.TB) {
	t.Helper()
	bin := filepath.Join(cp.bin, "kube-scheduler")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("k8stest: %s: %v: run .ci/k8s again, which builds it", bin, err)
	}
	ports, err := freePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p, err := startProc("kube-scheduler", filepath.Join(dir, "kube-scheduler.log"), []string{
		bin,
		"--kubeconfig=" + cp.Kubeconfig,
		"--authentication-kubeconfig=" + cp.Kubeconfig,
		"--authorization-kubeconfig=" + cp.Kubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(ports[0]),
		"--cert-dir=" + filepath.Join(dir, "certs"),
		"--leader-elect=false",
	}, os.Environ())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("k8stest: kube-scheduler's log ends:\n%s", p.tail(20))
		}
		p.stop(stopGrace)
	})
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	// Its serving certificate is self-signed, made at start; /healthz is
	// open to anyone, and nothing but the status is read.
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // #nosec G402 -- loopback health check of a process this test started
	if err := p.waitReady(ctx, pollInterval, httpOK(hc, "https://127.0.0.1:"+strconv.Itoa(ports[0])+"/healthz")); err != nil {
		t.Fatal(err)
	}
}
