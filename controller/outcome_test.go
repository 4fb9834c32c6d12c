package controller_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/airlock-sandbox/airlock/controller"
	"github.com/airlock-sandbox/airlock/controller/api/v1alpha1"
)

// testOutcomes: the ends a run can have besides a report. A container
// that left no termination message (not airlock) or garbage, a Pod
// deleted before it reported, and a Sandbox re-created under the name of
// a deleted one whose Pod is still there (no garbage collector here).
func testOutcomes(t *testing.T, e *env) {
	ctx := testCtx(t)
	ns := e.namespace(t, "outcomes")
	mk := func(name string) *corev1.Pod {
		t.Helper()
		sb := &v1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: v1alpha1.SandboxSpec{Policy: podPolicy, Image: "img", Command: []string{"true"}}}
		if err := e.c.Create(ctx, sb); err != nil {
			t.Fatal(err)
		}
		got := e.sandbox(t, ctx, ns, name, "a pod", func(s *v1alpha1.Sandbox) bool { return s.Status.PodName != "" })
		pod := &corev1.Pod{}
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: got.Status.PodName}, pod); err != nil {
			t.Fatal(err)
		}
		return pod
	}
	for _, tt := range []struct{ name, msg, want string }{
		{"no-message", "", "left no termination message"},
		{"not-a-report", "Killed", "not an airlock report summary"},
		{"unknown-field", `{"exit_code":0,"duration_ms":1,"usage":{},"denials_total":0,"evil":1}`, "unknown field"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pod := mk(tt.name)
			e.endPod(t, ctx, pod, 0, tt.msg)
			got := e.sandbox(t, ctx, ns, tt.name, "ended", func(s *v1alpha1.Sandbox) bool { return s.Status.Phase == v1alpha1.PhaseSucceeded })
			c := meta.FindStatusCondition(got.Status.Conditions, controller.CondReported)
			if got.Status.Report != nil || c == nil || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, tt.want) {
				t.Errorf("status = %+v, want no report and Reported=False naming %q", got.Status, tt.want)
			}
		})
	}
	t.Run("pod-lost", func(t *testing.T) {
		pod := mk("lost")
		if err := e.c.Delete(ctx, pod); err != nil {
			t.Fatal(err)
		}
		got := e.sandbox(t, ctx, ns, "lost", "failed", func(s *v1alpha1.Sandbox) bool { return s.Status.Phase == v1alpha1.PhaseFailed })
		if c := meta.FindStatusCondition(got.Status.Conditions, controller.CondReady); c == nil || c.Reason != controller.ReasonPodLost {
			t.Errorf("conditions = %+v, want Ready=False %s", got.Status.Conditions, controller.ReasonPodLost)
		}
	})
	t.Run("same-name-again", func(t *testing.T) {
		old := mk("again")
		var sb v1alpha1.Sandbox
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "again"}, &sb); err != nil {
			t.Fatal(err)
		}
		if err := e.c.Delete(ctx, &sb); err != nil {
			t.Fatal(err)
		}
		waitFor(t, ctx, "again deleted", func() (bool, error) {
			err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "again"}, &v1alpha1.Sandbox{})
			return client.IgnoreNotFound(err) == nil && err != nil, nil
		})
		pod := mk("again")
		if pod.Name == old.Name || !owned(pod, "Sandbox", pod.OwnerReferences[0].UID) || pod.OwnerReferences[0].UID == old.OwnerReferences[0].UID {
			t.Errorf("re-created Sandbox got pod %s (old %s), want a pod of its own", pod.Name, old.Name)
		}
	})
}
