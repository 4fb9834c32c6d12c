package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/airlock-sandbox/airlock/internal/k8stest"
)

// controllerBin is the binary built once by TestMain.
var controllerBin string

func TestMain(m *testing.M) {
	os.Exit(buildAndRun(m))
}

func buildAndRun(m *testing.M) int {
	dir, err := os.MkdirTemp("", "airlock-controller-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	controllerBin = filepath.Join(dir, "airlock-controller")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// go test puts $GOROOT/bin first on PATH.
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", controllerBin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build -o %s .: %v\n%s", controllerBin, err, out)
		return 1
	}
	return m.Run()
}

// TestUsage: --help prints the usage and succeeds, with or without the
// command name airlock passes first; a bad flag or an argument is a usage
// error (exit 2), and version prints the version.
func TestUsage(t *testing.T) {
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"controller", "--help"}, 0, "usage: airlock controller"},
		{[]string{"-h"}, 0, "usage: airlock controller"},
		{[]string{"controller", "--no-such-flag"}, 2, "no-such-flag"},
		{[]string{"controller", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"controller"}, 2, "--airlock-image is required"},
		{[]string{"controller", "--airlock", "/usr/local/bin/airlock"}, 2, "flag provided but not defined: -airlock"},
		{[]string{"controller", "--airlock-image", "op@sha256:0", "--airlock-image-pull-policy", "Sometimes"}, 2, `image pull policy "Sometimes": use Always, IfNotPresent or Never`},
		{[]string{"install"}, 2, "want one absolute DIR"},
		{[]string{"install", "/nonexistent-dir"}, 1, "the policy in AIRLOCK_POLICY is 0 bytes"},
		{[]string{"controller", "--airlock-image", "op", "--warm-lifetime", "0s"}, 2, "--warm-lifetime must be positive"},
		{[]string{"controller", "--airlock-image", "op", "--workers", "0"}, 2, "--workers 0: use 1 to 64"},
		{[]string{"controller", "--airlock-image", "op", "--pod-seccomp", "Localhost//etc/x"}, 2, "--pod-seccomp: seccomp profile"},
		{[]string{"controller", "--airlock-image", "op", "--pod-seccomp", "Localhost/a/../../b"}, 2, "no .. element"},
		{[]string{"controller", "--airlock-image", "op", "--pod-seccomp", "unconfined"}, 2, "use RuntimeDefault, Unconfined or Localhost/PATH"},
		{[]string{"version"}, 0, "airlock-controller "},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, controllerBin, tt.args...)
		out, _ := cmd.CombinedOutput() // the exit status is checked below
		cancel()
		if code := cmd.ProcessState.ExitCode(); code != tt.code || !strings.Contains(string(out), tt.want) {
			t.Errorf("airlock-controller %q: exit %d, want %d, output naming %q:\n%s", tt.args, code, tt.code, tt.want, out)
		}
	}
}

// TestControllerCommand runs `airlock-controller controller` as the README
// says, against a real kube-apiserver: the CRDs applied with kubectl from
// the repository's folder, the examples applied, and a Pod for each
// Sandbox made by the binary (the reconcile tests are in controller/). It
// serves /readyz, watches only its --namespace, and SIGTERM stops it with
// exit 0.
func TestControllerCommand(t *testing.T) {
	cp := k8stest.Start(t)
	if r := cp.Kubectl(t, "apply", "-f", "../../controller/api/v1alpha1/crd/"); r.Err != nil {
		t.Fatalf("kubectl apply the CRDs: %v\n%s", r.Err, r.Stderr)
	}
	if r := cp.Kubectl(t, "wait", "--for=condition=established", "--timeout=60s", "crd/sandboxes.airlock.dev", "crd/sandboxtemplates.airlock.dev"); r.Err != nil {
		t.Fatalf("kubectl wait: %v\n%s", r.Err, r.Stderr)
	}
	cp.Namespace(t, "watched", nil)
	cp.Namespace(t, "other", nil)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	health := l.Addr().String()
	l.Close() // the controller binds it next; a race with another process is unlikely on loopback

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, controllerBin, "controller", "--kubeconfig", cp.Kubeconfig, "--namespace", "watched", "--health-addr", health,
		"--airlock-image", "registry.example/airlock@sha256:"+strings.Repeat("0", 64), "--airlock-image-pull-policy", "Always")
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill() // the test has failed already
			<-exited
		}
		if t.Failed() {
			t.Logf("controller's log:\n%s", logs.String())
		}
	}()

	for _, ns := range []string{"watched", "other"} {
		if r := cp.Kubectl(t, "apply", "-n", ns, "-f", "../../examples/k8s/sandbox.yaml", "-f", "../../examples/k8s/template.yaml"); r.Err != nil {
			t.Fatalf("kubectl apply the examples in %s: %v\n%s", ns, r.Err, r.Stderr)
		}
	}
	poll := time.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
	for {
		pods, err := cp.Client.CoreV1().Pods("watched").List(ctx, metav1.ListOptions{})
		// csv and quick (no warm Pod is ready: no kubelet) get a Pod
		// each, and the template 2 warm ones.
		if err == nil && len(pods.Items) == 4 && ready(ctx, health) {
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("controller exited: %v", err)
		case <-ctx.Done():
			t.Fatalf("no 4 pods in watched and a ready controller within the time: %v (last error %v, %d pods)", ctx.Err(), err, len(pods.Items))
		case <-poll.C:
		}
	}
	sbx, err := cp.Client.CoreV1().Pods("watched").List(ctx, metav1.ListOptions{LabelSelector: "airlock.dev/sandbox-uid"})
	if err != nil {
		t.Fatal(err)
	}
	var pod *corev1.Pod
	for i := range sbx.Items {
		if strings.HasPrefix(sbx.Items[i].Name, "csv-sbx-") {
			pod = &sbx.Items[i]
		}
	}
	if pod == nil {
		t.Fatalf("no pod csv-sbx-* among %d sandbox pods", len(sbx.Items))
	}
	if got := strings.Join(pod.Spec.Containers[0].Command, " "); got != "/.airlock/airlock run --isolation landlock --policy /.airlock/policy.yaml --summary-file /dev/termination-log -- python3 /data/analyse.py" {
		t.Errorf("csv's pod command = %q", got)
	}
	if ic := pod.Spec.InitContainers; len(ic) != 1 || ic[0].Image != "registry.example/airlock@sha256:"+strings.Repeat("0", 64) || ic[0].ImagePullPolicy != corev1.PullAlways {
		t.Errorf("csv's pod init containers = %+v, want the enforcer's from --airlock-image, pulled Always", ic)
	}
	if pods, err := cp.Client.CoreV1().Pods("other").List(ctx, metav1.ListOptions{}); err != nil || len(pods.Items) != 0 {
		t.Errorf("namespace other, not watched: %d pods (%v), want none", len(pods.Items), err)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("controller after SIGTERM: %v, want exit 0", err)
		}
	case <-ctx.Done():
		t.Fatal("controller did not stop after SIGTERM")
	}
}

// ready reports whether the controller's /readyz answers 200.
func ready(ctx context.Context, addr string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s/readyz", addr), nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
