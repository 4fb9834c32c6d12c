package k8s_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/airlock-sandbox/airlock/export/k8s"
	"github.com/airlock-sandbox/airlock/internal/k8stest"
)

// restricted labels a namespace that enforces the restricted Pod Security
// level, and warns about workload templates (a Deployment's Pod template
// is only warned about, never refused).
var restricted = map[string]string{
	"pod-security.kubernetes.io/enforce":         "restricted",
	"pod-security.kubernetes.io/enforce-version": "latest",
	"pod-security.kubernetes.io/warn":            "restricted",
	"pod-security.kubernetes.io/warn-version":    "latest",
}

// provide creates in ns what the export's header asks for there, as an
// operator would: the claims and ServiceAccounts the options name.
// RuntimeClasses are cluster-wide; runtimeClasses makes them.
func provide(t *testing.T, c kubernetes.Interface, ns string, o k8s.Options) {
	t.Helper()
	ctx := context.Background()
	if a := o.ServiceAccount; a != "" && a != k8s.DefaultServiceAccount {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: a}}
		if _, err := c.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	for _, v := range o.Volumes {
		if v.Claim == "" {
			continue
		}
		pvc := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: v.Claim},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			},
		}
		if _, err := c.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
}

func runtimeClasses(t *testing.T, c kubernetes.Interface, handlers map[string]string) {
	t.Helper()
	for name, h := range handlers {
		rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Handler: h}
		if _, err := c.NodeV1().RuntimeClasses().Create(context.Background(), rc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// applied matches one line of `kubectl apply`'s output: kind/name verb.
var applied = regexp.MustCompile(`^([a-z0-9.]+)/(\S+) (created|configured|unchanged)( \(server dry run\))?$`)

// kubectlApply runs kubectl apply with args and returns what it said of
// each object (kind/name => verb), failing t on an error or a warning.
func kubectlApply(t *testing.T, cp *k8stest.ControlPlane, args ...string) map[string]string {
	t.Helper()
	r := cp.Kubectl(t, append([]string{"apply", "--validate=strict"}, args...)...)
	if r.Err != nil {
		t.Fatalf("kubectl apply %s: %v\n%s%s", strings.Join(args, " "), r.Err, r.Stdout, r.Stderr)
	}
	if strings.TrimSpace(r.Stderr) != "" {
		t.Errorf("kubectl apply %s warned (PodSecurity warns about a Deployment's template it would refuse):\n%s", strings.Join(args, " "), r.Stderr)
	}
	got := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
		m := applied.FindStringSubmatch(l)
		if m == nil {
			t.Errorf("kubectl apply said %q", l)
			continue
		}
		got[m[1]+"/"+m[2]] = m[3]
	}
	return got
}

// objectNames returns kubectl's kind/name of each exported object.
func objectNames(m *k8s.Manifests) []string {
	var out []string
	for _, o := range m.Objects() {
		gvk := o.GetObjectKind().GroupVersionKind()
		kind := strings.ToLower(gvk.Kind)
		if gvk.Group != "" {
			kind += "." + gvk.Group
		}
		out = append(out, kind+"/"+o.(metav1.Object).GetName())
	}
	return out
}

// TestApplyToAPIServer applies every export of refCases as the README
// says, with the harness's kubectl, to a real kube-apiserver, each in a
// namespace that enforces the restricted Pod Security level and holds the
// parameters its header names: first `kubectl apply --dry-run=server -R
// -f DIR` (every object admitted; the seccomp profile in DIR is not
// parsed), then the same for real (every object created, no warning, so
// the proxy's Pod template passes the restricted level too), then again
// (every object unchanged: the server kept each field as the file says).
func TestApplyToAPIServer(t *testing.T) {
	cp := k8stest.Start(t)
	runtimeClasses(t, cp.Client, map[string]string{k8s.DefaultRuntimeClass: "runsc", "kata": "kata"})
	namespaces := map[string]bool{}
	for _, tt := range refCases() {
		t.Run(tt.name, func(t *testing.T) {
			m := exportFor(t, tt.spec, tt.opts)
			w := writeExport(t, m)
			ns := tt.opts.Namespace
			var nsFlag []string
			if ns == "" { // kubectl's current namespace, as the header says
				ns = "case-" + tt.name
				nsFlag = []string{"--namespace=" + ns}
			}
			if !namespaces[ns] {
				cp.Namespace(t, ns, restricted)
				namespaces[ns] = true
			}
			provide(t, cp.Client, ns, tt.opts)
			want := objectNames(m)

			for i, step := range []struct {
				args []string
				verb string
			}{
				{[]string{"--dry-run=server", "-R", "-f", w.dir}, "created"},
				{[]string{"-R", "-f", w.dir}, "created"},
				{[]string{"-f", w.dir + "/" + k8s.ManifestFile}, "unchanged"},
			} {
				got := kubectlApply(t, cp, append(nsFlag, step.args...)...)
				var names []string
				for n, verb := range got {
					names = append(names, n)
					if verb != step.verb {
						t.Errorf("apply %d: %s %s, want %s", i+1, n, verb, step.verb)
					}
				}
				slices.Sort(names)
				if w := slices.Sorted(slices.Values(want)); !slices.Equal(names, w) {
					t.Errorf("apply %d (%s) acted on %v, want the export's objects %v", i+1, strings.Join(step.args, " "), names, w)
				}
			}
			pod, err := cp.Client.CoreV1().Pods(ns).Get(context.Background(), m.Pod.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if sp := pod.Spec.SecurityContext.SeccompProfile; sp == nil || sp.LocalhostProfile == nil || *sp.LocalhostProfile != m.SeccompPath {
				t.Errorf("the stored Pod's seccomp profile is %+v, want Localhost %s", sp, m.SeccompPath)
			}
		})
	}
}

// TestRestrictedRefuses: the restricted namespaces above do enforce the
// level. The exported Pod, with one of its locks taken off, is refused in
// one, so the acceptance of the export means something; and the
// parameters the header says must exist are checked by the server.
func TestRestrictedRefuses(t *testing.T) {
	cp := k8stest.Start(t)
	runtimeClasses(t, cp.Client, map[string]string{k8s.DefaultRuntimeClass: "runsc"})
	cp.Namespace(t, "locked", restricted)
	tt0 := cases[3] // no-network: a claim, no proxy
	provide(t, cp.Client, "locked", tt0.opts)
	ctx := context.Background()
	create := func(p *corev1.Pod) error {
		_, err := cp.Client.CoreV1().Pods("locked").Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	m := exportFor(t, tt0.spec, tt0.opts)
	if err := create(m.Pod.DeepCopy()); err != nil {
		t.Fatalf("the exported Pod is refused: %v", err)
	}
	yes := true
	for _, tt := range []struct {
		name   string
		mutate func(p *corev1.Pod)
		want   string // in the refusal
	}{
		{"privilege-escalation", func(p *corev1.Pod) { p.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation = &yes }, "violates PodSecurity"},
		{"capability-kept", func(p *corev1.Pod) { p.Spec.Containers[0].SecurityContext.Capabilities.Drop = nil }, "violates PodSecurity"},
		{"root-allowed", func(p *corev1.Pod) {
			p.Spec.SecurityContext.RunAsNonRoot, p.Spec.Containers[0].SecurityContext.RunAsNonRoot = nil, nil
			p.Spec.SecurityContext.RunAsUser, p.Spec.Containers[0].SecurityContext.RunAsUser = nil, nil
		}, "violates PodSecurity"},
		{"unconfined-seccomp", func(p *corev1.Pod) {
			p.Spec.SecurityContext.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
			p.Spec.Containers[0].SecurityContext.SeccompProfile = nil
		}, "violates PodSecurity"},
		{"host-path", func(p *corev1.Pod) {
			p.Spec.Volumes[1].VolumeSource = corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}
		}, "violates PodSecurity"},
		{"runtime-class-missing", func(p *corev1.Pod) { p.Spec.RuntimeClassName = ptrTo("absent") }, `RuntimeClass "absent" not found`},
		{"service-account-missing", func(p *corev1.Pod) { p.Spec.ServiceAccountName = "absent" }, `serviceaccount "absent" not found`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := m.Pod.DeepCopy()
			tt.mutate(p)
			if err := create(p); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("create the Pod with %s = %v, want a refusal saying %q", tt.name, err, tt.want)
			}
		})
	}
}

// TestApplyParametersMissing: in a namespace without the parameters the
// header names, kubectl apply fails and names what is missing.
func TestApplyParametersMissing(t *testing.T) {
	cp := k8stest.Start(t)
	tt0 := cases[3]
	m := exportFor(t, tt0.spec, tt0.opts)
	w := writeExport(t, m)
	cp.Namespace(t, "bare", restricted)
	r := cp.Kubectl(t, "apply", "--namespace=bare", "-R", "-f", w.dir)
	if r.Err == nil || !strings.Contains(r.Stderr, fmt.Sprintf("RuntimeClass %q not found", k8s.DefaultRuntimeClass)) {
		t.Errorf("kubectl apply without the RuntimeClass = %v\n%s%s\nwant it refused naming RuntimeClass %s", r.Err, r.Stdout, r.Stderr, k8s.DefaultRuntimeClass)
	}
}
