package k8s

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/airlock-sandbox/airlock/plan"
)

// Proxy ports, as inside `airlock run`'s network namespace.
var proxyPorts = []struct {
	name string
	port int32
}{{"http-proxy", plan.HTTPProxyPort}, {"socks-proxy", plan.SOCKSProxyPort}}

// PolicyKey is the ConfigMap key (and the file under /etc/airlock) that
// holds the canonical policy JSON the proxy admits by.
const PolicyKey = "policy.json"

// proxyCommand is the proxy container's command: the proxy image must
// have airlock on its PATH (packaging/egress-proxy/Containerfile puts it
// in /usr/local/bin), and the policy is the ConfigMap mounted at
// /etc/airlock.
func proxyCommand() []string {
	return []string{"airlock", "egress-proxy", "--config", "/etc/airlock/" + PolicyKey}
}

func proxyName(o Options) string { return o.Name + "-egress" }

func proxyObjects(o Options, policyJSON string) (*corev1.ConfigMap, *appsv1.Deployment, *corev1.Service, *networkingv1.NetworkPolicy) {
	name, lbl := proxyName(o), labels(o, "egress-proxy")
	cm := &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: meta(o, name, lbl),
		Data:       map[string]string{PolicyKey: policyJSON},
	}
	uid, no, yes := int64(SandboxUID), false, true
	var cports []corev1.ContainerPort
	var sports []corev1.ServicePort
	for _, p := range proxyPorts {
		cports = append(cports, corev1.ContainerPort{Name: p.name, ContainerPort: p.port, Protocol: corev1.ProtocolTCP})
		sports = append(sports, corev1.ServicePort{Name: p.name, Port: p.port, TargetPort: intstr.FromString(p.name), Protocol: corev1.ProtocolTCP})
	}
	res := corev1.ResourceList{
		corev1.ResourceMemory: resource.MustParse("256Mi"),
		corev1.ResourceCPU:    resource.MustParse("500m"),
	}
	dep := &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: meta(o, name, lbl),
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: lbl},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: lbl},
				Spec: corev1.PodSpec{
					ServiceAccountName:           o.ServiceAccount,
					AutomountServiceAccountToken: &no,
					EnableServiceLinks:           &no,
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot: &yes, RunAsUser: &uid, RunAsGroup: &uid,
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					Containers: []corev1.Container{{
						Name:  "proxy",
						Image: o.ProxyImage,
						// A tag loaded into the nodes (kind load, ctr import)
						// runs without a registry; :latest would default to Always.
						ImagePullPolicy: corev1.PullIfNotPresent,
						Command:         proxyCommand(),
						Ports:           cports,
						SecurityContext: &corev1.SecurityContext{
							Privileged: &no, AllowPrivilegeEscalation: &no, ReadOnlyRootFilesystem: &yes,
							Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
						},
						Resources:    corev1.ResourceRequirements{Limits: res, Requests: res.DeepCopy()},
						VolumeMounts: []corev1.VolumeMount{{Name: "policy", MountPath: "/etc/airlock", ReadOnly: true}},
					}},
					Volumes: []corev1.Volume{{Name: "policy", VolumeSource: corev1.VolumeSource{
						ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}},
					}}},
				},
			},
		},
	}
	svc := &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: meta(o, name, lbl),
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: o.ProxyClusterIP, Selector: lbl, Ports: sports},
	}
	// Only this export's sandbox may use the proxy; its egress stays open
	// (the proxy itself decides by net_hosts and refuses private addresses).
	np := &networkingv1.NetworkPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: meta(o, name, lbl),
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: lbl},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: labels(o, "sandbox")}}},
				Ports: policyPorts(),
			}},
		},
	}
	return cm, dep, svc, np
}

func policyPorts() []networkingv1.NetworkPolicyPort {
	var out []networkingv1.NetworkPolicyPort
	for _, p := range proxyPorts {
		out = append(out, networkingv1.NetworkPolicyPort{Protocol: ptr(corev1.ProtocolTCP), Port: ptr(intstr.FromInt32(p.port))})
	}
	return out
}

// sandboxPolicy fences the sandbox Pod: no ingress; egress only to the
// proxy's pods on its ports, or none. DNS stays closed (the proxy
// resolves the names it admits) unless Options.ProxyDNS opens it to
// kube-dns so the proxy's Service name resolves.
func sandboxPolicy(o Options, proxy bool) *networkingv1.NetworkPolicy {
	lbl := labels(o, "sandbox")
	np := &networkingv1.NetworkPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: meta(o, o.Name+"-sandbox", lbl),
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: lbl},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		},
	}
	if !proxy {
		return np
	}
	np.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{{
		To:    []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: labels(o, "egress-proxy")}}},
		Ports: policyPorts(),
	}}
	if o.ProxyDNS {
		np.Spec.Egress = append(np.Spec.Egress, networkingv1.NetworkPolicyEgressRule{
			To: []networkingv1.NetworkPolicyPeer{{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "kube-system"}},
				PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-dns"}},
			}},
			Ports: []networkingv1.NetworkPolicyPort{
				{Protocol: ptr(corev1.ProtocolUDP), Port: ptr(intstr.FromInt32(53))},
				{Protocol: ptr(corev1.ProtocolTCP), Port: ptr(intstr.FromInt32(53))},
			},
		})
	}
	return np
}
