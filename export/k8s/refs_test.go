package k8s_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/airlock-sandbox/airlock/export/k8s"
	"github.com/airlock-sandbox/airlock/policy"
)

// Issue 16: every object the export refers to is in the export or is a
// parameter the caller named, and the YAML header lists the parameters.
//
// What may be referred to without being defined, and why:
//   - PersistentVolumeClaims: those named in Options.Volumes (--volume
//     PATH=claim:NAME), and those the export defines (PATH=new:SIZE),
//     which the cluster's default StorageClass provisions.
//   - images: Options.Image (--image, required) and Options.ProxyImage
//     (--proxy-image, default DefaultProxyImage).
//   - runtimeClassName: Options.RuntimeClass (--runtime-class), or
//     omitted with NoRuntimeClass; the proxy's is always omitted.
//   - serviceAccountName: Options.ServiceAccount (--service-account,
//     default "default"), with automountServiceAccountToken false; image
//     pull secrets are omitted.
//   - kube-dns in kube-system: only with Options.ProxyDNS (--proxy-dns).
//   - the proxy Service's clusterIP: Options.ProxyClusterIP
//     (--proxy-cluster-ip).
//   - the Localhost seccomp profile: the file Write puts under SeccompDir.
//
// ConfigMaps, Secrets, Services, pods (by label) must be defined.

// params are the names an export was given, as the test knows them.
type params struct {
	claims       map[string]bool
	images       map[string]bool
	runtimeClass string // "" when the field must be omitted
	account      string
	clusterIP    string
	dns          bool
}

func paramsOf(o k8s.Options) params {
	p := params{claims: map[string]bool{}, images: map[string]bool{o.Image: true, k8s.DefaultProxyImage: true},
		runtimeClass: k8s.DefaultRuntimeClass, account: k8s.DefaultServiceAccount, clusterIP: o.ProxyClusterIP, dns: o.ProxyDNS}
	if o.ServiceAccount != "" {
		p.account = o.ServiceAccount
	}
	if o.ProxyImage != "" {
		p.images = map[string]bool{o.Image: true, o.ProxyImage: true}
	}
	if o.RuntimeClass != "" {
		p.runtimeClass = o.RuntimeClass
	}
	if o.NoRuntimeClass {
		p.runtimeClass = ""
	}
	for _, v := range o.Volumes {
		if v.Claim != "" {
			p.claims[v.Claim] = true
		}
	}
	return p
}

// written is an export as Write leaves it: the manifest decoded strictly
// from the file, its header, and the folder.
type written struct {
	d      decoded
	header string
	dir    string
}

func writeExport(t *testing.T, m *k8s.Manifests) written {
	t.Helper()
	dir := t.TempDir()
	if err := m.Write(dir); err != nil {
		t.Fatalf("Write = %v", err)
	}
	y, err := os.ReadFile(filepath.Join(dir, k8s.ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	if want, err := m.YAML(); err != nil || !bytes.Equal(y, want) {
		t.Fatalf("%s is not the export's YAML (%v)", k8s.ManifestFile, err)
	}
	header, _, _ := bytes.Cut(y, []byte("\n---\n"))
	return written{d: decodeStrict(t, y), header: string(header), dir: dir}
}

// refs returns every reference of the written export that resolves
// neither within it nor to a parameter in p.
func refs(w written, p params) []string {
	var bad []string
	errf := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	d := w.d
	cms := map[string]bool{}
	for _, cm := range d.cms {
		cms[cm.Name] = true
	}
	made := map[string]bool{}
	for _, c := range d.pvcs {
		made[c.Name] = true
	}
	// Pods of the export, by what selects them.
	type podOf struct {
		what   string
		labels map[string]string
		spec   *corev1.PodSpec
	}
	var pods []podOf
	for _, pod := range d.pods {
		pods = append(pods, podOf{"pod " + pod.Name, pod.Labels, &pod.Spec})
		switch rc := pod.Spec.RuntimeClassName; {
		case p.runtimeClass == "" && rc != nil:
			errf("pod %s: runtimeClassName %q, want it omitted (NoRuntimeClass)", pod.Name, *rc)
		case p.runtimeClass != "" && (rc == nil || *rc != p.runtimeClass):
			errf("pod %s: runtimeClassName %s, want the parameter %q", pod.Name, optional(rc), p.runtimeClass)
		case p.runtimeClass != "" && !strings.Contains(w.header, "RuntimeClass "+p.runtimeClass+" (--runtime-class"):
			errf("the header does not name RuntimeClass %s", p.runtimeClass)
		}
	}
	for _, dep := range d.deps {
		if !selects(dep.Spec.Selector, dep.Spec.Template.Labels) {
			errf("deployment %s: its selector does not select its own pods", dep.Name)
		}
		if dep.Spec.Template.Spec.RuntimeClassName != nil {
			errf("deployment %s: runtimeClassName set, want it omitted", dep.Name)
		}
		pods = append(pods, podOf{"deployment " + dep.Name, dep.Spec.Template.Labels, &dep.Spec.Template.Spec})
	}
	for _, po := range pods {
		ps := po.spec
		switch {
		case ps.ServiceAccountName != p.account || (ps.DeprecatedServiceAccount != "" && ps.DeprecatedServiceAccount != p.account):
			errf("%s: service account %q (%q), want the parameter %q", po.what, ps.ServiceAccountName, ps.DeprecatedServiceAccount, p.account)
		case !strings.Contains(w.header, "ServiceAccount "+p.account+" (--service-account)"):
			errf("the header does not name ServiceAccount %s", p.account)
		case ps.AutomountServiceAccountToken == nil || *ps.AutomountServiceAccountToken:
			errf("%s: service account token mounted (%s), want false", po.what, optional(ps.AutomountServiceAccountToken))
		}
		if len(ps.ImagePullSecrets) > 0 {
			errf("%s: imagePullSecrets %v refer to Secrets the export does not define", po.what, ps.ImagePullSecrets)
		}
		vols := map[string]bool{}
		for _, v := range ps.Volumes {
			vols[v.Name] = true
			switch s := v.VolumeSource; {
			case s.EmptyDir != nil && reflect.DeepEqual(s, corev1.VolumeSource{EmptyDir: s.EmptyDir}):
			case s.ConfigMap != nil && reflect.DeepEqual(s, corev1.VolumeSource{ConfigMap: s.ConfigMap}):
				if !cms[s.ConfigMap.Name] {
					errf("%s: volume %s: ConfigMap %q is not in the export", po.what, v.Name, s.ConfigMap.Name)
				}
			case s.PersistentVolumeClaim != nil && reflect.DeepEqual(s, corev1.VolumeSource{PersistentVolumeClaim: s.PersistentVolumeClaim}):
				c := s.PersistentVolumeClaim.ClaimName
				switch {
				case made[c] && p.claims[c]:
					errf("%s: volume %s: claim %q is both in the export and a parameter", po.what, v.Name, c)
				case made[c]:
					if !strings.Contains(w.header, "provisions PersistentVolumeClaim "+c+", which this file defines") {
						errf("the header does not say the default StorageClass provisions %s", c)
					}
				case !p.claims[c]:
					errf("%s: volume %s: claim %q is neither in the export nor named by --volume", po.what, v.Name, c)
				case !strings.Contains(w.header, "PersistentVolumeClaim "+c+" (--volume "):
					errf("the header does not name PersistentVolumeClaim %s", c)
				}
			default:
				js, _ := json.Marshal(s) // a VolumeSource always marshals
				errf("%s: volume %s: source %s is neither an emptyDir, a ConfigMap of the export nor a named claim", po.what, v.Name, js)
			}
		}
		for _, c := range ps.Containers {
			if !p.images[c.Image] {
				errf("%s: image %q is not a parameter (--image, --proxy-image)", po.what, c.Image)
			}
			if !strings.Contains(w.header, "image "+c.Image+" (--") {
				errf("the header does not name image %s", c.Image)
			}
			for _, m := range c.VolumeMounts {
				if !vols[m.Name] {
					errf("%s: mount %s names no volume %q", po.what, m.MountPath, m.Name)
				}
			}
			if len(c.EnvFrom) > 0 {
				errf("%s: envFrom %+v refers outside the container", po.what, c.EnvFrom)
			}
			for _, e := range c.Env {
				if e.ValueFrom != nil {
					errf("%s: env %s comes from %+v", po.what, e.Name, e.ValueFrom)
				}
			}
		}
		profiles := []*corev1.SeccompProfile{}
		if ps.SecurityContext != nil {
			profiles = append(profiles, ps.SecurityContext.SeccompProfile)
		}
		for _, c := range ps.Containers {
			if c.SecurityContext != nil {
				profiles = append(profiles, c.SecurityContext.SeccompProfile)
			}
		}
		for _, sp := range profiles {
			if sp == nil || sp.Type != corev1.SeccompProfileTypeLocalhost {
				continue
			}
			if sp.LocalhostProfile == nil {
				errf("%s: a Localhost seccomp profile without a path", po.what)
				continue
			}
			file := filepath.Join(w.dir, k8s.SeccompDir, filepath.FromSlash(*sp.LocalhostProfile))
			data, err := os.ReadFile(file)
			var sc specs.LinuxSeccomp
			if err == nil {
				dec := json.NewDecoder(bytes.NewReader(data))
				dec.DisallowUnknownFields()
				err = dec.Decode(&sc)
			}
			if err != nil || len(sc.Syscalls) == 0 {
				errf("%s: localhostProfile %s is not a seccomp profile the export wrote: %v", po.what, *sp.LocalhostProfile, err)
			}
			if !strings.Contains(w.header, "<kubelet seccomp root>/"+*sp.LocalhostProfile+" ") {
				errf("the header does not say to install %s", *sp.LocalhostProfile)
			}
		}
	}
	selectsPod := func(sel *metav1.LabelSelector) bool {
		for _, po := range pods {
			if selects(sel, po.labels) {
				return true
			}
		}
		return false
	}
	peers := func(np *networkingv1.NetworkPolicy, list []networkingv1.NetworkPolicyPeer) {
		for _, peer := range list {
			kubeDNS := peer.NamespaceSelector != nil && peer.PodSelector != nil &&
				reflect.DeepEqual(peer.NamespaceSelector.MatchLabels, map[string]string{"kubernetes.io/metadata.name": "kube-system"}) &&
				reflect.DeepEqual(peer.PodSelector.MatchLabels, map[string]string{"k8s-app": "kube-dns"})
			switch {
			case kubeDNS && p.dns:
				if !strings.Contains(w.header, "(--proxy-dns)") {
					errf("the header does not say the Pod may query kube-dns")
				}
			case peer.IPBlock != nil || peer.NamespaceSelector != nil || peer.PodSelector == nil:
				errf("networkpolicy %s: peer %+v is outside the export and no parameter names it", np.Name, peer)
			case !selectsPod(peer.PodSelector):
				errf("networkpolicy %s: peer %v selects no pod of the export", np.Name, peer.PodSelector.MatchLabels)
			}
		}
	}
	for _, np := range d.policies {
		if !selectsPod(&np.Spec.PodSelector) {
			errf("networkpolicy %s: podSelector %v selects no pod of the export", np.Name, np.Spec.PodSelector.MatchLabels)
		}
		for _, r := range np.Spec.Egress {
			peers(np, r.To)
		}
		for _, r := range np.Spec.Ingress {
			peers(np, r.From)
		}
	}
	for _, svc := range d.svcs {
		sel := &metav1.LabelSelector{MatchLabels: svc.Spec.Selector}
		proxies := 0
		for _, dep := range d.deps {
			if selects(sel, dep.Spec.Template.Labels) {
				proxies++
			}
		}
		if proxies != 1 || (len(d.pods) == 1 && selects(sel, d.pods[0].Labels)) {
			errf("service %s selects %d proxy deployments (or the sandbox), want exactly the proxy's pods", svc.Name, proxies)
		}
		switch {
		case svc.Spec.ClusterIP != p.clusterIP:
			errf("service %s: clusterIP %q, want the parameter %q", svc.Name, svc.Spec.ClusterIP, p.clusterIP)
		case p.clusterIP != "" && !strings.Contains(w.header, "clusterIP "+p.clusterIP+" (--proxy-cluster-ip)"):
			errf("the header does not name clusterIP %s", p.clusterIP)
		}
	}
	return bad
}

// refCases are the golden cases plus exports the goldens do not show.
func refCases() []struct {
	name string
	spec policy.Spec
	opts k8s.Options
} {
	out := append(cases[:len(cases):len(cases)], []struct {
		name string
		spec policy.Spec
		opts k8s.Options
	}{
		{"ipv6-proxy", fullSpec, k8s.Options{Name: "job-6", Image: testImage, ProxyClusterIP: "fd00:10:96::50", ProxyImage: "registry.example/egress:2", Volumes: claims}},
		{"file-from-image", policy.Spec{FSRead: []string{"/data/in.csv"}, AllowedTools: []string{"python3"}}, k8s.Options{Image: testImage,
			Volumes: map[string]k8s.Volume{"/data/in.csv": {Image: true}}}},
	}...)
	return out
}

func TestExportRefsResolve(t *testing.T) {
	for _, tt := range refCases() {
		t.Run(tt.name, func(t *testing.T) {
			m := exportFor(t, tt.spec, tt.opts)
			w := writeExport(t, m)
			if len(m.ImagePaths) == 0 || m.ImagePaths[0] != w.d.pods[0].Spec.Containers[0].Command[0] {
				t.Errorf("ImagePaths %v do not start with the command %v", m.ImagePaths, w.d.pods[0].Spec.Containers[0].Command)
			}
			for _, p := range m.ImagePaths {
				if !strings.Contains(w.header, p) {
					t.Errorf("the header does not say the image must hold %s", p)
				}
			}
			for _, msg := range refs(w, paramsOf(tt.opts)) {
				t.Error(msg)
			}
			for _, msg := range validate(w.d, len(tt.spec.NetHosts) > 0, tt.opts.ProxyDNS) {
				t.Error(msg)
			}
		})
	}
}

// TestRefsCatches breaks one reference at a time in a good export, so a
// check of refs that can no longer fail is noticed.
func TestRefsCatches(t *testing.T) {
	other := map[string]string{"app": "other"}
	breaks := []struct {
		name   string
		mutate func(d decoded)
	}{
		{"claim-not-named", func(d decoded) { d.pods[0].Spec.Volumes[1].PersistentVolumeClaim.ClaimName = "job-1-read-data" }},
		{"configmap-missing", func(d decoded) { d.deps[0].Spec.Template.Spec.Volumes[0].ConfigMap.Name = "other" }},
		{"secret-volume", func(d decoded) {
			d.pods[0].Spec.Volumes = append(d.pods[0].Spec.Volumes, corev1.Volume{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "creds"}}})
		}},
		{"hostpath-volume", func(d decoded) {
			d.pods[0].Spec.Volumes[0].VolumeSource = corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}
		}},
		{"mount-without-volume", func(d decoded) { d.pods[0].Spec.Containers[0].VolumeMounts[0].Name = "nope" }},
		{"policy-selects-nothing", func(d decoded) { d.policies[0].Spec.PodSelector.MatchLabels = other }},
		{"peer-outside", func(d decoded) { d.policies[0].Spec.Egress[0].To[0].PodSelector.MatchLabels = other }},
		{"namespace-peer-without-dns", func(d decoded) {
			d.policies[0].Spec.Egress[0].To[0].NamespaceSelector = &metav1.LabelSelector{}
		}},
		{"ipblock-peer", func(d decoded) {
			d.policies[0].Spec.Egress[0].To = append(d.policies[0].Spec.Egress[0].To, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0"}})
		}},
		{"service-selects-nothing", func(d decoded) { d.svcs[0].Spec.Selector = other }},
		{"service-selects-sandbox", func(d decoded) { d.svcs[0].Spec.Selector = d.pods[0].Labels }},
		{"service-clusterip", func(d decoded) { d.svcs[0].Spec.ClusterIP = "" }},
		{"deployment-selector", func(d decoded) { d.deps[0].Spec.Selector.MatchLabels = other }},
		{"service-account", func(d decoded) { d.pods[0].Spec.ServiceAccountName = "builder" }},
		{"service-account-omitted", func(d decoded) { d.pods[0].Spec.ServiceAccountName = "" }},
		{"proxy-service-account", func(d decoded) { d.deps[0].Spec.Template.Spec.ServiceAccountName = "proxy" }},
		{"token-mounted", func(d decoded) { d.pods[0].Spec.AutomountServiceAccountToken = ptrTo(true) }},
		{"pull-secret", func(d decoded) {
			d.pods[0].Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "regcred"}}
		}},
		{"runtime-class", func(d decoded) { d.pods[0].Spec.RuntimeClassName = ptrTo("runc") }},
		{"runtime-class-dropped", func(d decoded) { d.pods[0].Spec.RuntimeClassName = nil }},
		{"seccomp-elsewhere", func(d decoded) {
			d.pods[0].Spec.Containers[0].SecurityContext.SeccompProfile.LocalhostProfile = ptrTo("airlock/other.json")
		}},
		{"image-not-named", func(d decoded) { d.pods[0].Spec.Containers[0].Image = "docker.io/library/debian:bookworm-slim" }},
		{"env-from-configmap", func(d decoded) {
			d.pods[0].Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "other"}}}}
		}},
	}
	tt0 := cases[0]
	m := exportFor(t, tt0.spec, tt0.opts)
	for _, tt := range breaks {
		t.Run(tt.name, func(t *testing.T) {
			w := writeExport(t, m)
			if msgs := refs(w, paramsOf(tt0.opts)); len(msgs) != 0 {
				t.Fatalf("the unbroken export fails: %v", msgs)
			}
			tt.mutate(w.d)
			msgs := refs(w, paramsOf(tt0.opts))
			if len(msgs) == 0 {
				t.Errorf("refs accepts the export with %s broken", tt.name)
			}
			t.Log(msgs)
		})
	}
	t.Run("header-without-claim", func(t *testing.T) {
		w := writeExport(t, m)
		w.header = strings.ReplaceAll(w.header, "PersistentVolumeClaim "+dataClaim, "")
		if msgs := refs(w, paramsOf(tt0.opts)); len(msgs) == 0 {
			t.Error("refs accepts a header that does not name a claim the Pod mounts")
		}
	})
	t.Run("header-without-new-claim", func(t *testing.T) {
		nc := cases[len(cases)-1]
		w := writeExport(t, exportFor(t, nc.spec, nc.opts))
		if msgs := refs(w, paramsOf(nc.opts)); len(msgs) != 0 {
			t.Fatalf("the unbroken export fails: %v", msgs)
		}
		w.header = strings.ReplaceAll(w.header, "provisions PersistentVolumeClaim", "")
		if msgs := refs(w, paramsOf(nc.opts)); len(msgs) == 0 {
			t.Error("refs accepts a header that does not say the default StorageClass provisions the new claim")
		}
	})
	t.Run("new-claim-also-named", func(t *testing.T) {
		nc := cases[len(cases)-1]
		w := writeExport(t, exportFor(t, nc.spec, nc.opts))
		p := paramsOf(nc.opts)
		p.claims[w.d.pvcs[0].Name] = true
		if msgs := refs(w, p); len(msgs) == 0 {
			t.Error("refs accepts a claim that is both defined and a parameter")
		}
	})
	t.Run("profile-missing", func(t *testing.T) {
		w := writeExport(t, m)
		if err := os.RemoveAll(filepath.Join(w.dir, k8s.SeccompDir)); err != nil {
			t.Fatal(err)
		}
		if msgs := refs(w, paramsOf(tt0.opts)); len(msgs) == 0 {
			t.Error("refs accepts an export whose seccomp profile is not on disk")
		}
	})
}

// TestNoDNSByDefault: unless ProxyDNS asks for it, the sandbox's
// NetworkPolicy allows no DNS: no rule for port 53, no rule open to every
// port or every destination, no peer outside the namespace. With ProxyDNS
// there is exactly one more rule: UDP and TCP 53 to kube-dns.
func TestNoDNSByDefault(t *testing.T) {
	kubeDNS := networkingv1.NetworkPolicyPeer{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "kube-system"}},
		PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-dns"}},
	}
	for _, tt := range refCases() {
		t.Run(tt.name, func(t *testing.T) {
			m := exportFor(t, tt.spec, tt.opts)
			np := m.SandboxPolicy
			if !selects(&np.Spec.PodSelector, m.Pod.Labels) {
				t.Fatalf("the sandbox NetworkPolicy does not select the Pod")
			}
			dnsRules := 0
			for _, r := range np.Spec.Egress {
				if len(r.To) == 0 || len(r.Ports) == 0 {
					t.Errorf("egress rule %+v is open to every destination or port", r)
				}
				if tt.opts.ProxyDNS && len(r.To) == 1 && reflect.DeepEqual(r.To[0], kubeDNS) {
					dnsRules++
					var got []string
					for _, p := range r.Ports {
						got = append(got, fmt.Sprintf("%s/%s", *p.Protocol, p.Port))
					}
					if strings.Join(got, " ") != "UDP/53 TCP/53" {
						t.Errorf("the kube-dns rule allows %v, want UDP/53 TCP/53", got)
					}
					continue
				}
				for _, p := range r.Ports {
					if p.Port == nil || p.Port.IntValue() == 53 || p.EndPort != nil {
						t.Errorf("egress port %+v: DNS, every port or a range", p)
					}
				}
				for _, peer := range r.To {
					if peer.NamespaceSelector != nil || peer.IPBlock != nil {
						t.Errorf("egress peer %+v leaves the namespace", peer)
					}
				}
			}
			if want := map[bool]int{true: 1}[tt.opts.ProxyDNS]; dnsRules != want {
				t.Errorf("ProxyDNS %v: %d kube-dns rules, want %d", tt.opts.ProxyDNS, dnsRules, want)
			}
		})
	}
}

func ptrTo[T any](v T) *T { return &v }

// optional prints an optional field's value, or "unset".
func optional[T any](v *T) string {
	if v == nil {
		return "unset"
	}
	return fmt.Sprint(*v)
}
