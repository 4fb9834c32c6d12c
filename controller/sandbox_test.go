package controller_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/controller"
	"github.com/airlock-sandbox/airlock/controller/api/v1alpha1"
	"github.com/airlock-sandbox/airlock/internal/k8stest"
)

// podPolicy is a policy a Pod can enforce.
const podPolicy = `version: 1
fs_read: [/data]
net_hosts: [api.example.com]
allow_downgrade: [max_memory, max_cpu, max_pids]
budget:
  max_wall: 30s
  max_memory: 256MiB
`

// TestController runs the controller in this process against a real
// kube-apiserver (k8stest) with the CRDs installed. No kubelet runs:
// the test writes the Pod status a kubelet would.
func TestController(t *testing.T) {
	e := start(t, startOptions{})
	t.Run("Lifecycle", func(t *testing.T) { testLifecycle(t, e) })
	t.Run("InvalidPolicy", func(t *testing.T) { testInvalidPolicy(t, e) })
	t.Run("Schema", func(t *testing.T) { testSchema(t, e) })
	t.Run("Outcomes", func(t *testing.T) { testOutcomes(t, e) })
	t.Run("WarmPool", func(t *testing.T) { testWarmPool(t, e) })
	t.Run("ConcurrentClaims", func(t *testing.T) { testConcurrentClaims(t, e) })
	t.Run("PoolUpkeep", func(t *testing.T) { testPoolUpkeep(t, e) })
	t.Run("PoolFailure", func(t *testing.T) { testPoolFailure(t, e) })
	t.Run("BigCommand", func(t *testing.T) { testBigCommand(t, e) })
	t.Run("Latency", func(t *testing.T) { testLatency(t, e) })
}

// TestControllerRBAC runs the controller as the ServiceAccount of
// packaging/controller/rbac.yaml, with leader election: the life of a
// Sandbox and the warm pool work with exactly those rights (a missing
// one would leave a test waiting for what the controller was refused),
// and the account can do nothing else, such as read Secrets.
func TestControllerRBAC(t *testing.T) {
	e := start(t, startOptions{asServiceAccount: true})
	t.Run("Lifecycle", func(t *testing.T) { testLifecycle(t, e) })
	t.Run("WarmPool", func(t *testing.T) { testWarmPool(t, e) })
	t.Run("TenantEdits", func(t *testing.T) { testTenantEdits(t, e) })
	for _, verb := range []string{"list secrets", "delete sandboxes", "update sandboxes", "patch configmaps", "create pods --subresource=exec", "create configmaps", "create pods"} {
		args := append([]string{"auth", "can-i"}, strings.Fields(verb)...)
		r := e.cp.Kubectl(t, append(args, "--all-namespaces", "--as", serviceAccount)...)
		if got, want := strings.TrimSpace(r.Stdout), map[bool]string{true: "yes", false: "no"}[verb == "create pods"]; got != want {
			t.Errorf("kubectl auth can-i %s as the controller's account: %q, want %s", verb, r.Stdout, want)
		}
	}
}

// owned reports whether obj's controller is the object uid.
func owned(obj metav1.Object, kind string, uid types.UID) bool {
	ref := metav1.GetControllerOf(obj)
	return ref != nil && ref.Kind == kind && ref.UID == uid && ref.APIVersion == "airlock.dev/v1alpha1" && ref.BlockOwnerDeletion != nil && *ref.BlockOwnerDeletion
}

// testLifecycle: a Sandbox gets a hardened Pod (admitted by a restricted
// namespace) running airlock run, installed from the operator's image by
// an init container, under its policy (in the Pod's own spec: no
// ConfigMap); the status names the policy's and the Pod's digests; the
// simulated kubelet's states reach the status, with the
// report from the termination message; deleting the Sandbox leaves only
// objects whose owner is gone, which the garbage collector removes.
func testLifecycle(t *testing.T, e *env) {
	ctx := testCtx(t)
	ns := e.namespace(t, "lifecycle")
	sb := &v1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "job"},
		Spec: v1alpha1.SandboxSpec{Policy: podPolicy, Image: "registry.example/agent:1", Command: []string{"python3", "/data/job.py", "--flag"}}}
	if err := e.c.Create(ctx, sb); err != nil {
		t.Fatal(err)
	}
	got := e.sandbox(t, ctx, ns, "job", "a pod", func(s *v1alpha1.Sandbox) bool { return s.Status.PodName != "" })
	if got.Status.Phase != v1alpha1.PhasePending || got.Status.Warm {
		t.Errorf("status = %+v, want Pending, not warm", got.Status)
	}
	if c := meta.FindStatusCondition(got.Status.Conditions, controller.CondReady); c == nil || c.Status != metav1.ConditionTrue || c.Reason != controller.ReasonBound {
		t.Errorf("Ready condition = %+v, want True %s", c, controller.ReasonBound)
	}
	var pod corev1.Pod
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: got.Status.PodName}, &pod); err != nil {
		t.Fatal(err)
	}
	if !owned(&pod, "Sandbox", got.UID) {
		t.Errorf("pod ownerReferences = %+v, want the Sandbox as controller", pod.OwnerReferences)
	}
	checkHardened(t, &pod, 30+60)
	wantCmd := []string{"/.airlock/airlock", "run", "--isolation", "landlock", "--policy", "/.airlock/policy.yaml",
		"--summary-file", "/dev/termination-log", "--", "python3", "/data/job.py", "--flag"}
	if c := pod.Spec.Containers[0]; !slices.Equal(c.Command, wantCmd) || c.TerminationMessagePath != "/dev/termination-log" || c.Image != "registry.example/agent:1" {
		t.Errorf("container image %s, command %q (termination message %s), want %q", c.Image, c.Command, c.TerminationMessagePath, wantCmd)
	}
	checkEnforcer(t, &pod)
	if got := policyOf(t, ctx, e.c, &pod); got != podPolicy {
		t.Errorf("the pod's policy is %q, want the Sandbox's", got)
	}
	if got.Status.PolicyDigest != controller.PolicyDigest(podPolicy) || !strings.HasPrefix(got.Status.PodDigest, "sha256:") {
		t.Errorf("status policyDigest %q, podDigest %q; want %s and the pod's digest", got.Status.PolicyDigest, got.Status.PodDigest, controller.PolicyDigest(podPolicy))
	}
	var cms corev1.ConfigMapList
	if err := e.c.List(ctx, &cms, client.InNamespace(ns)); err != nil || len(cms.Items) > 1 { // kube-root-ca.crt, where its controller runs
		t.Errorf("configmaps in %s: %d (%v), want none of the controller's: a Pod's policy is in its spec", ns, len(cms.Items), err)
	}

	e.runPod(t, ctx, &pod)
	got = e.sandbox(t, ctx, ns, "job", "Running", func(s *v1alpha1.Sandbox) bool { return s.Status.Phase == v1alpha1.PhaseRunning })
	if got.Status.StartTime == nil {
		t.Error("Running without a startTime")
	}

	halt := "max_wall"
	rep := api.Report{ExitCode: 124, HaltedBy: &halt, DurationMS: 30001, Stdout: strings.Repeat("row\n", 5000),
		Denials:      []api.Denial{{Layer: "net", Op: "connect", Target: "evil.example:443", Rule: "net_hosts", Message: "evil.example is not in net_hosts", Count: 2}},
		DenialCounts: api.DenialCounts{Total: 2}, Enforcement: api.Enforcement{Backend: "landlock"}}
	msg, err := api.Summarize(&rep, api.MaxTerminationMessage)
	if err != nil {
		t.Fatal(err)
	}
	e.endPod(t, ctx, &pod, 124, string(msg))
	got = e.sandbox(t, ctx, ns, "job", "Failed", func(s *v1alpha1.Sandbox) bool { return s.Status.Phase == v1alpha1.PhaseFailed })
	r := got.Status.Report
	if got.Status.ExitCode == nil || *got.Status.ExitCode != 124 || got.Status.FinishTime == nil || r == nil {
		t.Fatalf("final status = %+v, want exit 124, a finish time and a report", got.Status)
	}
	if r.HaltedBy != "max_wall" || r.DenialsTotal != 2 || len(r.Denials) != 1 || r.Denials[0].Target != "evil.example:443" || !slices.Contains(r.Truncated, "stdout") || !strings.HasSuffix(r.Stdout, "row\n") {
		t.Errorf("status.report = %+v, want the halt, the denial and stdout's tail marked truncated", r)
	}

	// Deleting the Sandbox (background, kubectl's default) removes it at
	// once; what it owned stays until the garbage collector, which runs
	// in the controller-manager (not here), removes objects whose owner
	// is gone. The controller makes nothing more.
	if err := e.c.Delete(ctx, got); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "sandbox gone", func() (bool, error) {
		err := e.c.Get(ctx, client.ObjectKeyFromObject(got), &v1alpha1.Sandbox{})
		return apierrors.IsNotFound(err), nil
	})
	var pods corev1.PodList
	if err := e.c.List(ctx, &pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 1 || !owned(&pods.Items[0], "Sandbox", got.UID) {
		t.Errorf("after the delete: %d pods, want the one whose controller is the deleted Sandbox (the garbage collector's to remove)", len(pods.Items))
	}
}

// checkEnforcer checks that pod runs airlock from the operator's image:
// an init container of k8stest.OperatorImage installs it into an
// emptyDir that the sandbox container mounts read-only where its
// command's airlock is, and the sandbox container pins the environment
// airlock reads.
func checkEnforcer(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	s := pod.Spec
	if len(s.InitContainers) != 1 {
		t.Fatalf("pod %s has %d init containers, want the enforcer's", pod.Name, len(s.InitContainers))
	}
	ic := s.InitContainers[0]
	if ic.Image != k8stest.OperatorImage || ic.ImagePullPolicy != corev1.PullNever || !slices.Equal(ic.Command, []string{"/usr/local/bin/airlock-controller", "install", "/.airlock"}) {
		t.Errorf("init container image %s (pull %s) command %q, want the operator's image installing into /.airlock", ic.Image, ic.ImagePullPolicy, ic.Command)
	}
	if sc := ic.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.RunAsUser == nil || *sc.RunAsUser != 65532 {
		t.Errorf("init container securityContext %+v, want the hardened one", sc)
	}
	c := s.Containers[0]
	ro := slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.MountPath == "/.airlock" && m.ReadOnly && slices.ContainsFunc(s.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name && v.EmptyDir != nil })
	})
	if !ro || c.Command[0] != "/.airlock/airlock" {
		t.Errorf("sandbox container runs %s with mounts %+v: want airlock from a read-only emptyDir at /.airlock", c.Command[0], c.VolumeMounts)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	for _, name := range []string{"GODEBUG", "GOGC", "GOMEMLIMIT", "GOMAXPROCS", "GOTRACEBACK", "TMPDIR", "HOME", "XDG_CACHE_HOME", "TZ"} {
		if _, ok := env[name]; !ok {
			t.Errorf("sandbox container does not pin %s over its image's", name)
		}
	}
	if env["TMPDIR"] != "/tmp" {
		t.Errorf("sandbox container TMPDIR %q, want /tmp (the sized volume)", env["TMPDIR"])
	}
}

// checkHardened checks what export/k8s's Harden sets, and the deadline.
func checkHardened(t *testing.T, pod *corev1.Pod, deadline int64) {
	t.Helper()
	s := pod.Spec
	if s.AutomountServiceAccountToken == nil || *s.AutomountServiceAccountToken || s.RestartPolicy != corev1.RestartPolicyNever ||
		s.ActiveDeadlineSeconds == nil || *s.ActiveDeadlineSeconds != deadline || s.EnableServiceLinks == nil || *s.EnableServiceLinks {
		t.Errorf("pod spec: token %v, restart %s, deadline %v (want %d), service links %v", s.AutomountServiceAccountToken, s.RestartPolicy, s.ActiveDeadlineSeconds, deadline, s.EnableServiceLinks)
	}
	c := s.Containers[0].SecurityContext
	if c == nil || c.RunAsNonRoot == nil || !*c.RunAsNonRoot || c.RunAsUser == nil || *c.RunAsUser != 65532 || c.ReadOnlyRootFilesystem == nil || !*c.ReadOnlyRootFilesystem ||
		c.AllowPrivilegeEscalation == nil || *c.AllowPrivilegeEscalation || c.Capabilities == nil || !slices.Equal(c.Capabilities.Drop, []corev1.Capability{"ALL"}) ||
		c.SeccompProfile == nil || c.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("container securityContext = %+v, want non-root 65532, read-only root, no escalation, drop ALL, RuntimeDefault seccomp", c)
	}
	if _, ok := s.Containers[0].Resources.Limits[corev1.ResourceMemory]; !ok {
		t.Errorf("no memory limit: %+v", s.Containers[0].Resources)
	}
}

// testInvalidPolicy: a policy airlock refuses, or a Pod could not
// enforce, gets Ready=False InvalidPolicy with a message naming what is
// wrong, phase Failed, and no Pod or ConfigMap.
func testInvalidPolicy(t *testing.T, e *env) {
	ns := e.namespace(t, "invalid")
	tests := []struct {
		name, policy string
		want         []string
	}{
		{"unknown-key", "version: 1\ncolour: blue\nallow_downgrade: [max_memory, max_cpu, max_pids]\n", []string{"spec.policy:2:1", "colour"}},
		{"relative-path", "version: 1\nfs_read: [./data]\nallow_downgrade: [max_memory, max_cpu, max_pids]\n", []string{"spec.policy:2", "./data"}},
		{"bad-budget", "version: 1\nbudget: {max_wall: 99h}\nallow_downgrade: [max_memory, max_cpu, max_pids]\n", []string{"max_wall"}},
		{"no-cgroup-downgrades", "version: 1\n", []string{"allow_downgrade lacks max_memory, max_cpu, max_pids"}},
		{"fs-write", "version: 1\nfs_write: [/out]\nallow_downgrade: [max_memory, max_cpu, max_pids]\n", []string{"fs_write: a controller Pod has no writable volume"}},
		{"fs-deny", "version: 1\nfs_read: [/data]\nfs_deny: [/data/secret]\nallow_downgrade: [max_memory, max_cpu, max_pids]\n", []string{"fs_deny /data/secret"}},
	}
	ctx := testCtx(t)
	for _, tt := range tests {
		sb := &v1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: tt.name},
			Spec: v1alpha1.SandboxSpec{Policy: tt.policy, Image: "img", Command: []string{"true"}}}
		if err := e.c.Create(ctx, sb); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := e.sandbox(t, ctx, ns, tt.name, "refused", func(s *v1alpha1.Sandbox) bool { return s.Status.Phase != "" })
			c := meta.FindStatusCondition(got.Status.Conditions, controller.CondReady)
			if got.Status.Phase != v1alpha1.PhaseFailed || c == nil || c.Status != metav1.ConditionFalse || c.Reason != controller.ReasonInvalidPolicy {
				t.Fatalf("status = %+v, want Failed with Ready=False %s", got.Status, controller.ReasonInvalidPolicy)
			}
			t.Logf("message: %s", c.Message)
			for _, w := range tt.want {
				if !strings.Contains(c.Message, w) {
					t.Errorf("message %q does not name %q", c.Message, w)
				}
			}
			if got.Status.PodName != "" {
				t.Errorf("podName = %q, want none", got.Status.PodName)
			}
		})
	}
	// Every status above was written after its reconcile decided: no Pod
	// or ConfigMap exists in the namespace.
	var pods corev1.PodList
	var cms corev1.ConfigMapList
	if err := e.c.List(ctx, &pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if err := e.c.List(ctx, &cms, client.InNamespace(ns), client.MatchingLabels{controller.LabelManagedBy: controller.ManagedBy}); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items)+len(cms.Items) != 0 {
		t.Errorf("invalid policies got %d pods and %d configmaps, want none", len(pods.Items), len(cms.Items))
	}
}

// testSchema: the CRD's schema and CEL rules refuse malformed Sandboxes
// at the API server, with messages naming the field.
func testSchema(t *testing.T, e *env) {
	ns := e.namespace(t, "schema")
	ctx := testCtx(t)
	tests := []struct {
		name string
		spec v1alpha1.SandboxSpec
		want string
	}{
		{"no-command", v1alpha1.SandboxSpec{Policy: podPolicy, Image: "img"}, "spec.command"},
		{"empty-program", v1alpha1.SandboxSpec{Policy: podPolicy, Image: "img", Command: []string{""}}, "command[0] names the program"},
		{"both", v1alpha1.SandboxSpec{Policy: podPolicy, Image: "img", Command: []string{"true"}, TemplateRef: &v1alpha1.TemplateRef{Name: "t"}}, "set exactly one of policy"},
		{"neither", v1alpha1.SandboxSpec{Command: []string{"true"}}, "set exactly one of policy"},
		{"no-image", v1alpha1.SandboxSpec{Policy: podPolicy, Command: []string{"true"}}, "image is required with policy"},
		{"template-image", v1alpha1.SandboxSpec{TemplateRef: &v1alpha1.TemplateRef{Name: "t"}, Image: "img", Command: []string{"true"}}, "image comes from the template"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sb := &v1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: tt.name}, Spec: tt.spec}
			err := e.c.Create(ctx, sb)
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("create: %v, want Invalid naming %q", err, tt.want)
			}
		})
	}
	t.Run("immutable", func(t *testing.T) {
		sb := &v1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "immutable"},
			Spec: v1alpha1.SandboxSpec{Policy: podPolicy, Image: "img", Command: []string{"true"}}}
		if err := e.c.Create(ctx, sb); err != nil {
			t.Fatal(err)
		}
		orig := sb.DeepCopy()
		sb.Spec.Command = []string{"sh", "-c", "evil"}
		// A merge patch: no resourceVersion, so only the rule can refuse it.
		if err := e.c.Patch(ctx, sb, client.MergeFrom(orig)); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec is immutable") {
			t.Errorf("update of spec.command: %v, want Invalid: spec is immutable", err)
		}
	})
	t.Run("template-pool-bound", func(t *testing.T) {
		tp := &v1alpha1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "huge"},
			Spec: v1alpha1.SandboxTemplateSpec{Policy: podPolicy, Image: "img", WarmPool: 1000}}
		if err := e.c.Create(ctx, tp); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.warmPool") {
			t.Errorf("create template with warmPool 1000: %v, want Invalid naming spec.warmPool", err)
		}
	})
}

// summary is the termination message of a run that exited code.
func summary(t *testing.T, code int) string {
	t.Helper()
	b, err := json.Marshal(api.Summary{ExitCode: code, Backend: "landlock"})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
