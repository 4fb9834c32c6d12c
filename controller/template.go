package controller

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/airlock-sandbox/airlock/controller/api/v1alpha1"
	"github.com/airlock-sandbox/airlock/policy"
)

// templateReconciler keeps each SandboxTemplate's warm pool at its size.
type templateReconciler struct {
	c      client.Client
	direct client.Reader // counts the pool on the API server: the cache may lag a create
	o      Options

	mu       sync.Mutex
	failures map[types.UID]*failure // by template; guarded by mu
}

// failure records warm Pods of a template that ended before a claim: a
// warm Pod only waits, so one that exits (airlock refused its policy on
// that node, say) would be replaced by another that exits the same way.
// The pool is refilled again only after a backoff.
type failure struct {
	n     int       // warm Pods that failed in a row
	until time.Time // no new warm Pod before it
	why   string    // the last one's reason
}

// Backoff after the nth failure in a row: 10 s, doubling, at most 5 min.
const (
	failureBackoff    = 10 * time.Second
	maxFailureBackoff = 5 * time.Minute
)

// failed records that pod, a warm Pod of t, ended by itself.
func (r *templateReconciler) failed(t *v1alpha1.SandboxTemplate, pod *corev1.Pod) {
	why := nonEmpty(pod.Status.Reason, "it ended")
	if w := installFailed(pod); w != "" {
		why = w
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if term := cs.State.Terminated; cs.Name == container && term != nil {
			why = fmt.Sprintf("exit %d", term.ExitCode)
			if s, err := decodeSummary(term.Message); err == nil && s.Error != "" {
				why += ": " + s.Error
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failures == nil {
		r.failures = map[types.UID]*failure{}
	}
	f := r.failures[t.UID]
	if f == nil {
		f = &failure{}
		r.failures[t.UID] = f
	}
	f.n++
	f.until = r.o.now().Add(min(failureBackoff<<min(f.n-1, 10), maxFailureBackoff))
	f.why = fmt.Sprintf("warm pod %s ended before a claim (%s)", pod.Name, why)
}

// backoff returns the failure that holds back t's pool now, or nil; a
// ready warm Pod clears it.
func (r *templateReconciler) backoff(t *v1alpha1.SandboxTemplate, anyReady bool) *failure {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := r.failures[t.UID]
	if f == nil || anyReady {
		delete(r.failures, t.UID)
		return nil
	}
	if !r.o.now().Before(f.until) {
		return nil // try again; the count stays until a Pod gets ready
	}
	c := *f
	return &c
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
	if err := r.direct.List(ctx, &pods, client.InNamespace(t.Namespace), client.MatchingLabels{LabelTemplate: t.Name, LabelPool: PoolWarm, LabelManagedBy: ManagedBy}); err != nil {
		return ctrl.Result{}, err
	}
	var want0 *corev1.Pod // what a warm Pod of t is now
	if perr == nil {
		want0 = warmPod(&t, pol, r.o)
	}
	var alive []*corev1.Pod
	for i := range pods.Items {
		pod := &pods.Items[i]
		if ref := metav1.GetControllerOf(pod); ref == nil || ref.UID != t.UID || pod.DeletionTimestamp != nil {
			continue // claimed meanwhile, or on its way out
		}
		ended := pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
		// A Pod labelled with t's hash whose spec is not t's now (made
		// for another spec or by someone else, relabelled, an image
		// changed), or that restarted or holds a command though it is
		// unclaimed, can serve no claim: it goes.
		_, assigned := pod.Annotations[AnnotationArgv]
		foreign := want0 != nil && (samePod(pod, want0) != "" || restarted(pod) || assigned)
		if pod.Labels[LabelHash] != hash || ended || foreign {
			if err := r.delete(ctx, pod); err != nil { // another spec's, or ended
				return ctrl.Result{}, err
			}
			// Waiting out its lifetime (DeadlineExceeded) is how a warm
			// Pod should end; anything else is a failure.
			if ended && !foreign && pod.Labels[LabelHash] == hash && pod.Status.Reason != "DeadlineExceeded" {
				r.failed(&t, pod)
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
	held := r.backoff(&t, slices.ContainsFunc(alive, podReady))
	if len(alive) < want && held == nil {
		for range want - len(alive) {
			pod := warmPod(&t, pol, r.o)
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
	var res ctrl.Result
	switch {
	case perr != nil:
		c = metav1.Condition{Type: CondReady, Status: metav1.ConditionFalse, Reason: ReasonInvalidPolicy,
			Message: fmt.Sprintf("%v; no warm Pod is made until the policy is fixed", perr), ObservedGeneration: t.Generation}
	case held != nil:
		wait := held.until.Sub(r.o.now())
		c = metav1.Condition{Type: CondReady, Status: metav1.ConditionFalse, Reason: ReasonWarmPodFailed,
			Message:            fmt.Sprintf("%s; %d in a row: the pool is refilled again in %s (a node whose kernel or runtime lacks what airlock needs fails every warm Pod the same way)", held.why, held.n, wait.Round(time.Second)),
			ObservedGeneration: t.Generation}
		res.RequeueAfter = wait
	}
	meta.SetStatusCondition(&t.Status.Conditions, c)
	if equalJSON(before, &t.Status) {
		return res, nil
	}
	if err := r.c.Status().Update(ctx, &t); err != nil {
		return ctrl.Result{}, fmt.Errorf("update sandboxtemplate %s status: %w", t.Name, err)
	}
	return res, nil
}

// warmPod is a warm Pod of t, whose policy is pol: it waits at most
// WarmLifetime for its command, then is replaced.
func warmPod(t *v1alpha1.SandboxTemplate, pol *policy.Policy, o Options) *corev1.Pod {
	return buildPod(podParams{namespace: t.Namespace, genName: childName(t.Name, "warm-", 58), image: t.Spec.Image, text: t.Spec.Policy, pol: pol,
		labels:   map[string]string{LabelTemplate: t.Name, LabelPool: PoolWarm, LabelHash: specHash(t.Spec.Policy, t.Spec.Image)},
		deadline: o.warmLifetime() + pol.Budget().Wall + startGrace, owner: ownerRef("SandboxTemplate", t), o: o})
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
