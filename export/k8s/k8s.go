package k8s

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/airlock-sandbox/airlock/export/oci"
	"github.com/airlock-sandbox/airlock/plan"
	"github.com/airlock-sandbox/airlock/policy"
)

// Defaults for Options fields left empty.
const (
	DefaultName         = "airlock-sandbox"
	DefaultImage        = "docker.io/library/debian:bookworm-slim"
	DefaultProxyImage   = "ghcr.io/airlock-sandbox/airlock:latest"
	DefaultRuntimeClass = "gvisor"
)

// SandboxUID is the uid and gid the Pod runs as: unprivileged, and the
// "nonroot" user of distroless images.
const SandboxUID = 65532

// Options configures Export. The zero value exports a Pod named
// DefaultName in the current namespace, on DefaultImage, under gVisor.
type Options struct {
	// Name names the Pod and prefixes the other objects. Empty means
	// DefaultName. It must be a DNS-1123 label of at most 50 characters.
	Name string

	// Namespace is set on every object. Empty leaves it out (kubectl's
	// current namespace).
	Namespace string

	// Image runs the command; it must contain the command at the plan's
	// path and the allowed tools. Empty means DefaultImage.
	Image string

	// RuntimeClass is the Pod's runtimeClassName. Empty means
	// DefaultRuntimeClass; NoRuntimeClass leaves the field out (the
	// cluster's default runtime, usually runc: weaker isolation).
	RuntimeClass   string
	NoRuntimeClass bool

	// ProxyImage runs the egress proxy. Empty means DefaultProxyImage.
	ProxyImage string

	// ProxyClusterIP pins the proxy Service's clusterIP; HTTP_PROXY then
	// names the address and the NetworkPolicy allows no DNS. Empty lets
	// the cluster pick and allows DNS to kube-dns so the name resolves.
	ProxyClusterIP string

	// Arch is the GOARCH the seccomp profile is written for. Empty means
	// the architecture this binary was built for.
	Arch string
}

// Manifests are the exported objects. Proxy objects are nil when the
// policy grants no net_hosts.
type Manifests struct {
	SandboxPolicy *networkingv1.NetworkPolicy // the Pod's ingress and egress
	ProxyConfig   *corev1.ConfigMap           // policy.json for the proxy
	Proxy         *appsv1.Deployment          // airlock egress-proxy
	ProxyService  *corev1.Service             // what HTTP_PROXY names
	ProxyPolicy   *networkingv1.NetworkPolicy // only the sandbox reaches the proxy
	Pod           *corev1.Pod

	// Seccomp is the Localhost seccomp profile (OCI/Docker seccomp JSON)
	// and SeccompPath where it goes below the kubelet's seccomp root.
	Seccomp     []byte
	SeccompPath string
}

// Export builds the manifests for a compiled plan and the policy it came
// from. Everything the Pod is given comes from the plan; the policy is
// only handed to the egress proxy (its ConfigMap).
func Export(pl *plan.Plan, p *policy.Policy, opts Options) (*Manifests, error) {
	if pl == nil || p == nil {
		return nil, errors.New("k8s: export: plan and policy are required")
	}
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	sc, err := oci.Seccomp(pl.Seccomp, o.Arch)
	if err != nil {
		return nil, fmt.Errorf("k8s: export: %w", err)
	}
	m := &Manifests{SeccompPath: "airlock/" + o.Name + ".json"}
	if m.Seccomp, err = json.MarshalIndent(sc, "", "  "); err != nil {
		return nil, fmt.Errorf("k8s: export: seccomp: %w", err)
	}
	if pl.Proxy {
		pj, err := p.MarshalJSON()
		if err != nil {
			return nil, fmt.Errorf("k8s: export: policy: %w", err)
		}
		m.ProxyConfig, m.Proxy, m.ProxyService, m.ProxyPolicy = proxyObjects(o, string(pj))
	}
	m.SandboxPolicy = sandboxPolicy(o, pl.Proxy)
	if m.Pod, err = pod(o, pl, m.SeccompPath); err != nil {
		return nil, err
	}
	return m, nil
}

func (o Options) withDefaults() (Options, error) {
	if o.Name == "" {
		o.Name = DefaultName
	}
	if !isLabel(o.Name) || len(o.Name) > 50 {
		return o, fmt.Errorf("k8s: export: name %q: use at most 50 lowercase letters, digits and '-', starting and ending alphanumeric", o.Name)
	}
	if o.Namespace != "" && !isLabel(o.Namespace) {
		return o, fmt.Errorf("k8s: export: namespace %q is not a DNS-1123 label", o.Namespace)
	}
	if o.Image == "" {
		o.Image = DefaultImage
	}
	if o.ProxyImage == "" {
		o.ProxyImage = DefaultProxyImage
	}
	if o.RuntimeClass == "" {
		o.RuntimeClass = DefaultRuntimeClass
	}
	return o, nil
}

// isLabel reports whether s is a DNS-1123 label (RFC 1123, at most 63).
func isLabel(s string) bool {
	if s == "" || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for _, c := range s {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}

// Objects returns the objects in the order to apply them: the sandbox's
// NetworkPolicy before anything else, so the Pod never runs unfenced, and
// the Pod last.
func (m *Manifests) Objects() []runtime.Object {
	objs := []runtime.Object{m.SandboxPolicy}
	if m.Proxy != nil {
		objs = append(objs, m.ProxyConfig, m.Proxy, m.ProxyService, m.ProxyPolicy)
	}
	return append(objs, m.Pod)
}

// YAML renders Objects as one multi-document YAML stream, with a header
// saying where the seccomp profile must go.
func (m *Manifests) YAML() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("# Generated by airlock export k8s. Apply in this order.\n")
	fmt.Fprintf(&b, "# Install the seccomp profile on every node as <kubelet seccomp root>/%s\n", m.SeccompPath)
	b.WriteString("# (default root /var/lib/kubelet/seccomp) before the Pod is scheduled.\n")
	if m.Proxy != nil {
		b.WriteString("# The proxy Deployment runs `airlock egress-proxy`: its image must contain the airlock binary.\n")
	}
	for _, obj := range m.Objects() {
		y, err := yaml.Marshal(obj)
		if err != nil {
			return nil, fmt.Errorf("k8s: yaml: %w", err)
		}
		b.WriteString("---\n")
		b.Write(y)
	}
	return b.Bytes(), nil
}

func meta(o Options, name string, labels map[string]string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: o.Namespace, Labels: labels}
}

// labels returns the labels of one component of this export.
func labels(o Options, component string) map[string]string {
	return map[string]string{
		"app.kubernetes.io/name":       "airlock",
		"app.kubernetes.io/instance":   o.Name,
		"app.kubernetes.io/component":  component,
		"app.kubernetes.io/managed-by": "airlock-export",
	}
}

// volumeName derives a DNS-1123 label from a grant path: prefix, then the
// path's letters and digits joined by '-', cut to fit.
func volumeName(prefix, path string) string {
	var b strings.Builder
	b.WriteString(prefix)
	dash := true
	for _, c := range strings.ToLower(path) {
		if (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') {
			b.WriteRune(c)
			dash = false
		} else if !dash {
			b.WriteByte('-')
			dash = true
		}
	}
	s := strings.TrimRight(b.String(), "-")
	if len(s) > 40 {
		s = strings.TrimRight(s[:40], "-")
	}
	return s
}
