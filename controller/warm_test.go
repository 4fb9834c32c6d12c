package controller_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/airlock-sandbox/airlock/controller"
	"github.com/airlock-sandbox/airlock/controller/api/v1alpha1"
)

// warmPods lists the unclaimed warm Pods of template in ns.
func (e *env) warmPods(t *testing.T, ctx context.Context, ns, template string) []corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	if err := e.c.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{controller.LabelTemplate: template, controller.LabelPool: controller.PoolWarm}); err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

// waitPool waits until template has n unclaimed warm Pods and returns them.
func (e *env) waitPool(t *testing.T, ctx context.Context, ns, template string, n int) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	waitFor(t, ctx, fmt.Sprintf("%d warm pods of %s", n, template), func() (bool, error) {
		pods = e.warmPods(t, ctx, ns, template)
		return len(pods) == n, nil
	})
	return pods
}

// claimAndWait creates a Sandbox claiming template and returns it once
// its status names a Pod.
func (e *env) claimAndWait(t *testing.T, ctx context.Context, ns, name, template string, argv []string) *v1alpha1.Sandbox {
	t.Helper()
	sb := &v1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.SandboxSpec{TemplateRef: &v1alpha1.TemplateRef{Name: template}, Command: argv}}
	if err := e.c.Create(ctx, sb); err != nil {
		t.Fatal(err)
	}
	return e.sandbox(t, ctx, ns, name, "bound", func(s *v1alpha1.Sandbox) bool { return s.Status.PodName != "" })
}

// testWarmPool: a template with warmPool 2 gets 2 hardened warm Pods that
// wait for their command through a downward-API file; a claim is bound to
// a ready one (the command as its annotation, the Sandbox its controller,
// its deadline cut to the run's), the pool refills, a claim with no ready
// warm Pod gets a new Pod, and the warm run's report reaches the status.
// An invalid template makes no warm Pod and its claims wait, saying why.
func testWarmPool(t *testing.T, e *env) {
	ctx := testCtx(t)
	ns := e.namespace(t, "warm")
	tp := &v1alpha1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "py"},
		Spec: v1alpha1.SandboxTemplateSpec{Policy: podPolicy, Image: "registry.example/agent:1", WarmPool: 2}}
	if err := e.c.Create(ctx, tp); err != nil {
		t.Fatal(err)
	}
	pods := e.waitPool(t, ctx, ns, "py", 2)
	for i := range pods {
		p := &pods[i]
		if !owned(p, "SandboxTemplate", tp.UID) {
			t.Errorf("warm pod %s ownerReferences = %+v, want the template as controller", p.Name, p.OwnerReferences)
		}
		checkHardened(t, p, int64((controller.DefaultWarmLifetime+30*time.Second+60*time.Second)/time.Second))
		cmd := p.Spec.Containers[0].Command
		if !slices.Contains(cmd, "--argv-file") || slices.Contains(cmd, "--") {
			t.Errorf("warm pod command %q, want --argv-file and no command", cmd)
		}
		var fieldPath string
		for _, v := range p.Spec.Volumes {
			if v.DownwardAPI != nil {
				fieldPath = v.DownwardAPI.Items[0].FieldRef.FieldPath
			}
		}
		if fieldPath != "metadata.annotations['airlock.dev/argv']" {
			t.Errorf("warm pod downward-API field %q, want the argv annotation", fieldPath)
		}
		e.runPod(t, ctx, p)
	}
	waitFor(t, ctx, "template status ready=2", func() (bool, error) {
		err := e.c.Get(ctx, client.ObjectKeyFromObject(tp), tp)
		return err == nil && tp.Status.Ready == 2 && tp.Status.Warm == 2, err
	})

	argv := []string{"python3", "-c", "print('warm')"}
	sb := e.claimAndWait(t, ctx, ns, "claim-1", "py", argv)
	if !sb.Status.Warm || !slices.ContainsFunc(pods, func(p corev1.Pod) bool { return p.Name == sb.Status.PodName }) || sb.Status.Phase != v1alpha1.PhaseRunning {
		t.Fatalf("claim-1 status = %+v, want one of the ready warm pods, Running", sb.Status)
	}
	var pod corev1.Pod
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: sb.Status.PodName}, &pod); err != nil {
		t.Fatal(err)
	}
	var gotArgv []string
	if err := json.Unmarshal([]byte(pod.Annotations[controller.AnnotationArgv]), &gotArgv); err != nil || !slices.Equal(gotArgv, argv) {
		t.Errorf("claimed pod's argv annotation %q (%v), want %q", pod.Annotations[controller.AnnotationArgv], err, argv)
	}
	if !owned(&pod, "Sandbox", sb.UID) || len(pod.OwnerReferences) != 1 {
		t.Errorf("claimed pod ownerReferences = %+v, want only the Sandbox", pod.OwnerReferences)
	}
	if _, ok := pod.Labels[controller.LabelPool]; ok {
		t.Error("claimed pod still labelled as in the pool")
	}
	if d := *pod.Spec.ActiveDeadlineSeconds; d > 30+60+60 {
		t.Errorf("claimed pod's activeDeadlineSeconds = %d, want it cut to about max_wall + 60 s from its start", d)
	}

	// The pool refills: a new warm Pod, not ready yet.
	fresh := e.waitPool(t, ctx, ns, "py", 2)
	var unready []corev1.Pod
	for _, p := range fresh {
		if p.Status.Phase != corev1.PodRunning {
			unready = append(unready, p)
		}
	}
	if len(unready) != 1 {
		t.Fatalf("after the claim: %d new warm pods, want 1", len(unready))
	}
	sb2 := e.claimAndWait(t, ctx, ns, "claim-2", "py", argv)
	if !sb2.Status.Warm || sb2.Status.PodName == sb.Status.PodName {
		t.Errorf("claim-2 status = %+v, want the other ready warm pod", sb2.Status)
	}
	e.waitPool(t, ctx, ns, "py", 2)
	// No ready warm Pod is left: the claim gets a new Pod, not a warm one
	// that is still starting.
	sb3 := e.claimAndWait(t, ctx, ns, "claim-3", "py", argv)
	if sb3.Status.Warm || sb3.Status.Phase != v1alpha1.PhasePending || !strings.HasPrefix(sb3.Status.PodName, "claim-3-sbx-") {
		t.Errorf("claim-3 status = %+v, want a new pod, Pending", sb3.Status)
	}

	// The warm run ends; its report reaches the status.
	e.endPod(t, ctx, &pod, 0, summary(t, 0))
	done := e.sandbox(t, ctx, ns, "claim-1", "Succeeded", func(s *v1alpha1.Sandbox) bool { return s.Status.Phase == v1alpha1.PhaseSucceeded })
	if done.Status.Report == nil || done.Status.Report.Backend != "landlock" || done.Status.ExitCode == nil || *done.Status.ExitCode != 0 {
		t.Errorf("claim-1 final status = %+v, want exit 0 and the report", done.Status)
	}
	if done.Status.StartTime == nil || done.Status.StartTime.Before(&sb.CreationTimestamp) && sb.CreationTimestamp.Sub(done.Status.StartTime.Time) > time.Second {
		t.Errorf("claim-1 startTime %v, want the claim's time (at or after the Sandbox's creation %v), not the warm pod's start", done.Status.StartTime, sb.CreationTimestamp)
	}

	// A template whose policy a Pod cannot enforce: no warm Pod; its
	// claim waits, saying why.
	bad := &v1alpha1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bad"},
		Spec: v1alpha1.SandboxTemplateSpec{Policy: "version: 1\n", Image: "img", WarmPool: 3}}
	if err := e.c.Create(ctx, bad); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "template bad refused", func() (bool, error) {
		err := e.c.Get(ctx, client.ObjectKeyFromObject(bad), bad)
		c := meta.FindStatusCondition(bad.Status.Conditions, controller.CondReady)
		return err == nil && c != nil && c.Reason == controller.ReasonInvalidPolicy && strings.Contains(c.Message, "allow_downgrade lacks"), err
	})
	claim := &v1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "claim-bad"},
		Spec: v1alpha1.SandboxSpec{TemplateRef: &v1alpha1.TemplateRef{Name: "bad"}, Command: argv}}
	if err := e.c.Create(ctx, claim); err != nil {
		t.Fatal(err)
	}
	got := e.sandbox(t, ctx, ns, "claim-bad", "waiting", func(s *v1alpha1.Sandbox) bool { return s.Status.Phase != "" })
	if c := meta.FindStatusCondition(got.Status.Conditions, controller.CondReady); got.Status.Phase != v1alpha1.PhasePending || c == nil ||
		c.Reason != controller.ReasonInvalidPolicy || !strings.Contains(c.Message, "sandboxtemplate bad") || got.Status.PodName != "" {
		t.Errorf("claim of an invalid template: status %+v, want Pending, Ready=False InvalidPolicy naming the template, no pod", got.Status)
	}
	if n := len(e.warmPods(t, ctx, ns, "bad")); n != 0 {
		t.Errorf("invalid template has %d warm pods, want 0", n)
	}
	// Fixing the template lets the waiting claim run.
	e.patchTemplate(t, ctx, bad, func(s *v1alpha1.SandboxTemplateSpec) { s.Policy = podPolicy })
	e.sandbox(t, ctx, ns, "claim-bad", "bound after the fix", func(s *v1alpha1.Sandbox) bool { return s.Status.PodName != "" })
}

// testConcurrentClaims: five Sandboxes claim a pool of two ready warm
// Pods at once; exactly two get a warm Pod, each a different one, and
// three get a new Pod.
func testConcurrentClaims(t *testing.T, e *env) {
	ctx := testCtx(t)
	ns := e.namespace(t, "race")
	tp := &v1alpha1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "t"},
		Spec: v1alpha1.SandboxTemplateSpec{Policy: podPolicy, Image: "img", WarmPool: 2}}
	if err := e.c.Create(ctx, tp); err != nil {
		t.Fatal(err)
	}
	for _, p := range e.waitPool(t, ctx, ns, "t", 2) {
		e.runPod(t, ctx, &p)
	}
	waitFor(t, ctx, "2 ready", func() (bool, error) {
		err := e.c.Get(ctx, client.ObjectKeyFromObject(tp), tp)
		return err == nil && tp.Status.Ready == 2, err
	})
	var wg sync.WaitGroup
	for i := range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sb := &v1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("c%d", i)},
				Spec: v1alpha1.SandboxSpec{TemplateRef: &v1alpha1.TemplateRef{Name: "t"}, Command: []string{"true"}}}
			if err := e.c.Create(ctx, sb); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	pods := map[string]string{}
	warm := 0
	for i := range 5 {
		name := fmt.Sprintf("c%d", i)
		sb := e.sandbox(t, ctx, ns, name, "bound", func(s *v1alpha1.Sandbox) bool { return s.Status.PodName != "" })
		if other, dup := pods[sb.Status.PodName]; dup {
			t.Errorf("pod %s bound to %s and %s", sb.Status.PodName, other, name)
		}
		pods[sb.Status.PodName] = name
		if sb.Status.Warm {
			warm++
		}
	}
	if warm != 2 {
		t.Errorf("%d claims got a warm pod, want 2 (the ready ones)", warm)
	}
}

// testPoolUpkeep: a warm Pod that ended (its deadline passed, or it
// failed) is replaced; a change of the template's image or policy
// replaces every unclaimed warm Pod but leaves claimed ones alone; a
// smaller pool deletes the extra Pods, unready ones first.
func testPoolUpkeep(t *testing.T, e *env) {
	ctx := testCtx(t)
	ns := e.namespace(t, "upkeep")
	tp := &v1alpha1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "t"},
		Spec: v1alpha1.SandboxTemplateSpec{Policy: podPolicy, Image: "img:1", WarmPool: 2}}
	if err := e.c.Create(ctx, tp); err != nil {
		t.Fatal(err)
	}
	pods := e.waitPool(t, ctx, ns, "t", 2)
	e.runPod(t, ctx, &pods[0])
	// The kubelet ends a warm Pod at its activeDeadlineSeconds.
	expired := pods[1]
	if err := e.c.Get(ctx, client.ObjectKeyFromObject(&expired), &expired); err != nil {
		t.Fatal(err)
	}
	expired.Status.Phase, expired.Status.Reason = corev1.PodFailed, "DeadlineExceeded"
	if err := e.c.Status().Update(ctx, &expired); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "expired warm pod replaced", func() (bool, error) {
		pods := e.warmPods(t, ctx, ns, "t")
		return len(pods) == 2 && !slices.ContainsFunc(pods, func(p corev1.Pod) bool { return p.Name == expired.Name }), nil
	})

	claimed := e.claimAndWait(t, ctx, ns, "keep", "t", []string{"true"})
	if !claimed.Status.Warm {
		t.Fatalf("claim = %+v, want the ready warm pod", claimed.Status)
	}
	before := e.waitPool(t, ctx, ns, "t", 2)
	e.patchTemplate(t, ctx, tp, func(s *v1alpha1.SandboxTemplateSpec) { s.Image = "img:2" })
	waitFor(t, ctx, "warm pods of img:2 only", func() (bool, error) {
		pods := e.warmPods(t, ctx, ns, "t")
		for _, p := range pods {
			if p.Spec.Containers[0].Image != "img:2" || slices.ContainsFunc(before, func(b corev1.Pod) bool { return b.Name == p.Name }) {
				return false, nil
			}
		}
		return len(pods) == 2, nil
	})
	var kept corev1.Pod
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: claimed.Status.PodName}, &kept); err != nil || kept.DeletionTimestamp != nil {
		t.Errorf("claimed pod %s after the template changed: %v (deleting %v), want it kept", claimed.Status.PodName, err, kept.DeletionTimestamp)
	}

	pods = e.warmPods(t, ctx, ns, "t")
	e.runPod(t, ctx, &pods[0])
	e.patchTemplate(t, ctx, tp, func(s *v1alpha1.SandboxTemplateSpec) { s.WarmPool = 1 })
	left := e.waitPool(t, ctx, ns, "t", 1)
	if left[0].Name != pods[0].Name {
		t.Errorf("pool shrunk to %s, want the ready pod %s kept", left[0].Name, pods[0].Name)
	}
}

// patchTemplate changes tp's spec with a merge patch, as kubectl edit
// does: the controller's status writes cannot make it conflict.
func (e *env) patchTemplate(t *testing.T, ctx context.Context, tp *v1alpha1.SandboxTemplate, edit func(*v1alpha1.SandboxTemplateSpec)) {
	t.Helper()
	orig := tp.DeepCopy()
	edit(&tp.Spec)
	if err := e.c.Patch(ctx, tp, client.MergeFrom(orig)); err != nil {
		t.Fatalf("patch sandboxtemplate %s: %v", tp.Name, err)
	}
}

// testPoolFailure: a warm Pod that exits by itself (airlock refused to
// start on that node) is not replaced at once by another that would fail
// the same way: the template says why, with the report's error, and the
// pool waits; a warm Pod that gets ready lifts the wait.
func testPoolFailure(t *testing.T, e *env) {
	ctx := testCtx(t)
	ns := e.namespace(t, "failure")
	tp := &v1alpha1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "t"},
		Spec: v1alpha1.SandboxTemplateSpec{Policy: podPolicy, Image: "img", WarmPool: 2}}
	if err := e.c.Create(ctx, tp); err != nil {
		t.Fatal(err)
	}
	pods := e.waitPool(t, ctx, ns, "t", 2)
	msg, err := json.Marshal(map[string]any{"exit_code": 125, "duration_ms": 0, "usage": map[string]int{}, "denials_total": 0,
		"error": "landlock: this kernel has no Landlock"})
	if err != nil {
		t.Fatal(err)
	}
	e.endPod(t, ctx, &pods[0], 125, string(msg))
	waitFor(t, ctx, "template says the warm pod failed", func() (bool, error) {
		err := e.c.Get(ctx, client.ObjectKeyFromObject(tp), tp)
		c := meta.FindStatusCondition(tp.Status.Conditions, controller.CondReady)
		return err == nil && c != nil && c.Reason == controller.ReasonWarmPodFailed &&
			strings.Contains(c.Message, "exit 125: landlock: this kernel has no Landlock") && strings.Contains(c.Message, "1 in a row"), err
	})
	// The status is written after the reconcile decided not to refill.
	if got := e.warmPods(t, ctx, ns, "t"); len(got) != 1 || got[0].Name != pods[1].Name {
		t.Fatalf("after the failure: %d warm pods, want only %s (no replacement during the backoff)", len(got), pods[1].Name)
	}
	e.runPod(t, ctx, &pods[1])
	e.waitPool(t, ctx, ns, "t", 2)
	waitFor(t, ctx, "template ready again", func() (bool, error) {
		err := e.c.Get(ctx, client.ObjectKeyFromObject(tp), tp)
		c := meta.FindStatusCondition(tp.Status.Conditions, controller.CondReady)
		return err == nil && c != nil && c.Reason == controller.ReasonPoolFilled, err
	})
}

// testBigCommand: a command too large for a warm Pod's annotation gets a
// new Pod, which carries it in its spec, although a warm Pod is ready.
func testBigCommand(t *testing.T, e *env) {
	ctx := testCtx(t)
	ns := e.namespace(t, "big")
	tp := &v1alpha1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "t"},
		Spec: v1alpha1.SandboxTemplateSpec{Policy: podPolicy, Image: "img", WarmPool: 1}}
	if err := e.c.Create(ctx, tp); err != nil {
		t.Fatal(err)
	}
	pods := e.waitPool(t, ctx, ns, "t", 1)
	e.runPod(t, ctx, &pods[0])
	e.waitReady(t, ctx, tp, 1)
	argv := []string{"python3", "-c"}
	for range 40 {
		argv = append(argv, strings.Repeat("x", 4000))
	}
	sb := e.claimAndWait(t, ctx, ns, "big", "t", argv)
	if sb.Status.Warm || sb.Status.PodName == pods[0].Name {
		t.Fatalf("a 160 KB command was bound to the warm pod: %+v", sb.Status)
	}
	var pod corev1.Pod
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: sb.Status.PodName}, &pod); err != nil {
		t.Fatal(err)
	}
	if cmd := pod.Spec.Containers[0].Command; !slices.Equal(cmd[len(cmd)-len(argv):], argv) {
		t.Error("the new pod does not carry the command")
	}
	if got := e.warmPods(t, ctx, ns, "t"); len(got) != 1 || got[0].Name != pods[0].Name {
		t.Errorf("the warm pod was touched: %d warm pods", len(got))
	}
}
