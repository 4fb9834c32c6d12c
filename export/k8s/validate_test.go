package k8s_test

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/airlock-sandbox/airlock/policy"
)

// selects reports whether sel matches the label set l.
func selects(sel *metav1.LabelSelector, l map[string]string) bool {
	s, err := metav1.LabelSelectorAsSelector(sel)
	return err == nil && !s.Empty() && s.Matches(labels.Set(l))
}

// validate checks what the API server would not: that the objects fit
// together (selectors, ports, names) and that the Pod is locked down. dns
// says the export was asked to open DNS to kube-dns (Options.ProxyDNS).
func validate(d decoded, net, dns bool) []string {
	var bad []string
	errf := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	pod := d.pods[0]
	for _, name := range names(d) {
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			errf("name %q: %v", name, errs)
		}
	}

	// The Pod.
	ps := pod.Spec
	if ps.RestartPolicy != corev1.RestartPolicyNever || ps.ActiveDeadlineSeconds == nil || *ps.ActiveDeadlineSeconds <= 0 {
		errf("pod: restartPolicy %q, activeDeadlineSeconds %v; want Never and a deadline", ps.RestartPolicy, ps.ActiveDeadlineSeconds)
	}
	if ps.AutomountServiceAccountToken == nil || *ps.AutomountServiceAccountToken || ps.EnableServiceLinks == nil || *ps.EnableServiceLinks {
		errf("pod: service account token or service links are not switched off")
	}
	if ps.HostNetwork || ps.HostPID || ps.HostIPC {
		errf("pod shares a host namespace")
	}
	if len(ps.Containers) != 1 || len(ps.InitContainers) != 0 {
		errf("pod has %d containers, want exactly the sandbox", len(ps.Containers))
		return bad
	}
	c := ps.Containers[0]
	sc := c.SecurityContext
	switch {
	case c.Image == "" || len(c.Command) == 0:
		errf("container: image %q command %v", c.Image, c.Command)
	case sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0:
		errf("container may run as root: %+v", sc)
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Privileged == nil || *sc.Privileged:
		errf("container: root writable, privilege escalation or privileged: %+v", sc)
	case sc.Capabilities == nil || len(sc.Capabilities.Add) > 0 || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL":
		errf("container capabilities %+v, want drop ALL", sc.Capabilities)
	case sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeLocalhost || sc.SeccompProfile.LocalhostProfile == nil:
		errf("container seccomp %+v, want airlock's Localhost profile", sc.SeccompProfile)
	}
	for _, r := range []corev1.ResourceName{corev1.ResourceMemory, corev1.ResourceCPU, corev1.ResourceEphemeralStorage} {
		l, ok := c.Resources.Limits[r]
		if q := c.Resources.Requests[r]; !ok || l.Cmp(q) != 0 || l.IsZero() {
			errf("resource %s: limit %v request %v, want equal and set", r, l.String(), q.String())
		}
	}
	vols := map[string]corev1.Volume{}
	for _, v := range ps.Volumes {
		vols[v.Name] = v
		if v.HostPath != nil {
			errf("volume %s is a hostPath", v.Name)
		}
	}
	tmp := false
	for _, m := range c.VolumeMounts {
		v, ok := vols[m.Name]
		if !ok {
			errf("mount %s names no volume %q", m.MountPath, m.Name)
			continue
		}
		if strings.HasPrefix(m.Name, "read-") && (!m.ReadOnly || v.PersistentVolumeClaim == nil || !v.PersistentVolumeClaim.ReadOnly) {
			errf("fs_read volume %s is writable", m.Name)
		}
		if m.MountPath == "/tmp" {
			tmp = v.EmptyDir != nil && v.EmptyDir.Medium == corev1.StorageMediumMemory && v.EmptyDir.SizeLimit != nil
		}
	}
	if !tmp {
		errf("no size-limited memory emptyDir at /tmp")
	}

	// The sandbox's NetworkPolicy.
	var fence, proxyFence int
	for _, np := range d.policies {
		if selects(&np.Spec.PodSelector, pod.Labels) {
			fence++
			if len(np.Spec.PolicyTypes) != 2 || len(np.Spec.Ingress) != 0 {
				errf("networkpolicy %s: policyTypes %v ingress %v, want both types and no ingress", np.Name, np.Spec.PolicyTypes, np.Spec.Ingress)
			}
			if !net && len(np.Spec.Egress) != 0 {
				errf("networkpolicy %s allows egress without net_hosts", np.Name)
			}
			for _, rule := range np.Spec.Egress {
				for _, peer := range rule.To {
					if peer.IPBlock != nil || peer.PodSelector == nil {
						errf("networkpolicy %s: egress peer %+v is not a pod selector", np.Name, peer)
					}
					kubeDNS := peer.NamespaceSelector != nil && peer.PodSelector.MatchLabels["k8s-app"] == "kube-dns"
					if kubeDNS && !dns {
						errf("networkpolicy %s: egress to kube-dns without ProxyDNS", np.Name)
					}
					if !kubeDNS && (peer.NamespaceSelector != nil || len(d.deps) != 1 || !selects(peer.PodSelector, d.deps[0].Spec.Template.Labels)) {
						errf("networkpolicy %s: egress peer %+v is not the proxy", np.Name, peer)
					}
					if len(rule.Ports) == 0 {
						errf("networkpolicy %s: an egress rule to %+v allows every port", np.Name, peer)
					}
					for _, p := range rule.Ports {
						if !kubeDNS && !hasServicePort(d, p.Port.IntValue()) {
							errf("networkpolicy %s: egress port %v is not a proxy Service port", np.Name, p.Port)
						}
					}
				}
			}
		}
		if len(d.deps) == 1 && selects(&np.Spec.PodSelector, d.deps[0].Spec.Template.Labels) {
			proxyFence++
			if len(np.Spec.Ingress) != 1 || len(np.Spec.Ingress[0].From) != 1 || !selects(np.Spec.Ingress[0].From[0].PodSelector, pod.Labels) {
				errf("proxy networkpolicy %s admits more than the sandbox: %+v", np.Name, np.Spec.Ingress)
			}
		}
	}
	if fence != 1 {
		errf("%d NetworkPolicies select the Pod, want 1", fence)
	}

	// The proxy: present exactly when net_hosts is.
	if !net {
		if len(d.deps)+len(d.svcs)+len(d.cms) != 0 {
			errf("proxy objects without net_hosts")
		}
		for _, e := range c.Env {
			if strings.Contains(strings.ToLower(e.Name), "proxy") {
				errf("env %s set without net_hosts", e.Name)
			}
		}
		return bad
	}
	if len(d.deps) != 1 || len(d.svcs) != 1 || len(d.cms) != 1 || proxyFence != 1 {
		errf("proxy objects: %d deployments, %d services, %d configmaps, %d policies; want 1 each", len(d.deps), len(d.svcs), len(d.cms), proxyFence)
		return bad
	}
	dep, svc, cm := d.deps[0], d.svcs[0], d.cms[0]
	if !selects(dep.Spec.Selector, dep.Spec.Template.Labels) || !selects(&metav1.LabelSelector{MatchLabels: svc.Spec.Selector}, dep.Spec.Template.Labels) {
		errf("deployment or service selector does not match the proxy pods")
	}
	if selects(&metav1.LabelSelector{MatchLabels: svc.Spec.Selector}, pod.Labels) {
		errf("the proxy service selects the sandbox pod")
	}
	pc := dep.Spec.Template.Spec.Containers[0]
	named := map[string]int32{}
	for _, p := range pc.Ports {
		named[p.Name] = p.ContainerPort
	}
	for _, sp := range svc.Spec.Ports {
		if named[sp.TargetPort.StrVal] != sp.Port {
			errf("service port %d targets %q, which the proxy container does not expose on that port", sp.Port, sp.TargetPort.StrVal)
		}
	}
	cfg := pc.Command[len(pc.Command)-1]
	v := dep.Spec.Template.Spec.Volumes[0]
	if v.ConfigMap == nil || v.ConfigMap.Name != cm.Name || pc.VolumeMounts[0].MountPath+"/" != cfg[:strings.LastIndex(cfg, "/")+1] {
		errf("proxy --config %s is not the mounted ConfigMap %s", cfg, cm.Name)
	}
	pj, ok := cm.Data[cfg[strings.LastIndex(cfg, "/")+1:]]
	if p, err := policy.Parse([]byte(pj), policy.ParseOptions{File: "policy.json"}); !ok || err != nil || len(p.NetHosts()) == 0 {
		errf("configmap %s: the policy does not parse or has no net_hosts: %v", cm.Name, err)
	}
	for _, e := range c.Env {
		if e.Name != "HTTP_PROXY" && e.Name != "HTTPS_PROXY" && e.Name != "ALL_PROXY" {
			continue
		}
		u, err := url.Parse(e.Value)
		if err != nil {
			errf("env %s=%q: %v", e.Name, e.Value, err)
			continue
		}
		port, _ := strconv.Atoi(u.Port())
		host := u.Hostname()
		byName := dns && (host == svc.Name || host == svc.Name+"."+svc.Namespace+".svc")
		if !hasServicePort(d, port) || (host != svc.Spec.ClusterIP && !byName) || host == "" {
			errf("env %s=%s does not name the proxy Service %s", e.Name, e.Value, svc.Name)
		}
	}
	return bad
}

func hasServicePort(d decoded, port int) bool {
	for _, s := range d.svcs {
		for _, p := range s.Spec.Ports {
			if int(p.Port) == port {
				return true
			}
		}
	}
	return false
}

func names(d decoded) []string {
	var n []string
	for _, p := range d.pods {
		n = append(n, p.Name)
		for _, v := range p.Spec.Volumes {
			n = append(n, v.Name)
			if v.PersistentVolumeClaim != nil {
				n = append(n, v.PersistentVolumeClaim.ClaimName)
			}
		}
	}
	for _, p := range d.policies {
		n = append(n, p.Name)
	}
	for _, p := range d.deps {
		n = append(n, p.Name)
	}
	for _, p := range d.svcs {
		n = append(n, p.Name)
	}
	for _, p := range d.cms {
		n = append(n, p.Name)
	}
	for _, p := range d.pvcs {
		n = append(n, p.Name)
	}
	return n
}

// TestValidateCatches breaks one thing at a time in a good export, so a
// check that can no longer fail is noticed.
func TestValidateCatches(t *testing.T) {
	breaks := []struct {
		name   string
		mutate func(d decoded)
	}{
		{"service-selector", func(d decoded) { d.svcs[0].Spec.Selector = map[string]string{"app": "other"} }},
		{"read-volume-writable", func(d decoded) { d.pods[0].Spec.Containers[0].VolumeMounts[1].ReadOnly = false }},
		{"capabilities-kept", func(d decoded) { d.pods[0].Spec.Containers[0].SecurityContext.Capabilities.Drop = nil }},
		{"egress-to-anyone", func(d decoded) {
			d.policies[0].Spec.Egress[0].To[0].PodSelector.MatchLabels = map[string]string{"x": "y"}
		}},
		{"proxy-port-mismatch", func(d decoded) { d.deps[0].Spec.Template.Spec.Containers[0].Ports[0].ContainerPort = 8080 }},
		{"env-elsewhere", func(d decoded) { d.pods[0].Spec.Containers[0].Env[6].Value = "http://evil.example:3128" }},
		{"env-by-name-without-dns", func(d decoded) { d.pods[0].Spec.Containers[0].Env[6].Value = "http://job-1-egress.agents.svc:3128" }},
		{"dns-without-flag", func(d decoded) {
			d.policies[0].Spec.Egress = append(d.policies[0].Spec.Egress, networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{{
				NamespaceSelector: &metav1.LabelSelector{}, PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-dns"}}}}})
		}},
		{"egress-every-port", func(d decoded) { d.policies[0].Spec.Egress[0].Ports = nil }},
	}
	for _, tt := range breaks {
		t.Run(tt.name, func(t *testing.T) {
			m := exportFor(t, fullSpec, cases[0].opts)
			y, err := m.YAML()
			if err != nil {
				t.Fatal(err)
			}
			d := decodeStrict(t, y)
			if msgs := validate(d, true, false); len(msgs) != 0 {
				t.Fatalf("the unbroken export fails validation: %v", msgs)
			}
			tt.mutate(d)
			if msgs := validate(d, true, false); len(msgs) == 0 {
				t.Errorf("validate accepts the export with %s broken", tt.name)
			}
		})
	}
}
