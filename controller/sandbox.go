package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
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

// Condition type and reasons.
const (
	CondReady              = "Ready"
	CondReported           = "Reported"
	ReasonBound            = "PodBound"
	ReasonInvalidPolicy    = "InvalidPolicy"
	ReasonTemplateNotFound = "TemplateNotFound"
	ReasonPodLost          = "PodLost"
	ReasonPoolFilled       = "PoolFilled"
	ReasonWarmPodFailed    = "WarmPodFailed"
)

// sandboxReconciler makes and watches the Pod of each Sandbox.
type sandboxReconciler struct {
	c      client.Client
	direct client.Reader // the API server, not the cache: binding must see every claim made
	o      Options
}

// what is the policy, image and source a Sandbox runs with.
type what struct {
	text, image string
	pol         *policy.Policy
	template    *v1alpha1.SandboxTemplate // nil for an inline policy
}

func (r *sandboxReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var sb v1alpha1.Sandbox
	if err := r.c.Get(ctx, req.NamespacedName, &sb); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if sb.DeletionTimestamp != nil || sb.Status.Phase == v1alpha1.PhaseSucceeded || sb.Status.Phase == v1alpha1.PhaseFailed {
		return ctrl.Result{}, nil // its objects go with it (ownerReferences); a final status stays
	}
	before := &sb.DeepCopy().Status
	pod, err := r.boundPod(ctx, &sb)
	if err != nil {
		return ctrl.Result{}, err
	}
	if pod == nil && sb.Status.PodName != "" {
		sb.Status.Phase = v1alpha1.PhaseFailed
		r.setReady(&sb, metav1.ConditionFalse, ReasonPodLost, fmt.Sprintf("pod %s is gone (deleted or evicted) before it reported: the run's outcome is unknown; create a new Sandbox", sb.Status.PodName))
		return ctrl.Result{}, r.writeStatus(ctx, &sb, before)
	}
	if pod == nil {
		w, cond, msg := r.resolve(ctx, &sb)
		if w == nil {
			// An inline policy never changes (the spec is immutable):
			// refused for good. A template may be created or fixed.
			sb.Status.Phase = v1alpha1.PhasePending
			if cond == ReasonInvalidPolicy && sb.Spec.TemplateRef == nil {
				sb.Status.Phase = v1alpha1.PhaseFailed
			}
			r.setReady(&sb, metav1.ConditionFalse, cond, msg)
			return ctrl.Result{}, r.writeStatus(ctx, &sb, before)
		}
		if pod, err = r.bind(ctx, &sb, w); err != nil {
			return ctrl.Result{}, err
		}
	}
	observe(&sb, pod)
	how := "a new Pod"
	if sb.Status.Warm {
		how = "a warm Pod of template " + sb.Spec.TemplateRef.Name
	}
	r.setReady(&sb, metav1.ConditionTrue, ReasonBound, fmt.Sprintf("pod %s runs the command (%s)", pod.Name, how))
	return ctrl.Result{}, r.writeStatus(ctx, &sb, before)
}

// resolve returns what sb runs, or nil and the reason and message of why
// it cannot run now.
func (r *sandboxReconciler) resolve(ctx context.Context, sb *v1alpha1.Sandbox) (*what, string, string) {
	if ref := sb.Spec.TemplateRef; ref != nil {
		var t v1alpha1.SandboxTemplate
		if err := r.c.Get(ctx, types.NamespacedName{Namespace: sb.Namespace, Name: ref.Name}, &t); err != nil {
			return nil, ReasonTemplateNotFound, fmt.Sprintf("sandboxtemplate %s/%s: %v; create it (the Sandbox waits for it)", sb.Namespace, ref.Name, err)
		}
		p, err := checkPolicy(t.Spec.Policy)
		if err != nil {
			return nil, ReasonInvalidPolicy, fmt.Sprintf("sandboxtemplate %s: %v; fix the template's policy (the Sandbox waits for it)", t.Name, err)
		}
		return &what{text: t.Spec.Policy, image: t.Spec.Image, pol: p, template: &t}, "", ""
	}
	p, err := checkPolicy(sb.Spec.Policy)
	if err != nil {
		return nil, ReasonInvalidPolicy, fmt.Sprintf("%v; no Pod was created: create a new Sandbox with the policy fixed", err)
	}
	return &what{text: sb.Spec.Policy, image: sb.Spec.Image, pol: p}, "", ""
}

// boundPod returns the Pod bound to sb, or nil. Before a Pod is recorded
// in the status it asks the API server, not the cache: a Pod claimed or
// made by an earlier reconcile whose status write was lost must be found,
// or a second one would be bound.
func (r *sandboxReconciler) boundPod(ctx context.Context, sb *v1alpha1.Sandbox) (*corev1.Pod, error) {
	var pods corev1.PodList
	if err := r.direct.List(ctx, &pods, client.InNamespace(sb.Namespace), client.MatchingLabels{LabelSandboxUID: string(sb.UID)}); err != nil {
		return nil, err
	}
	for i := range pods.Items {
		if ref := metav1.GetControllerOf(&pods.Items[i]); ref != nil && ref.UID == sb.UID {
			return &pods.Items[i], nil
		}
	}
	return nil, nil
}

// bind claims a ready warm Pod of w's template for sb, or makes a Pod.
func (r *sandboxReconciler) bind(ctx context.Context, sb *v1alpha1.Sandbox, w *what) (*corev1.Pod, error) {
	if w.template != nil {
		pod, err := r.claim(ctx, sb, w)
		if pod != nil || err != nil {
			return pod, err
		}
	}
	owner := ownerRef("Sandbox", sb)
	// The Pod and its ConfigMap share a name with the Sandbox's uid in
	// it: an object left by a deleted Sandbox of the same name (until the
	// garbage collector removes it) never stands in the way.
	name := childName(sb.Name, "sbx-"+string(sb.UID)[:8], 253)
	cmName := name
	if err := r.c.Create(ctx, policyConfigMap(sb.Namespace, cmName, w.text, owner)); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create configmap %s: %w", cmName, err)
	}
	pod := buildPod(podParams{namespace: sb.Namespace, name: name, image: w.image, configMap: cmName, pol: w.pol,
		argv: slices.Clone(sb.Spec.Command), labels: map[string]string{LabelSandboxUID: string(sb.UID)},
		deadline: w.pol.Budget().Wall + startGrace, owner: owner, airlock: r.o.airlock(), seccomp: r.o.seccomp(), hostNet: r.o.HostNetwork})
	if err := r.c.Create(ctx, pod); err != nil {
		return nil, fmt.Errorf("create pod %s: %w", pod.Name, err)
	}
	sb.Status.Warm = false
	return pod, nil
}

// maxArgvAnnotation bounds the command a claim puts in a warm Pod's
// annotation: the API server refuses a Pod whose annotations exceed
// 256 KiB in all, while the CRD admits commands up to 1 MiB (256
// arguments of 4 KiB). A longer command gets a new Pod.
const maxArgvAnnotation = 128 << 10

// claim binds the oldest ready warm Pod of w's template to sb: one
// update of the Pod (the command as its annotation, sb as its controller
// instead of the template, a deadline cut to the run's), which the API
// server refuses if anything changed the Pod since it was read, so two
// Sandboxes never get the same Pod. It returns nil when none is ready.
func (r *sandboxReconciler) claim(ctx context.Context, sb *v1alpha1.Sandbox, w *what) (*corev1.Pod, error) {
	var pods corev1.PodList
	if err := r.direct.List(ctx, &pods, client.InNamespace(sb.Namespace), client.MatchingLabels{
		LabelTemplate: w.template.Name, LabelPool: PoolWarm, LabelHash: specHash(w.text, w.image)}); err != nil {
		return nil, err
	}
	slices.SortFunc(pods.Items, func(a, b corev1.Pod) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
	argv, err := json.Marshal(sb.Spec.Command)
	if err != nil {
		return nil, err
	}
	if len(argv) > maxArgvAnnotation {
		return nil, nil // a new Pod carries it in its spec
	}
	now := r.o.now()
	for i := range pods.Items {
		pod := &pods.Items[i]
		if ref := metav1.GetControllerOf(pod); !podReady(pod) || ref == nil || ref.UID != w.template.UID {
			continue
		}
		pod.Annotations = merge(pod.Annotations, map[string]string{AnnotationArgv: string(argv), AnnotationWarm: now.UTC().Format(time.RFC3339Nano)})
		delete(pod.Labels, LabelPool)
		pod.Labels[LabelSandboxUID] = string(sb.UID)
		pod.OwnerReferences = []metav1.OwnerReference{ownerRef("Sandbox", sb)}
		// activeDeadlineSeconds counts from the Pod's start and may only
		// be lowered: the run gets max_wall from now.
		started := pod.CreationTimestamp.Time
		if pod.Status.StartTime != nil {
			started = pod.Status.StartTime.Time
		}
		d := int64((now.Sub(started) + w.pol.Budget().Wall + startGrace + time.Second - 1) / time.Second)
		if pod.Spec.ActiveDeadlineSeconds == nil || d < *pod.Spec.ActiveDeadlineSeconds {
			pod.Spec.ActiveDeadlineSeconds = &d
		}
		err := r.c.Update(ctx, pod)
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			continue // claimed, changed or deleted meanwhile: the next one
		}
		if err != nil {
			return nil, fmt.Errorf("claim warm pod %s: %w", pod.Name, err)
		}
		sb.Status.Warm = true
		return pod, nil
	}
	return nil, nil
}

// observe copies what pod says into sb's status.
func observe(sb *v1alpha1.Sandbox, pod *corev1.Pod) {
	st := &sb.Status
	st.PodName = pod.Name
	claimed, warm := pod.Annotations[AnnotationWarm]
	st.Warm = warm
	switch pod.Status.Phase {
	case corev1.PodRunning:
		st.Phase = v1alpha1.PhaseRunning
	case corev1.PodSucceeded, corev1.PodFailed:
		st.Phase = v1alpha1.PhaseFailed
	default:
		st.Phase = v1alpha1.PhasePending
	}
	if st.StartTime == nil && pod.Status.Phase != corev1.PodPending && pod.Status.Phase != "" {
		switch t, err := time.Parse(time.RFC3339Nano, claimed); {
		case warm && err == nil:
			st.StartTime = &metav1.Time{Time: t}
		case pod.Status.StartTime != nil:
			st.StartTime = pod.Status.StartTime.DeepCopy()
		}
	}
	if pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
		return
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != container || cs.State.Terminated == nil {
			continue
		}
		term := cs.State.Terminated
		code := term.ExitCode
		st.ExitCode = &code
		st.FinishTime = term.FinishedAt.DeepCopy()
		if code == 0 {
			st.Phase = v1alpha1.PhaseSucceeded
		}
		rep, err := decodeSummary(term.Message)
		if err != nil {
			meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: CondReported, Status: metav1.ConditionFalse, Reason: "NoReport", Message: err.Error(), ObservedGeneration: sb.Generation})
			return
		}
		st.Report = rep
		return
	}
	// The Pod ended with no container status: killed at its deadline, or
	// evicted, before the command could end.
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: CondReported, Status: metav1.ConditionFalse, Reason: nonEmpty(pod.Status.Reason, "PodFailed"),
		Message: nonEmpty(pod.Status.Message, "the Pod ended without its container's status: no report")})
}

func (r *sandboxReconciler) setReady(sb *v1alpha1.Sandbox, status metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&sb.Status.Conditions, metav1.Condition{Type: CondReady, Status: status, Reason: reason, Message: msg, ObservedGeneration: sb.Generation})
}

// writeStatus writes sb's status when it differs from before.
func (r *sandboxReconciler) writeStatus(ctx context.Context, sb *v1alpha1.Sandbox, before *v1alpha1.SandboxStatus) error {
	if equalJSON(before, &sb.Status) {
		return nil
	}
	if err := r.c.Status().Update(ctx, sb); err != nil {
		return fmt.Errorf("update sandbox %s status: %w", sb.Name, err)
	}
	return nil
}

func equalJSON(a, b any) bool {
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(ja, jb)
}

func merge(dst, src map[string]string) map[string]string {
	if dst == nil {
		dst = map[string]string{}
	}
	for k, v := range src {
		dst[k] = v
	}
	return dst
}

func nonEmpty(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// jsonStrict decodes one JSON value into v, refusing unknown fields and
// trailing data.
func jsonStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}
