package controller_test

import (
	"context"
	"io/fs"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	"github.com/airlock-sandbox/airlock/controller"
	"github.com/airlock-sandbox/airlock/controller/api/v1alpha1"
	"github.com/airlock-sandbox/airlock/internal/k8stest"
)

// waitTimeout bounds every wait on the controller: reconciles take
// milliseconds, but CI's 2 cores run other tests beside the API server.
const waitTimeout = 60 * time.Second

// env is a control plane with the CRDs installed and the controller
// running in this process against it.
type env struct {
	cp *k8stest.ControlPlane
	c  client.Client // uncached: what the API server holds
}

// startOptions varies how start runs the controller.
type startOptions struct {
	// asServiceAccount applies packaging/controller/ (the account's
	// rights in rbac.yaml, the admission policy that keeps the Pods to
	// it) and runs the manager as its ServiceAccount (impersonated), with
	// leader election in airlock-system; false runs it as the
	// administrator, with neither.
	asServiceAccount bool

	// opts are the controller's options; an empty AirlockImage is the
	// harness's operator image (k8stest.OperatorImage), pulled Never.
	opts controller.Options
}

// serviceAccount is the user rbac.yaml grants the controller's rights.
const serviceAccount = "system:serviceaccount:airlock-system:airlock-controller"

// start starts the control plane, installs the CRDs from the embedded
// files (as a cluster operator applies them) and runs the manager until
// t ends.
func start(t *testing.T, so startOptions) *env {
	t.Helper()
	cp := k8stest.Start(t)
	scheme, err := controller.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	// client-go's default rate limit (5 requests/s) would dominate every
	// wait and the latencies logged; a controller in a cluster sets its own.
	cfg := rest.CopyConfig(cp.Config)
	cfg.QPS, cfg.Burst = 200, 400
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	installCRDs(t, c)

	ctrl.SetLogger(logr.Discard())
	mo := ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  controller.CacheOptions(nil),
		// Each test function runs a manager of its own in this process.
		Controller: config.Controller{SkipNameValidation: ptr(true)},
	}
	mcfg := cfg
	if so.asServiceAccount {
		cp.Namespace(t, "airlock-system", nil)
		if r := cp.Kubectl(t, "apply", "-f", "../packaging/controller/"); r.Err != nil {
			t.Fatalf("kubectl apply packaging/controller/: %v\n%s", r.Err, r.Stderr)
		}
		mcfg = rest.CopyConfig(cfg)
		mcfg.Impersonate = rest.ImpersonationConfig{UserName: serviceAccount}
		mo.LeaderElection, mo.LeaderElectionNamespace, mo.LeaderElectionID = true, "airlock-system", "airlock-controller.airlock.dev"
		mo.LeaderElectionReleaseOnCancel = true
	}
	mgr, err := ctrl.NewManager(mcfg, mo)
	if err != nil {
		t.Fatal(err)
	}
	opts := so.opts
	if opts.AirlockImage == "" {
		opts.AirlockImage, opts.AirlockImagePullPolicy = k8stest.OperatorImage, corev1.PullNever
	}
	if err := controller.Setup(mgr, opts); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("manager: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("manager did not stop within 30s")
		}
	})
	wctx, wcancel := context.WithTimeout(ctx, waitTimeout)
	defer wcancel()
	if !mgr.GetCache().WaitForCacheSync(wctx) {
		t.Fatal("manager cache did not sync")
	}
	return &env{cp: cp, c: c}
}

func installCRDs(t *testing.T, c client.Client) {
	t.Helper()
	files, err := fs.Glob(v1alpha1.CRDs, "crd/*.yaml")
	if err != nil || len(files) != 2 {
		t.Fatalf("embedded CRDs: %v %v", files, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	for _, f := range files {
		b, err := v1alpha1.CRDs.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		crd := new(apiextensionsv1.CustomResourceDefinition)
		if err := yaml.UnmarshalStrict(b, crd); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if err := c.Create(ctx, crd); err != nil {
			t.Fatalf("install %s: %v", f, err)
		}
		waitFor(t, ctx, "CRD "+crd.Name+" established", func() (bool, error) {
			if err := c.Get(ctx, client.ObjectKeyFromObject(crd), crd); err != nil {
				return false, err
			}
			for _, cond := range crd.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					return true, nil
				}
			}
			return false, nil
		})
	}
}

// waitFor polls cond every 20 ms until it holds, fails, or ctx ends.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() (bool, error)) {
	t.Helper()
	waitEvery(t, ctx, what, 20*time.Millisecond, cond)
}

// waitEvery polls cond every tick until it holds, fails, or ctx ends.
func waitEvery(t *testing.T, ctx context.Context, what string, every time.Duration, cond func() (bool, error)) {
	t.Helper()
	tick := time.NewTicker(every)
	defer tick.Stop()
	var last error
	for {
		ok, err := cond()
		if ok {
			return
		}
		last = err
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v (last error: %v)", what, ctx.Err(), last)
		case <-tick.C:
		}
	}
}

// testCtx returns a context bounded by waitTimeout for one step of a test.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	t.Cleanup(cancel)
	return ctx
}

// namespace makes a namespace that enforces the restricted Pod Security
// level: every Pod the controller makes must pass it.
func (e *env) namespace(t *testing.T, name string) string {
	t.Helper()
	e.cp.Namespace(t, name, map[string]string{
		"pod-security.kubernetes.io/enforce":         "restricted",
		"pod-security.kubernetes.io/enforce-version": "latest",
	})
	return name
}

// sandbox waits until the Sandbox ns/name satisfies cond and returns it.
func (e *env) sandbox(t *testing.T, ctx context.Context, ns, name, what string, cond func(*v1alpha1.Sandbox) bool) *v1alpha1.Sandbox {
	t.Helper()
	sb := new(v1alpha1.Sandbox)
	waitFor(t, ctx, "sandbox "+name+": "+what, func() (bool, error) {
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, sb); err != nil {
			return false, err
		}
		return cond(sb), nil
	})
	return sb
}

// The simulated kubelet: there is no node in these tests, so the test
// writes the Pod status a kubelet would (the status subresource).

// runPod marks pod started, running and ready.
func (e *env) runPod(t *testing.T, ctx context.Context, pod *corev1.Pod) {
	t.Helper()
	if err := e.c.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	pod.Status = corev1.PodStatus{
		Phase: corev1.PodRunning, StartTime: &now,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "sandbox", Ready: true, Image: pod.Spec.Containers[0].Image, ImageID: "sha256:0",
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}},
	}
	if err := e.c.Status().Update(ctx, pod); err != nil {
		t.Fatalf("simulated kubelet: run pod %s: %v", pod.Name, err)
	}
}

// endPod marks pod's container terminated with code and the termination
// message msg.
func (e *env) endPod(t *testing.T, ctx context.Context, pod *corev1.Pod, code int32, msg string) {
	t.Helper()
	if err := e.c.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	phase := corev1.PodSucceeded
	if code != 0 {
		phase = corev1.PodFailed
	}
	started := now
	if pod.Status.StartTime != nil {
		started = *pod.Status.StartTime
	}
	pod.Status = corev1.PodStatus{
		Phase: phase, StartTime: &started,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: now}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "sandbox", Image: pod.Spec.Containers[0].Image, ImageID: "sha256:0",
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Message: msg, StartedAt: started, FinishedAt: now}}}},
	}
	if err := e.c.Status().Update(ctx, pod); err != nil {
		t.Fatalf("simulated kubelet: end pod %s: %v", pod.Name, err)
	}
}

func ptr[T any](v T) *T { return &v }
