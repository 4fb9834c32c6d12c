package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/airlock-sandbox/airlock/controller/api/v1alpha1"
)

// DefaultWarmLifetime is how long a warm Pod waits for a claim before it
// is replaced (Options.WarmLifetime).
const DefaultWarmLifetime = time.Hour

// Options configures the controllers. The zero value is usable.
type Options struct {
	// AirlockImage is the operator's image the enforcer comes from:
	// ImageBin in it holds airlock-controller, airlock and airlock-init
	// (static). Each Pod's init container copies airlock and the policy
	// from it into a volume that the sandbox container runs airlock
	// from: never a program of the Sandbox's image, which its author
	// chose. Name it by digest (image@sha256:...), so that a tag moved in
	// the registry does not change the enforcer. Required.
	AirlockImage string

	// AirlockImagePullPolicy is the init container's imagePullPolicy.
	// Empty means IfNotPresent.
	AirlockImagePullPolicy corev1.PullPolicy

	// WarmLifetime bounds how long a warm Pod waits for a claim (its
	// activeDeadlineSeconds; the pool then replaces it). Zero means
	// DefaultWarmLifetime.
	WarmLifetime time.Duration

	// Now tells the time a warm Pod is claimed. Nil means time.Now.
	Now func() time.Time

	// PodSeccomp is the seccomp profile of the Pods (airlock's container
	// and what it runs), as ParseSeccomp reads it. Nil means
	// RuntimeDefault. airlock installs its own allow-list for the command
	// beneath it; the Pod's profile bounds airlock itself. A policy with
	// net_hosts needs one that allows pidfd_open, pidfd_getfd and
	// process_vm_readv, which the default profiles of containerd and
	// Docker refuse (airlock then refuses the policy, exit 125, and the
	// Sandbox's report says why): Unconfined, or a Localhost profile.
	PodSeccomp *corev1.SeccompProfile

	// HostNetwork runs the Pods in the node's network namespace, for a
	// cluster without a pod network (the tests' node). airlock's connect
	// broker still refuses every connect but the egress proxy's, whose
	// guard refuses private and loopback addresses; the node's other
	// Pods' NetworkPolicies no longer apply to them, and the restricted
	// (and baseline) Pod Security level refuses such Pods.
	HostNetwork bool

	// Workers is how many Sandboxes are reconciled at once (one
	// Sandbox is never reconciled twice at once; two claims of one pool
	// are kept apart by the Pod's resourceVersion). Zero means
	// DefaultWorkers.
	Workers int
}

// DefaultWorkers is Options.Workers' default.
const DefaultWorkers = 4

func (o Options) pullPolicy() corev1.PullPolicy {
	if o.AirlockImagePullPolicy == "" {
		return corev1.PullIfNotPresent
	}
	return o.AirlockImagePullPolicy
}

// ParsePullPolicy reads an imagePullPolicy: Always, IfNotPresent or
// Never.
func ParsePullPolicy(s string) (corev1.PullPolicy, error) {
	switch p := corev1.PullPolicy(s); p {
	case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
		return p, nil
	}
	return "", fmt.Errorf("image pull policy %q: use Always, IfNotPresent or Never", s)
}

func (o Options) seccomp() *corev1.SeccompProfile {
	if o.PodSeccomp == nil {
		return &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	}
	return o.PodSeccomp.DeepCopy()
}

// ParseSeccomp reads a Pod seccomp profile: RuntimeDefault, Unconfined,
// or Localhost/PATH (PATH relative to the kubelet's seccomp root, as
// localhostProfile says).
func ParseSeccomp(s string) (*corev1.SeccompProfile, error) {
	switch {
	case s == string(corev1.SeccompProfileTypeRuntimeDefault):
		return &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}, nil
	case s == string(corev1.SeccompProfileTypeUnconfined):
		return &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}, nil
	case strings.HasPrefix(s, "Localhost/"):
		path := strings.TrimPrefix(s, "Localhost/")
		if path == "" || strings.HasPrefix(path, "/") || slices.Contains(strings.Split(path, "/"), "..") {
			return nil, fmt.Errorf("seccomp profile %q: Localhost/PATH needs a PATH relative to the kubelet's seccomp root, with no .. element in it", s)
		}
		return &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: &path}, nil
	}
	return nil, fmt.Errorf("seccomp profile %q: use RuntimeDefault, Unconfined or Localhost/PATH", s)
}

func (o Options) warmLifetime() time.Duration {
	if o.WarmLifetime <= 0 {
		return DefaultWarmLifetime
	}
	return o.WarmLifetime
}

func (o Options) now() time.Time {
	if o.Now == nil {
		return time.Now()
	}
	return o.Now()
}

// Scheme returns a scheme with the Kubernetes built-in kinds and
// airlock.dev/v1alpha1.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

// CacheOptions returns the manager's cache options for the controller:
// of Pods it caches only those it made (LabelManagedBy), so a controller
// in a busy cluster does not hold every Pod in memory. namespaces, when
// not empty, are the only ones watched.
func CacheOptions(namespaces []string) cache.Options {
	o := cache.Options{ByObject: map[client.Object]cache.ByObject{
		&corev1.Pod{}: {Label: labels.SelectorFromSet(labels.Set{LabelManagedBy: ManagedBy})},
	}}
	if len(namespaces) > 0 {
		o.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range namespaces {
			o.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	return o
}

// Setup registers the Sandbox and SandboxTemplate controllers with mgr,
// whose scheme must come from Scheme.
func Setup(mgr ctrl.Manager, o Options) error {
	if o.AirlockImage == "" {
		return errors.New("controller: no airlock image: name the operator's image that holds airlock-controller, airlock and airlock-init in " + ImageBin + " (Options.AirlockImage, --airlock-image): the Pods run airlock from it, never from the Sandboxes' images")
	}
	if _, err := ParsePullPolicy(string(o.pullPolicy())); err != nil {
		return fmt.Errorf("controller: %w", err)
	}
	sr := &sandboxReconciler{c: mgr.GetClient(), direct: mgr.GetAPIReader(), o: o}
	workers := o.Workers
	if workers <= 0 {
		workers = DefaultWorkers
	}
	err := ctrl.NewControllerManagedBy(mgr).Named("sandbox").
		WithOptions(controller.Options{MaxConcurrentReconciles: workers}).
		For(&v1alpha1.Sandbox{}).
		Owns(&corev1.Pod{}).
		// A Sandbox waiting for its template is looked at again when the
		// template appears or changes.
		Watches(&v1alpha1.SandboxTemplate{}, handler.EnqueueRequestsFromMapFunc(sr.waitingOn)).
		Complete(sr)
	if err != nil {
		return fmt.Errorf("controller: sandbox: %w", err)
	}
	tr := &templateReconciler{c: mgr.GetClient(), direct: mgr.GetAPIReader(), o: o}
	err = ctrl.NewControllerManagedBy(mgr).Named("sandboxtemplate").
		For(&v1alpha1.SandboxTemplate{}).
		Owns(&corev1.Pod{}).
		Complete(tr)
	if err != nil {
		return fmt.Errorf("controller: sandboxtemplate: %w", err)
	}
	return nil
}

// waitingOn maps a template to the Sandboxes that name it and have no
// Pod yet.
func (r *sandboxReconciler) waitingOn(ctx context.Context, obj client.Object) []reconcile.Request {
	var list v1alpha1.SandboxList
	if err := r.c.List(ctx, &list, client.InNamespace(obj.GetNamespace())); err != nil {
		return nil // the cache lists without I/O; it fails only when stopping
	}
	var reqs []reconcile.Request
	for _, sb := range list.Items {
		if ref := sb.Spec.TemplateRef; ref != nil && ref.Name == obj.GetName() && sb.Status.PodName == "" {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&sb)})
		}
	}
	return reqs
}
