package controller

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
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
	ReasonPodChanged       = "PodChanged"
	ReasonPoolFilled       = "PoolFilled"
	ReasonWarmPodFailed    = "WarmPodFailed"
	ReasonInstallFailed    = "EnforcerInstallFailed"
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
	if sb.Status.PodName != "" {
		pod, err := r.recordedPod(ctx, &sb)
		if err != nil {
			return ctrl.Result{}, err
		}
		if pod == nil {
			sb.Status.Phase = v1alpha1.PhaseFailed
			r.setReady(&sb, metav1.ConditionFalse, ReasonPodLost, fmt.Sprintf("pod %s is gone (deleted or evicted) before it reported: the run's outcome is unknown; create a new Sandbox", sb.Status.PodName))
			return ctrl.Result{}, r.writeStatus(ctx, &sb, before)
		}
		if why := changed(&sb, pod); why != "" {
			sb.Status.Phase = v1alpha1.PhaseFailed
			r.setReady(&sb, metav1.ConditionFalse, ReasonPodChanged, fmt.Sprintf("pod %s changed after it was bound (%s): someone who may update Pods in this namespace did it; its outcome is not reported (install packaging/controller/admission.yaml to refuse such changes) and the Pod is left for you to look at; create a new Sandbox", pod.Name, why))
			return ctrl.Result{}, r.writeStatus(ctx, &sb, before)
		}
		return ctrl.Result{}, r.report(ctx, &sb, before, pod)
	}
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
	pod, err := r.boundPod(ctx, &sb, w)
	if err == nil && pod == nil {
		pod, err = r.bind(ctx, &sb, w)
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	sb.Status.PolicyDigest, sb.Status.PodDigest = PolicyDigest(w.text), podDigest(pod)
	return ctrl.Result{}, r.report(ctx, &sb, before, pod)
}

// report copies what pod says into sb's status and writes it.
func (r *sandboxReconciler) report(ctx context.Context, sb *v1alpha1.Sandbox, before *v1alpha1.SandboxStatus, pod *corev1.Pod) error {
	observe(sb, pod)
	how := "a new Pod"
	if sb.Status.Warm {
		how = "a warm Pod of template " + sb.Spec.TemplateRef.Name
	}
	r.setReady(sb, metav1.ConditionTrue, ReasonBound, fmt.Sprintf("pod %s runs the command (%s)", pod.Name, how))
	return r.writeStatus(ctx, sb, before)
}

// resolve returns what sb runs, or nil and the reason and message of why
// it cannot run now. A template is read from the API server, not the
// cache: a claim made after the template changed runs the changed one.
func (r *sandboxReconciler) resolve(ctx context.Context, sb *v1alpha1.Sandbox) (*what, string, string) {
	if ref := sb.Spec.TemplateRef; ref != nil {
		var t v1alpha1.SandboxTemplate
		if err := r.direct.Get(ctx, types.NamespacedName{Namespace: sb.Namespace, Name: ref.Name}, &t); err != nil {
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

// sandboxPods lists, on the API server, the controller's Pods labelled
// and controlled as sb's.
func (r *sandboxReconciler) sandboxPods(ctx context.Context, sb *v1alpha1.Sandbox) ([]*corev1.Pod, error) {
	var pods corev1.PodList
	if err := r.direct.List(ctx, &pods, client.InNamespace(sb.Namespace), client.MatchingLabels{LabelSandboxUID: string(sb.UID), LabelManagedBy: ManagedBy}); err != nil {
		return nil, err
	}
	var out []*corev1.Pod
	for i := range pods.Items {
		if ref := metav1.GetControllerOf(&pods.Items[i]); ref != nil && ref.UID == sb.UID {
			out = append(out, &pods.Items[i])
		}
	}
	return out, nil
}

// recordedPod returns the Pod sb's status names, or nil when it is gone.
func (r *sandboxReconciler) recordedPod(ctx context.Context, sb *v1alpha1.Sandbox) (*corev1.Pod, error) {
	pods, err := r.sandboxPods(ctx, sb)
	if err != nil {
		return nil, err
	}
	for _, p := range pods {
		if p.Name == sb.Status.PodName {
			return p, nil
		}
	}
	return nil, nil
}

// boundPod returns the Pod bound to sb by an earlier reconcile whose
// status write was lost, or nil. It asks the API server, not the cache:
// such a Pod must be found, or a second one would be bound. Only a Pod
// whose spec is what the controller builds for w counts: one labelled
// and owned as sb's by anyone else does not.
func (r *sandboxReconciler) boundPod(ctx context.Context, sb *v1alpha1.Sandbox, w *what) (*corev1.Pod, error) {
	pods, err := r.sandboxPods(ctx, sb)
	if err != nil {
		return nil, err
	}
	argv, err := json.Marshal(sb.Spec.Command)
	if err != nil {
		return nil, err
	}
	for _, p := range pods {
		want := r.coldPod(sb, w)
		if _, claimed := p.Annotations[AnnotationWarm]; claimed && w.template != nil {
			want = r.warmPod(w.template, w.pol)
			if p.Annotations[AnnotationArgv] != string(argv) {
				continue
			}
		}
		if samePod(p, want) == "" && !restarted(p) {
			return p, nil
		}
	}
	return nil, nil
}

// changed says how pod differs from what was bound to sb: its spec's
// digest, a restart, an ephemeral container, or (a warm Pod) the command
// in its annotation; "" when it does not.
func changed(sb *v1alpha1.Sandbox, pod *corev1.Pod) string {
	if sb.Status.PodDigest == "" {
		return "" // bound before the controller recorded digests
	}
	if d := podDigest(pod); d != sb.Status.PodDigest {
		return "its spec is not the one bound, digest " + d + " instead of " + sb.Status.PodDigest + ": an image was changed, or the Pod replaced under its name"
	}
	if restarted(pod) {
		return "a container restarted, as the kubelet does when its image is changed"
	}
	if sb.Status.Warm {
		argv, err := json.Marshal(sb.Spec.Command)
		if err != nil || pod.Annotations[AnnotationArgv] != string(argv) {
			return "its " + AnnotationArgv + " annotation is not the Sandbox's command"
		}
	}
	return ""
}

// podDigest is the SHA-256 of pod's podShape.
func podDigest(pod *corev1.Pod) string {
	h := sha256.Sum256([]byte(jsonOf(shape(&pod.Spec))))
	return "sha256:" + hex.EncodeToString(h[:])
}

// coldPod is the Pod made for sb when no warm Pod serves it.
func (r *sandboxReconciler) coldPod(sb *v1alpha1.Sandbox, w *what) *corev1.Pod {
	return buildPod(podParams{namespace: sb.Namespace, genName: childName(sb.Name, "sbx-", 58), image: w.image, text: w.text, pol: w.pol,
		argv: slices.Clone(sb.Spec.Command), labels: map[string]string{LabelSandboxUID: string(sb.UID)},
		deadline: w.pol.Budget().Wall + startGrace, owner: ownerRef("Sandbox", sb), o: r.o})
}

// warmPod is a warm Pod of t, whose policy is pol.
func (r *sandboxReconciler) warmPod(t *v1alpha1.SandboxTemplate, pol *policy.Policy) *corev1.Pod {
	return warmPod(t, pol, r.o)
}

// bind claims a ready warm Pod of w's template for sb, or makes a Pod.
func (r *sandboxReconciler) bind(ctx context.Context, sb *v1alpha1.Sandbox, w *what) (*corev1.Pod, error) {
	if w.template != nil {
		pod, err := r.claim(ctx, sb, w)
		if pod != nil || err != nil {
			return pod, err
		}
	}
	// The Pod's name is generated: no object made first under a name
	// the controller would give stands in its way or in its place.
	pod := r.coldPod(sb, w)
	if err := r.c.Create(ctx, pod); err != nil {
		return nil, fmt.Errorf("create pod for sandbox %s: %w", sb.Name, err)
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
// Sandboxes never get the same Pod. Only a Pod whose spec is what the
// template's warm Pods are now (its policy, image and the operator's
// enforcer), that never restarted and holds no command yet, is claimed:
// labels and owners anyone who may update Pods can set. It returns nil
// when none is ready.
func (r *sandboxReconciler) claim(ctx context.Context, sb *v1alpha1.Sandbox, w *what) (*corev1.Pod, error) {
	var pods corev1.PodList
	if err := r.direct.List(ctx, &pods, client.InNamespace(sb.Namespace), client.MatchingLabels{
		LabelTemplate: w.template.Name, LabelPool: PoolWarm, LabelHash: specHash(w.text, w.image), LabelManagedBy: ManagedBy}); err != nil {
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
	want := r.warmPod(w.template, w.pol)
	now := r.o.now()
	for i := range pods.Items {
		pod := &pods.Items[i]
		if ref := metav1.GetControllerOf(pod); !podReady(pod) || ref == nil || ref.UID != w.template.UID {
			continue
		}
		if _, set := pod.Annotations[AnnotationArgv]; set || samePod(pod, want) != "" || restarted(pod) {
			continue // not the template's as it is now, or given a command already: the pool replaces it
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
	if why := installFailed(pod); why != "" {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: CondReported, Status: metav1.ConditionFalse, Reason: ReasonInstallFailed, Message: why})
		return
	}
	// The Pod ended with no container status: killed at its deadline, or
	// evicted, before the command could end.
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: CondReported, Status: metav1.ConditionFalse, Reason: nonEmpty(pod.Status.Reason, "PodFailed"),
		Message: nonEmpty(pod.Status.Message, "the Pod ended without its container's status: no report")})
}

// installFailed says why pod's init container failed to install the
// enforcer, or "" when it did not fail.
func installFailed(pod *corev1.Pod) string {
	for _, cs := range pod.Status.InitContainerStatuses {
		if term := cs.State.Terminated; cs.Name == InstallContainer && term != nil && term.ExitCode != 0 {
			return fmt.Sprintf("the init container %s, from the operator's image %s, exited %d: %s", InstallContainer, cs.Image, term.ExitCode,
				nonEmpty(strings.TrimSpace(term.Message), "no message (is airlock-controller in "+ImageBin+" of that image?)"))
		}
	}
	return ""
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
