package k8s

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"unicode"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/airlock-sandbox/airlock/export/oci"
	"github.com/airlock-sandbox/airlock/plan"
	"github.com/airlock-sandbox/airlock/policy"
)

// Defaults for Options fields left empty. There is no default for the
// sandbox's image: airlock cannot look inside a remote image, so it could
// not tell whether a default holds the command.
const (
	DefaultName = "airlock-sandbox"
	// DefaultProxyImage is the tag that packaging/egress-proxy/README.md's
	// commands build (podman names a local build localhost/NAME:latest).
	// Push it to a registry the cluster pulls from, or load it into the
	// nodes (the Deployment pulls IfNotPresent), or set ProxyImage.
	DefaultProxyImage   = "localhost/airlock-egress-proxy:latest"
	DefaultRuntimeClass = "gvisor"
	// DefaultServiceAccount is the account every namespace has.
	DefaultServiceAccount = "default"
)

// SandboxUID is the uid and gid the Pod runs as: unprivileged, and the
// "nonroot" user of distroless images.
const SandboxUID = 65532

// Options configures Export. The zero value is refused: Image is required,
// and so are Volumes for a policy with fs_read or fs_write grants and
// ProxyClusterIP (or ProxyDNS) for one with net_hosts.
type Options struct {
	// Name names the Pod and prefixes the other objects. Empty means
	// DefaultName. It must be a DNS-1123 label of at most 50 characters.
	Name string

	// Namespace is set on every object. Empty leaves it out (kubectl's
	// current namespace).
	Namespace string

	// Image runs the command. It must hold the plan's command and allowed
	// tools at the plan's paths (Manifests.ImagePaths; they were resolved
	// on the exporting host). Required: there is no default.
	Image string

	// RuntimeClass is the Pod's runtimeClassName, a RuntimeClass the
	// cluster must define. Empty means DefaultRuntimeClass; NoRuntimeClass
	// leaves the field out (the cluster's default runtime, usually runc:
	// weaker isolation).
	RuntimeClass   string
	NoRuntimeClass bool

	// ProxyImage runs the egress proxy: `airlock egress-proxy` must be on
	// its PATH. Empty means DefaultProxyImage.
	ProxyImage string

	// ServiceAccount is the existing ServiceAccount the Pod and the proxy
	// run as, with no token mounted. Empty means DefaultServiceAccount,
	// which the controller-manager creates in every namespace. The export
	// defines none: `kubectl apply --dry-run=server` creates nothing, so
	// a Pod naming an account of the same file would be refused there.
	ServiceAccount string

	// ProxyClusterIP pins the proxy Service's clusterIP (a free address in
	// the cluster's Service range), and HTTP_PROXY, HTTPS_PROXY and
	// ALL_PROXY name that address, so the Pod reaches the proxy with DNS
	// closed. Required when the policy grants net_hosts, unless ProxyDNS.
	ProxyClusterIP string

	// ProxyDNS lets the cluster pick the proxy's address instead: the
	// proxy variables name the Service, and the sandbox's NetworkPolicy
	// allows DNS (UDP and TCP 53) to kube-dns in kube-system so the name
	// resolves. DNS is a channel out: any name the code looks up reaches
	// the cluster resolver and, for names outside the cluster, the
	// internet. False keeps DNS closed. It excludes ProxyClusterIP.
	ProxyDNS bool

	// Volumes backs the policy's fs_read and fs_write grants, keyed by the
	// grant's path as the plan has it (absolute; `airlock explain` prints
	// it): an existing claim, a new claim the export defines (fs_write),
	// or the image (fs_read). Every grant needs an entry and every entry
	// must be a grant. Nil suits only a policy without such grants.
	Volumes map[string]Volume

	// Arch is the GOARCH the seccomp profile is written for. Empty means
	// the architecture this binary was built for.
	Arch string
}

// Manifests are the exported objects. Proxy objects are nil when the
// policy grants no net_hosts.
type Manifests struct {
	SandboxPolicy *networkingv1.NetworkPolicy     // the Pod's ingress and egress
	Claims        []*corev1.PersistentVolumeClaim // new claims for fs_write grants (Volume.New)
	ProxyConfig   *corev1.ConfigMap               // policy.json for the proxy
	Proxy         *appsv1.Deployment              // airlock egress-proxy
	ProxyService  *corev1.Service                 // what HTTP_PROXY names
	ProxyPolicy   *networkingv1.NetworkPolicy     // only the sandbox reaches the proxy
	Pod           *corev1.Pod

	// Seccomp is the Localhost seccomp profile (OCI/Docker seccomp JSON)
	// and SeccompPath where it goes below the kubelet's seccomp root. The
	// file name ends in SeccompExt, not .json: `kubectl apply -R` parses
	// every .json, .yaml and .yml file below the folder it is given.
	Seccomp     []byte
	SeccompPath string

	// ImagePaths are the executables Options.Image must hold: the command,
	// then the allowed tools, at the paths the Pod runs them by.
	ImagePaths []string

	// Outside lists, one line each, what the objects refer to that the
	// export does not define: the namespace, images, the RuntimeClass,
	// existing claims (and the default StorageClass for new ones), the
	// proxy's clusterIP or DNS, the seccomp profile on the nodes. YAML
	// writes it into its header.
	Outside []string
}

// SeccompExt ends the seccomp profile's file name: kubectl skips it when
// it applies a folder (its FileExtensions are .json, .yaml and .yml),
// and the kubelet reads the file whatever its name.
const SeccompExt = ".seccomp"

// Export builds the manifests for a compiled plan and the policy it came
// from. Everything the Pod is given comes from the plan; the policy is
// only handed to the egress proxy (its ConfigMap).
func Export(pl *plan.Plan, p *policy.Policy, opts Options) (*Manifests, error) {
	if pl == nil || p == nil {
		return nil, errors.New("k8s: export: plan and policy are required")
	}
	// An exported sandbox has no connect broker: its programs use the
	// proxy variables, and there is no DNS inside.
	pl, err := plan.WithoutTransparentEgressCopy(pl)
	if err != nil {
		return nil, err
	}
	o, err := opts.withDefaults(pl)
	if err != nil {
		return nil, err
	}
	sc, err := oci.Seccomp(pl.Seccomp, o.Arch)
	if err != nil {
		return nil, fmt.Errorf("k8s: export: %w", err)
	}
	m := &Manifests{SeccompPath: "airlock/" + o.Name + SeccompExt, ImagePaths: slices.Clone(pl.Tools)}
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
	gv, gm, claims, err := grantVolumes(o, pl)
	if err != nil {
		return nil, err
	}
	m.Claims = claims
	if m.Pod, err = pod(o, pl, m.SeccompPath, gv, gm); err != nil {
		return nil, err
	}
	m.Outside = outside(o, m)
	return m, nil
}

func (o Options) withDefaults(pl *plan.Plan) (Options, error) {
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
		return o, fmt.Errorf("k8s: export: no image for the sandbox: name one that holds %s (--image); airlock cannot look inside remote images, so it has no default", strings.Join(pl.Tools, ", "))
	}
	if o.ProxyImage == "" {
		o.ProxyImage = DefaultProxyImage
	}
	for _, img := range []string{o.Image, o.ProxyImage} {
		if strings.ContainsFunc(img, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }) {
			return o, fmt.Errorf("k8s: export: image %q: an image reference holds no spaces or control characters", img)
		}
	}
	if o.RuntimeClass == "" {
		o.RuntimeClass = DefaultRuntimeClass
	}
	if o.ServiceAccount == "" {
		o.ServiceAccount = DefaultServiceAccount
	}
	if errs := validation.IsDNS1123Subdomain(o.ServiceAccount); len(errs) > 0 {
		return o, fmt.Errorf("k8s: export: service account %q: %s", o.ServiceAccount, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(o.RuntimeClass); !o.NoRuntimeClass && len(errs) > 0 {
		return o, fmt.Errorf("k8s: export: runtime class %q: %s", o.RuntimeClass, strings.Join(errs, "; "))
	}
	if o.ProxyClusterIP != "" {
		a, err := netip.ParseAddr(o.ProxyClusterIP)
		if err != nil || a.Zone() != "" || a.IsUnspecified() || a.IsLoopback() || a.IsMulticast() {
			return o, fmt.Errorf("k8s: export: proxy clusterIP %q: give a free unicast address of the cluster's Service range (--proxy-cluster-ip)", o.ProxyClusterIP)
		}
		o.ProxyClusterIP = a.Unmap().String()
		if o.ProxyDNS {
			return o, errors.New("k8s: export: a pinned proxy clusterIP and proxy DNS exclude each other: with --proxy-cluster-ip the Pod needs no DNS, so drop --proxy-dns")
		}
	}
	if pl.Proxy && o.ProxyClusterIP == "" && !o.ProxyDNS {
		return o, errors.New("k8s: export: the policy grants net_hosts, and with DNS closed the Pod reaches the egress proxy only by address: " +
			"pin the proxy Service's clusterIP to a free address of the cluster's Service range (--proxy-cluster-ip), " +
			"or let the Pod look the Service up through kube-dns (--proxy-dns; DNS is then a channel out)")
	}
	return o, nil
}

// outside lists what the export refers to and does not define.
func outside(o Options, m *Manifests) []string {
	ns := "the current namespace of kubectl (no --namespace)"
	if o.Namespace != "" {
		ns = "Namespace " + o.Namespace + " (--namespace): must exist"
	}
	out := []string{ns + "; every object passes the restricted Pod Security level (label it pod-security.kubernetes.io/enforce=restricted)",
		fmt.Sprintf("image %s (--image): must hold the command and allowed_tools at %s", o.Image, strings.Join(m.ImagePaths, ", "))}
	if m.Proxy != nil {
		out = append(out, fmt.Sprintf("image %s (--proxy-image): runs `airlock egress-proxy`; build it as packaging/egress-proxy/README.md says", o.ProxyImage))
	}
	if !o.NoRuntimeClass {
		out = append(out, fmt.Sprintf("RuntimeClass %s (--runtime-class; \"\" leaves it out): must exist in the cluster, or the Pod is refused; its handler must be a runtime the nodes have (runsc for gVisor)", o.RuntimeClass))
	}
	who := "the Pod runs"
	if m.Proxy != nil {
		who = "the Pod and the proxy run"
	}
	out = append(out, fmt.Sprintf("ServiceAccount %s (--service-account): must exist in the namespace, or the Pod is refused (the controller-manager makes %q in each); %s as it with no token mounted", o.ServiceAccount, DefaultServiceAccount, who))
	made := map[string]string{} // new claim => its size
	for _, c := range m.Claims {
		q := c.Spec.Resources.Requests[corev1.ResourceStorage]
		made[c.Name] = q.String()
	}
	claims := map[string]*corev1.PersistentVolumeClaimVolumeSource{}
	for _, v := range m.Pod.Spec.Volumes {
		claims[v.Name] = v.PersistentVolumeClaim
	}
	for _, mt := range m.Pod.Spec.Containers[0].VolumeMounts {
		c := claims[mt.Name]
		switch {
		case c == nil:
		case made[c.ClaimName] != "":
			out = append(out, fmt.Sprintf("the default StorageClass: provisions PersistentVolumeClaim %s, which this file defines (--volume %s=new:%s) and mounts read-write at %s; it stays when the Pod is deleted", c.ClaimName, mt.MountPath, made[c.ClaimName], mt.MountPath))
		default:
			mode := "read-write"
			if c.ReadOnly {
				mode = "read-only"
			}
			out = append(out, fmt.Sprintf("PersistentVolumeClaim %s (--volume %s=claim:%s): must exist in the namespace; mounted %s at %s", c.ClaimName, mt.MountPath, c.ClaimName, mode, mt.MountPath))
		}
	}
	switch {
	case m.Proxy != nil && o.ProxyDNS:
		out = append(out, "DNS (--proxy-dns): the Pod may query kube-dns in kube-system, whose pods must carry k8s-app=kube-dns")
	case m.Proxy != nil:
		out = append(out, fmt.Sprintf("clusterIP %s (--proxy-cluster-ip): must be free in the cluster's Service range", o.ProxyClusterIP))
	}
	return append(out, fmt.Sprintf("seccomp profile %s/%s (JSON; not a manifest, which kubectl skips): install it on every node as <kubelet seccomp root>/%s (default root /var/lib/kubelet/seccomp) before the Pod is scheduled", SeccompDir, m.SeccompPath, m.SeccompPath))
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
// NetworkPolicy before anything else, so the Pod never runs unfenced,
// what the Pod needs next, and the Pod last.
func (m *Manifests) Objects() []runtime.Object {
	objs := []runtime.Object{m.SandboxPolicy}
	for _, c := range m.Claims {
		objs = append(objs, c)
	}
	if m.Proxy != nil {
		objs = append(objs, m.ProxyConfig, m.Proxy, m.ProxyService, m.ProxyPolicy)
	}
	return append(objs, m.Pod)
}

// YAML renders Objects as one multi-document YAML stream, with a header
// listing Outside: what must exist before the objects are applied.
func (m *Manifests) YAML() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("# Generated by airlock export k8s. Apply it with `kubectl apply -f` on this file, or\n")
	b.WriteString("# `kubectl apply -R -f` on its folder; the objects are in the order to apply them.\n")
	b.WriteString("# They refer to nothing outside this file but these parameters; provide them first:\n")
	for _, l := range m.Outside {
		if strings.ContainsFunc(l, unicode.IsControl) {
			l = strconv.Quote(l) // a grant path with a newline must not end the comment
		}
		fmt.Fprintf(&b, "#   %s\n", l)
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
