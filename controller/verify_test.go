package controller

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// verifyPolicy is a policy a Pod can enforce.
const verifyPolicy = `version: 1
allowed_tools: [cat]
allow_downgrade: [max_memory, max_cpu, max_pids]
budget:
  max_wall: 20s
`

// TestSamePod: a Pod compares equal to the one it was built as, and
// every change that would alter what runs in it, or with which rights,
// is named; the fields the API server defaults are not.
func TestSamePod(t *testing.T) {
	pol, err := checkPolicy(verifyPolicy)
	if err != nil {
		t.Fatal(err)
	}
	build := func() *corev1.Pod {
		return buildPod(podParams{namespace: "ns", genName: "p-", image: "img", text: verifyPolicy, pol: pol, deadline: time.Minute,
			o: Options{AirlockImage: "operator@sha256:1"}})
	}
	want := build()
	if d := samePod(build(), want); d != "" {
		t.Fatalf("a pod differs from itself in %s", d)
	}
	// What the API server sets on a stored Pod changes nothing.
	defaulted := build()
	defaulted.Spec.DNSPolicy = corev1.DNSClusterFirst
	defaulted.Spec.Containers[0].ImagePullPolicy = corev1.PullIfNotPresent
	for i := range defaulted.Spec.Volumes {
		if d := defaulted.Spec.Volumes[i].DownwardAPI; d != nil {
			mode := int32(0o644)
			d.DefaultMode = &mode
			d.Items[0].FieldRef.APIVersion = "v1"
		}
	}
	defaulted.Spec.ActiveDeadlineSeconds = nil
	if d := samePod(defaulted, want); d != "" {
		t.Errorf("the API server's defaults differ in %s", d)
	}
	for _, tt := range []struct {
		name string
		edit func(p *corev1.Pod)
		want string
	}{
		{"sandbox image", func(p *corev1.Pod) { p.Spec.Containers[0].Image = "evil" }, "Containers sandbox: Image"},
		{"enforcer image", func(p *corev1.Pod) { p.Spec.InitContainers[0].Image = "evil" }, "Init airlock-install: Image"},
		{"policy", func(p *corev1.Pod) { p.Spec.InitContainers[0].Env[0].Value = "version: 1\nfs_read: [/]\n" }, "Init airlock-install: Env"},
		{"command", func(p *corev1.Pod) { p.Spec.Containers[0].Command[0] = "/usr/local/bin/airlock" }, "Containers sandbox: Command"},
		{"env", func(p *corev1.Pod) { p.Spec.Containers[0].Env = nil }, "Containers sandbox: Env"},
		{"env from", func(p *corev1.Pod) {
			p.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "x"}}}}
		}, "Containers sandbox: EnvFrom"},
		{"writable enforcer", func(p *corev1.Pod) { p.Spec.Containers[0].VolumeMounts[1].ReadOnly = false }, "Containers sandbox: Mounts"},
		{"host pid", func(p *corev1.Pod) { p.Spec.HostPID = true }, "HostPID"},
		{"host network", func(p *corev1.Pod) { p.Spec.HostNetwork = true }, "HostNetwork"},
		{"privileged", func(p *corev1.Pod) { yes := true; p.Spec.Containers[0].SecurityContext.Privileged = &yes }, "Containers sandbox: SecurityContext"},
		{"pod security", func(p *corev1.Pod) { p.Spec.SecurityContext.RunAsNonRoot = nil }, "SecurityContext"},
		{"memory", func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Limits[corev1.ResourceMemory] = resource.MustParse("64Gi")
		}, "Containers sandbox: Limits"},
		{"probe", func(p *corev1.Pod) {
			p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"sh"}}}}
		}, "Containers sandbox: Hooks"},
		{"volume", func(p *corev1.Pod) {
			p.Spec.Volumes[1].VolumeSource = corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}
		}, "Volumes"},
		{"ephemeral", func(p *corev1.Pod) {
			p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "evil"}}}
		}, "Ephemeral"},
		{"extra container", func(p *corev1.Pod) { p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "side"}) }, "Containers: 2 containers, want 1"},
		{"host aliases", func(p *corev1.Pod) {
			p.Spec.HostAliases = []corev1.HostAlias{{IP: "203.0.113.1", Hostnames: []string{"pypi.org"}}}
		}, "HostAliases"},
		{"dns", func(p *corev1.Pod) { p.Spec.DNSPolicy = corev1.DNSNone }, "DNS"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := build()
			tt.edit(got)
			if d := samePod(got, want); !strings.HasPrefix(d, tt.want) {
				t.Errorf("samePod = %q, want it to name %q", d, tt.want)
			}
		})
	}
}

// TestPinnedEnv: the sandbox container sets every variable airlock's
// process reads over its image's ENV, and the init container carries the
// policy it installs.
func TestPinnedEnv(t *testing.T) {
	pol, err := checkPolicy(verifyPolicy)
	if err != nil {
		t.Fatal(err)
	}
	pod := buildPod(podParams{namespace: "ns", genName: "p-", image: "img", text: verifyPolicy, pol: pol, deadline: time.Minute, o: Options{AirlockImage: "op"}})
	env := map[string]string{}
	for _, e := range pod.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	for _, name := range []string{"GODEBUG", "GOGC", "GOMEMLIMIT", "GOMAXPROCS", "GOTRACEBACK", "TMPDIR", "HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "TZ", "ZONEINFO", "PWD", "LOCALDOMAIN", "RES_OPTIONS", "HOSTALIASES"} {
		v, ok := env[name]
		if !ok {
			t.Errorf("%s is not pinned", name)
		}
		if want := map[string]string{"TMPDIR": "/tmp", "HOME": "/tmp"}[name]; v != want {
			t.Errorf("%s = %q, want %q", name, v, want)
		}
	}
	if ic := pod.Spec.InitContainers[0]; len(ic.Env) != 1 || ic.Env[0].Name != EnvPolicy || ic.Env[0].Value != verifyPolicy {
		t.Errorf("init container env %+v, want only the policy", ic.Env)
	}
}
