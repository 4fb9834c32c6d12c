package k8s

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/airlock-sandbox/airlock/plan"
)

// minMilliCPU is the smallest cpu limit written: CFS cannot enforce a
// quota below 1ms per 100ms period.
const minMilliCPU = 10

// pod is the sandbox's Pod, with the grant volumes and mounts of
// grantVolumes.
func pod(o Options, pl *plan.Plan, seccompPath string, gv []corev1.Volume, gm []corev1.VolumeMount) (*corev1.Pod, error) {
	lim := pl.Limits
	deadline := int64((lim.Wall + 999_999_999) / 1_000_000_000)
	milli := max(int64(lim.CPU/1_000_000)*1000/max(int64(lim.Wall/1_000_000), 1), minMilliCPU)
	res := corev1.ResourceList{
		corev1.ResourceMemory:           *resource.NewQuantity(lim.Memory, resource.BinarySI),
		corev1.ResourceCPU:              *resource.NewMilliQuantity(milli, resource.DecimalSI),
		corev1.ResourceEphemeralStorage: *resource.NewQuantity(lim.Scratch, resource.BinarySI),
	}
	scratch := resource.NewQuantity(lim.Scratch, resource.BinarySI)

	vols := []corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: scratch}}}}
	mounts := []corev1.VolumeMount{{Name: "tmp", MountPath: "/tmp"}}
	vols, mounts = append(vols, gv...), append(mounts, gm...)

	var env []corev1.EnvVar
	for _, e := range pl.Env {
		k, v, _ := strings.Cut(e, "=")
		env = append(env, corev1.EnvVar{Name: k, Value: proxyValue(o, v)})
	}
	if len(pl.Argv) == 0 {
		return nil, fmt.Errorf("k8s: export: the plan has no command")
	}
	if len(pl.Capabilities) != 0 || !pl.NoNewPrivileges {
		return nil, fmt.Errorf("k8s: export: the plan keeps capabilities %v or lacks no_new_privileges: compile it with plan.Compile", pl.Capabilities)
	}
	// Harden writes no_new_privs as allowPrivilegeEscalation: false,
	// which the check above makes the plan's own.
	spec := corev1.PodSpec{
		ActiveDeadlineSeconds: &deadline,
		RuntimeClassName:      runtimeClass(o),
		ServiceAccountName:    o.ServiceAccount,
		Containers: []corev1.Container{{
			Name:         "sandbox",
			Image:        o.Image,
			Command:      pl.Argv,
			WorkingDir:   pl.Cwd,
			Env:          env,
			Resources:    corev1.ResourceRequirements{Limits: res, Requests: res.DeepCopy()},
			VolumeMounts: mounts,
		}},
		Volumes: vols,
	}
	Harden(&spec, &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: &seccompPath})
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: meta(o, o.Name, labels(o, "sandbox")),
		Spec:       spec,
	}, nil
}

func runtimeClass(o Options) *string {
	if o.NoRuntimeClass {
		return nil
	}
	return &o.RuntimeClass
}

// proxyHost is how the Pod reaches the proxy Service: its pinned
// clusterIP (no DNS needed), else its name (ProxyDNS).
func proxyHost(o Options) string {
	switch {
	case o.ProxyClusterIP != "":
		return o.ProxyClusterIP
	case o.Namespace != "":
		return proxyName(o) + "." + o.Namespace + ".svc"
	}
	return proxyName(o)
}

// proxyValue rewrites the plan's in-namespace proxy addresses to the
// proxy Service.
func proxyValue(o Options, v string) string {
	for _, port := range []int{plan.HTTPProxyPort, plan.SOCKSProxyPort} {
		v = strings.ReplaceAll(v, "127.0.0.1:"+strconv.Itoa(port), net.JoinHostPort(proxyHost(o), strconv.Itoa(port)))
	}
	return v
}

func ptr[T any](v T) *T { return &v }
