package k8stest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/airlock-sandbox/airlock/internal/airtest"
)

// Env names the folder that holds bin/etcd, bin/kube-apiserver and
// bin/kubectl: what .ci/k8s prints.
const Env = "AIRLOCK_TEST_K8S"

// ServiceCIDRs are the API server's Service address ranges, IPv4 and
// IPv6 (dual-stack): a clusterIP a test pins must lie in one of them.
const ServiceCIDRs = "10.96.0.0/12,fd00:10:96::/112"

// Time limits. The API server is ready about 2 s after it starts on an
// idle machine; CI's 2 cores run other tests beside it.
const (
	readyTimeout = 2 * time.Minute
	stopGrace    = 10 * time.Second
	pollInterval = 50 * time.Millisecond
)

// ControlPlane is a running etcd and kube-apiserver. Its fields are set
// by Start and must not be changed.
type ControlPlane struct {
	// URL is the API server's address, https://127.0.0.1:PORT.
	URL string

	// Kubeconfig is the path of a kubeconfig file that authenticates as
	// an administrator (group system:masters) with a bearer token and
	// trusts only the generated CA. Config and Client are made from it.
	Kubeconfig string

	// Config is the client configuration for client-go. Warnings the
	// server sends (PodSecurity's among them) go to Warnings.
	Config *rest.Config

	// Client is a clientset made from Config.
	Client kubernetes.Interface

	// Warnings collects the warnings the API server sent to Client.
	Warnings *Warnings

	bin  string // folder of the binaries
	etcd *proc
	api  *proc
}

// Bin returns the folder of the binaries from Env, or skips t (fails it
// when AIRLOCK_TEST_STRICT=1) naming what is missing.
func Bin(t testing.TB) string {
	t.Helper()
	dir := os.Getenv(Env)
	if dir == "" {
		airtest.SkipOrFail(t, "%s is not set: build kube-apiserver and kubectl with .ci/k8s (as root; about 5 minutes once, then cached) and set %s to the folder it prints", Env, Env)
	}
	for _, b := range []string{"etcd", "kube-apiserver", "kubectl"} {
		p := filepath.Join(dir, "bin", b)
		if fi, err := os.Stat(p); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			airtest.SkipOrFail(t, "%s=%s has no executable bin/%s (%v): run .ci/k8s, which builds it or installs etcd-server", Env, dir, b, err)
		}
	}
	return filepath.Join(dir, "bin")
}

// Start starts etcd and kube-apiserver on free loopback ports and returns
// once the API server answers /readyz. It skips t when the binaries are
// absent (see Bin). Cleanup stops both and removes their folder.
func Start(t testing.TB) *ControlPlane {
	t.Helper()
	bin := Bin(t)
	// The folder is removed after the processes are stopped: Cleanup
	// functions run last-registered first.
	dir := t.TempDir()
	began := time.Now()
	var cp *ControlPlane
	var err error
	for attempt := 1; ; attempt++ {
		cp, err = start(bin, filepath.Join(dir, strconv.Itoa(attempt)))
		if err == nil || !errors.Is(err, errPortTaken) || attempt == 3 {
			break
		}
		t.Logf("k8stest: attempt %d: %v; trying other ports", attempt, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("k8stest: kube-apiserver's log ends:\n%s", cp.api.tail(20))
		}
		cp.stop()
	})
	t.Logf("k8stest: kube-apiserver ready at %s %.1f s after start", cp.URL, time.Since(began).Seconds())
	return cp
}

// start makes dir and starts the control plane in it. On error nothing
// is left running.
func start(bin, dir string) (cp *ControlPlane, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("k8stest: %w", err)
	}
	s, err := writeSecrets(dir, time.Now())
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(3) // etcd client, etcd peer, API server
	if err != nil {
		return nil, err
	}
	cp = &ControlPlane{bin: bin, URL: "https://127.0.0.1:" + strconv.Itoa(ports[2])}
	defer func() {
		if err != nil {
			cp.stop()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()

	etcdURL := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	peerURL := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	cp.etcd, err = startProc("etcd", filepath.Join(dir, "etcd.log"), []string{
		filepath.Join(bin, "etcd"),
		"--name=k8stest",
		"--data-dir=" + filepath.Join(dir, "etcd"),
		"--listen-client-urls=" + etcdURL, "--advertise-client-urls=" + etcdURL,
		"--listen-peer-urls=" + peerURL, "--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=k8stest=" + peerURL,
		"--logger=zap", "--log-outputs=stderr", "--log-level=warn",
	}, os.Environ())
	if err != nil {
		return cp, err
	}
	if err = cp.etcd.waitReady(ctx, pollInterval, httpOK(http.DefaultClient, etcdURL+"/health")); err != nil {
		return cp, err
	}

	cp.api, err = startProc("kube-apiserver", filepath.Join(dir, "kube-apiserver.log"), []string{
		filepath.Join(bin, "kube-apiserver"),
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(ports[2]),
		"--cert-dir=" + filepath.Join(dir, "certs"),
		"--tls-cert-file=" + s.certFile, "--tls-private-key-file=" + s.keyFile,
		"--token-auth-file=" + s.tokenFile,
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + s.saKeyFile,
		"--service-account-signing-key-file=" + s.saKeyFile,
		"--service-cluster-ip-range=" + ServiceCIDRs,
		// The default reconciler would publish 127.0.0.1 as the
		// kubernetes Service's endpoint, which the API server refuses
		// (a loopback endpoint); no pod runs here to use it.
		"--endpoint-reconciler-type=none",
		"--profiling=false",
	}, os.Environ())
	if err != nil {
		return cp, err
	}
	cp.Kubeconfig = filepath.Join(dir, "kubeconfig")
	if err = writeKubeconfig(cp.Kubeconfig, cp.URL, s); err != nil {
		return cp, err
	}
	kc, err := os.ReadFile(cp.Kubeconfig)
	if err != nil {
		return cp, fmt.Errorf("k8stest: %w", err)
	}
	if cp.Config, err = clientcmd.RESTConfigFromKubeConfig(kc); err != nil {
		return cp, fmt.Errorf("k8stest: kubeconfig: %w", err)
	}
	cp.Warnings = &Warnings{}
	cp.Config.WarningHandler = cp.Warnings
	hc, err := rest.HTTPClientFor(cp.Config)
	if err != nil {
		return cp, fmt.Errorf("k8stest: %w", err)
	}
	if err = cp.api.waitReady(ctx, pollInterval, httpOK(hc, cp.URL+"/readyz")); err != nil {
		return cp, err
	}
	if cp.Client, err = kubernetes.NewForConfigAndClient(cp.Config, hc); err != nil {
		return cp, fmt.Errorf("k8stest: %w", err)
	}
	// The kubeconfig's namespace is "default", which the API server's
	// bootstrap controller creates shortly after /readyz: wait for it,
	// and give it the account the controller-manager would.
	if err = cp.api.waitReady(ctx, pollInterval, func(ctx context.Context) error {
		_, err := cp.Client.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
		return err
	}); err != nil {
		return cp, err
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "default"}}
	if _, err = cp.Client.CoreV1().ServiceAccounts("default").Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return cp, fmt.Errorf("k8stest: create the default ServiceAccount of default: %w", err)
	}
	return cp, nil
}

// stop stops the API server, then etcd.
func (cp *ControlPlane) stop() {
	for _, p := range []*proc{cp.api, cp.etcd} {
		if p != nil {
			p.stop(stopGrace)
		}
	}
}

// Pids returns the process ids of etcd and kube-apiserver, for tests
// that check nothing is left behind.
func (cp *ControlPlane) Pids() []int {
	return []int{cp.etcd.cmd.Process.Pid, cp.api.cmd.Process.Pid}
}

// httpOK returns a check that GET url answers 200.
func httpOK(c *http.Client, url string) func(context.Context) error {
	return func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body) // only for the message below
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s: %.200s", url, resp.Status, b.String())
		}
		return nil
	}
}

// writeKubeconfig writes a kubeconfig for url with the token and CA of s.
func writeKubeconfig(path, url string, s *secrets) error {
	c := clientcmdapi.NewConfig()
	c.Clusters["k8stest"] = &clientcmdapi.Cluster{Server: url, CertificateAuthorityData: s.caPEM}
	c.AuthInfos[tokenUser] = &clientcmdapi.AuthInfo{Token: s.token}
	c.Contexts["k8stest"] = &clientcmdapi.Context{Cluster: "k8stest", AuthInfo: tokenUser, Namespace: "default"}
	c.CurrentContext = "k8stest"
	if err := clientcmd.WriteToFile(*c, path); err != nil {
		return fmt.Errorf("k8stest: kubeconfig: %w", err)
	}
	return nil
}

// Namespace creates the namespace name with labels, and in it the
// `default` ServiceAccount, which the controller-manager (not running
// here) would create. Leftovers go with the control plane.
func (cp *ControlPlane) Namespace(t testing.TB, name string, labels map[string]string) {
	t.Helper()
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if _, err := cp.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("k8stest: create namespace %s: %v", name, err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: name}}
	if _, err := cp.Client.CoreV1().ServiceAccounts(name).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("k8stest: create the default ServiceAccount of %s: %v", name, err)
	}
}

// KubectlResult is what one kubectl run printed and how it ended.
type KubectlResult struct {
	Stdout, Stderr string
	Err            error // nil when kubectl exited 0
}

// Kubectl runs the harness's kubectl with args against the control plane
// (--kubeconfig is added), with a bounded time.
func (cp *ControlPlane) Kubectl(t testing.TB, args ...string) KubectlResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(cp.bin, "kubectl"), append([]string{"--kubeconfig=" + cp.Kubeconfig}, args...)...)
	// The user's own kubeconfig and cache must not be read or written.
	cmd.Env = append(os.Environ(), "KUBECONFIG="+cp.Kubeconfig, "KUBECACHEDIR="+filepath.Join(t.TempDir(), "kubecache"))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return KubectlResult{Stdout: out.String(), Stderr: errb.String(), Err: err}
}
