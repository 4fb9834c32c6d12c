package controller

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/airlock-sandbox/airlock/controller/api/v1alpha1"
)

// templateReconciler keeps each SandboxTemplate's warm pool at its size.
type templateReconciler struct {
	c      client.Client
	direct client.Reader // counts the pool on the API server: the cache may lag a create
	o      Options
}

func (r *templateReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var t v1alpha1.SandboxTemplate
	if err := r.c.Get(ctx, req.NamespacedName, &t); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if t.DeletionTimestamp != nil {
		return ctrl.Result{}, nil
	}
	before := &t.DeepCopy().Status
	hash := specHash(t.Spec.Policy, t.Spec.Image)
	pol, perr := checkPolicy(t.Spec.Policy)
	want := int(t.Spec.WarmPool)
	if perr != nil {
		want = 0 // and the pods of an earlier, valid spec go too: their hash differs
	}

	var pods corev1.PodList
	if err := r.direct.List(ctx, &pods, client.InNamespace(t.Namespace), client.MatchingLabels{LabelTemplate: t.Name, LabelPool: PoolWarm}); err != nil {
		return ctrl.Result{}, err
	}
	var alive []*corev1.Pod
	for i := range pods.Items {
		pod := &pods.Items[i]
		if ref := metav1.GetControllerOf(pod); ref == nil || ref.UID != t.UID || pod.DeletionTimestamp != nil {
			continue // claimed meanwhile, or on its way out
		}
		if pod.Labels[LabelHash] != hash || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			if err := r.delete(ctx, pod); err != nil { // another spec's, or expired at its deadline
				return ctrl.Result{}, err
			}
			continue
		}
		alive = append(alive, pod)
	}
	// Extra Pods go, those not ready first, then the newest.
	slices.SortStableFunc(alive, func(a, b *corev1.Pod) int {
		if ra, rb := podReady(a), podReady(b); ra != rb {
			if ra {
				return -1
			}
			return 1
		}
		return a.CreationTimestamp.Compare(b.CreationTimestamp.Time)
	})
	for len(alive) > want {
		if err := r.delete(ctx, alive[len(alive)-1]); err != nil {
			return ctrl.Result{}, err
		}
		alive = alive[:len(alive)-1]
	}
	if len(alive) < want {
		owner := ownerRef("SandboxTemplate", &t)
		cm := childName(t.Name, "policy-"+hash, 253)
		if err := r.c.Create(ctx, policyConfigMap(t.Namespace, cm, t.Spec.Policy, owner)); err != nil && !apierrors.IsAlreadyExists(err) {
			return ctrl.Result{}, fmt.Errorf("create configmap %s: %w", cm, err)
		}
		for range want - len(alive) {
			pod := buildPod(podParams{namespace: t.Namespace, genName: childName(t.Name, "warm-", 58), image: t.Spec.Image, configMap: cm, pol: pol,
				labels: map[string]string{LabelTemplate: t.Name, LabelPool: PoolWarm, LabelHash: hash},
				// It waits at most WarmLifetime, then is replaced.
				deadline: r.o.warmLifetime() + pol.Budget().Wall + startGrace, owner: owner, airlock: r.o.airlock()})
			if err := r.c.Create(ctx, pod); err != nil {
				return ctrl.Result{}, fmt.Errorf("create warm pod for sandboxtemplate %s: %w", t.Name, err)
			}
			alive = append(alive, pod)
		}
	}
	t.Status.Warm, t.Status.Ready = int32(len(alive)), 0
	for _, p := range alive {
		if podReady(p) {
			t.Status.Ready++
		}
	}
	c := metav1.Condition{Type: CondReady, Status: metav1.ConditionTrue, Reason: ReasonPoolFilled,
		Message: fmt.Sprintf("%d of %d warm pods exist, %d ready", len(alive), t.Spec.WarmPool, t.Status.Ready), ObservedGeneration: t.Generation}
	if perr != nil {
		c = metav1.Condition{Type: CondReady, Status: metav1.ConditionFalse, Reason: ReasonInvalidPolicy,
			Message: fmt.Sprintf("%v; no warm Pod is made until the policy is fixed", perr), ObservedGeneration: t.Generation}
	}
	meta.SetStatusCondition(&t.Status.Conditions, c)
	if equalJSON(before, &t.Status) {
		return ctrl.Result{}, nil
	}
	if err := r.c.Status().Update(ctx, &t); err != nil {
		return ctrl.Result{}, fmt.Errorf("update sandboxtemplate %s status: %w", t.Name, err)
	}
	return ctrl.Result{}, nil
}

// delete deletes pod if it is still the one read (its resourceVersion):
// a Pod claimed meanwhile is not deleted.
func (r *templateReconciler) delete(ctx context.Context, pod *corev1.Pod) error {
	rv := pod.ResourceVersion
	err := r.c.Delete(ctx, pod, client.Preconditions{ResourceVersion: &rv})
	if err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return fmt.Errorf("delete warm pod %s: %w", pod.Name, err)
}
