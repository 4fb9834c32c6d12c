package controller

import (
	"encoding/json"
	"fmt"
	"reflect"

	corev1 "k8s.io/api/core/v1"
)

// A Pod is trusted for what it runs only when its spec is the one the
// controller builds for it now: samePod compares what decides what a Pod
// runs and with which rights. Labels, annotations and owner references
// are not in it: anyone who may update Pods in the namespace may change
// them (packaging/controller/admission.yaml refuses that, where it is
// installed), and a Pod anyone made may carry them.

// podShape is the part of a PodSpec that decides what runs in it and
// with which rights, in a form the API server's defaulting does not
// change.
type podShape struct {
	HostNetwork, HostPID, HostIPC bool
	ShareProcessNamespace         bool
	AutomountToken                string
	RuntimeClass                  string
	SecurityContext               string
	DNS                           string
	HostAliases                   string
	NodeSelector                  string
	RestartPolicy                 corev1.RestartPolicy
	Volumes                       []string
	Init, Containers              []containerShape
	Ephemeral                     int
}

// containerShape is the part of a container that decides what runs in
// it, with which rights and resources.
type containerShape struct {
	Name, Image, PullPolicy string
	Command, Args           []string
	WorkingDir              string
	Env, EnvFrom            string
	Mounts, Devices         string
	SecurityContext         string
	Limits, Requests        map[corev1.ResourceName]string
	Hooks                   string // probes, lifecycle and a container restart policy: all run or restart something
	Termination             string
}

// shape returns spec's podShape. Only the init container's
// imagePullPolicy counts (the controller sets it); the sandbox
// container's is the API server's default from the image's tag.
func shape(spec *corev1.PodSpec) podShape {
	sh := podShape{
		HostNetwork: spec.HostNetwork, HostPID: spec.HostPID, HostIPC: spec.HostIPC,
		ShareProcessNamespace: spec.ShareProcessNamespace != nil && *spec.ShareProcessNamespace,
		AutomountToken:        jsonOf(spec.AutomountServiceAccountToken),
		RuntimeClass:          jsonOf(spec.RuntimeClassName),
		HostAliases:           jsonOf(spec.HostAliases),
		NodeSelector:          jsonOf(spec.NodeSelector),
		RestartPolicy:         spec.RestartPolicy,
		Ephemeral:             len(spec.EphemeralContainers),
	}
	if sc := spec.SecurityContext; sc != nil {
		c := sc.DeepCopy()
		c.SupplementalGroupsPolicy = nil // defaulted (Merge) by the API server
		sh.SecurityContext = jsonOf(c)
	}
	dns := spec.DNSPolicy
	if dns == "" {
		dns = corev1.DNSClusterFirst // the API server's default
	}
	sh.DNS = jsonOf([]any{dns, spec.DNSConfig})
	for _, v := range spec.Volumes {
		sh.Volumes = append(sh.Volumes, volumeShape(v))
	}
	for _, c := range spec.InitContainers {
		sh.Init = append(sh.Init, containerShapeOf(c, true))
	}
	for _, c := range spec.Containers {
		sh.Containers = append(sh.Containers, containerShapeOf(c, false))
	}
	return sh
}

// volumeShape names a volume and its source; the emptyDir and
// downward-API fields the API server defaults are left out.
func volumeShape(v corev1.Volume) string {
	switch src := v.VolumeSource; {
	case src.EmptyDir != nil:
		size := ""
		if src.EmptyDir.SizeLimit != nil {
			size = src.EmptyDir.SizeLimit.String()
		}
		return jsonOf([]any{v.Name, "emptyDir", src.EmptyDir.Medium, size})
	case src.DownwardAPI != nil:
		var items []string
		for _, it := range src.DownwardAPI.Items {
			field := ""
			if it.FieldRef != nil {
				field = it.FieldRef.FieldPath
			}
			items = append(items, it.Path+"="+field+jsonOf(it.ResourceFieldRef))
		}
		return jsonOf([]any{v.Name, "downwardAPI", items})
	}
	return jsonOf(v) // a kind the controller never makes: it differs
}

func containerShapeOf(c corev1.Container, init bool) containerShape {
	cs := containerShape{Name: c.Name, Image: c.Image, Command: c.Command, Args: c.Args, WorkingDir: c.WorkingDir,
		Env: jsonOf(c.Env), EnvFrom: jsonOf(c.EnvFrom), Devices: jsonOf(c.VolumeDevices),
		Hooks:       jsonOf([]any{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe, c.Lifecycle, c.RestartPolicy}),
		Termination: string(c.TerminationMessagePolicy) + " " + c.TerminationMessagePath,
		Limits:      quantities(c.Resources.Limits), Requests: quantities(c.Resources.Requests)}
	if init {
		cs.PullPolicy = string(c.ImagePullPolicy)
	}
	var mounts []string
	for _, m := range c.VolumeMounts {
		mounts = append(mounts, jsonOf([]any{m.Name, m.MountPath, m.ReadOnly, m.SubPath, m.SubPathExpr, m.MountPropagation}))
	}
	cs.Mounts = jsonOf(mounts)
	if sc := c.SecurityContext; sc != nil {
		s := sc.DeepCopy()
		if s.ProcMount != nil && *s.ProcMount == corev1.DefaultProcMount {
			s.ProcMount = nil // the API server's default
		}
		cs.SecurityContext = jsonOf(s)
	}
	return cs
}

func quantities(l corev1.ResourceList) map[corev1.ResourceName]string {
	out := map[corev1.ResourceName]string{}
	for k, v := range l {
		out[k] = v.String()
	}
	return out
}

func jsonOf(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%#v", v) // never for these types; still compares
	}
	return string(b)
}

// samePod returns "" when got's spec is want's in every part of its
// podShape, else the first part that differs, for a message.
func samePod(got, want *corev1.Pod) string {
	g, w := shape(&got.Spec), shape(&want.Spec)
	gv, wv := reflect.ValueOf(g), reflect.ValueOf(w)
	for i := range gv.NumField() {
		name := gv.Type().Field(i).Name
		switch name {
		case "Init", "Containers":
			a, b := gv.Field(i).Interface().([]containerShape), wv.Field(i).Interface().([]containerShape)
			if len(a) != len(b) {
				return fmt.Sprintf("%s: %d containers, want %d", name, len(a), len(b))
			}
			for j := range a {
				if d := diffFields(a[j], b[j]); d != "" {
					return fmt.Sprintf("%s %s: %s", name, b[j].Name, d)
				}
			}
		default:
			if !reflect.DeepEqual(gv.Field(i).Interface(), wv.Field(i).Interface()) {
				return name
			}
		}
	}
	return ""
}

// diffFields names the first field of a and b that differs.
func diffFields(a, b containerShape) string {
	av, bv := reflect.ValueOf(a), reflect.ValueOf(b)
	for i := range av.NumField() {
		if !reflect.DeepEqual(av.Field(i).Interface(), bv.Field(i).Interface()) {
			return av.Type().Field(i).Name
		}
	}
	return ""
}

// restarted reports whether a container of pod started more than once:
// the kubelet restarts a container whose image was changed, whatever
// the Pod's restart policy.
func restarted(pod *corev1.Pod) bool {
	for _, st := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for _, cs := range st {
			if cs.RestartCount > 0 {
				return true
			}
		}
	}
	return false
}
