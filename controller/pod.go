package controller

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/export/k8s"
	"github.com/airlock-sandbox/airlock/policy"
)

// Labels and annotations the controller sets.
const (
	LabelManagedBy  = "app.kubernetes.io/managed-by"
	ManagedBy       = "airlock-controller"
	LabelSandboxUID = "airlock.dev/sandbox-uid" // the Sandbox a Pod runs (uids fit a label; names may not)
	LabelTemplate   = "airlock.dev/template"    // the template a warm Pod was made for
	LabelHash       = "airlock.dev/template-hash"
	LabelPool       = "airlock.dev/pool" // "warm" while a warm Pod is unclaimed
	PoolWarm        = "warm"
	AnnotationArgv  = "airlock.dev/argv"    // the command, a JSON array, set when a warm Pod is claimed
	AnnotationWarm  = "airlock.dev/claimed" // RFC 3339 time a warm Pod was claimed
)

// Paths inside the Pod.
const (
	policyDir  = "/etc/airlock/policy"
	policyFile = "policy.yaml"
	assignDir  = "/etc/airlock/assignment"
	argvFile   = "argv"
	// terminationLog is the kubelet's default terminationMessagePath.
	terminationLog = "/dev/termination-log"
	container      = "sandbox"
)

// memoryOverhead is added to max_memory for airlock's own supervisor and
// proxy in the container (the Pod's limit covers both; the command's own
// limit is not enforced by a cgroup in a Pod, see checkPolicy).
const memoryOverhead = 64 << 20

// startGrace is added to max_wall in activeDeadlineSeconds: the time the
// Pod may take to start (the image pull included) before airlock's own
// deadline begins.
const startGrace = 60 * time.Second

// minMilliCPU is the smallest cpu limit written (as export/k8s).
const minMilliCPU = 10

// ErrInvalidPolicy wraps what checkPolicy refuses.
var ErrInvalidPolicy = errors.New("invalid policy")

// checkPolicy parses text as the policy of a Pod and returns it, or an
// error saying everything that is wrong with it: what policy.Parse
// refuses, and what the Pod's backend (airlock without namespaces, in a
// container with no cgroup of its own to manage) cannot enforce.
func checkPolicy(text string) (*policy.Policy, error) {
	p, err := policy.Parse([]byte(text), policy.ParseOptions{File: "spec.policy"})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidPolicy, err)
	}
	var why []string
	if p.Rootfs() != "" {
		why = append(why, "rootfs: the Pod's image is the environment; remove rootfs and name the image")
	}
	if len(p.FSWrite()) > 0 {
		why = append(why, "fs_write: a controller Pod has no writable volume but its scratch /tmp (its root is read-only); remove fs_write (volumes are not supported yet)")
	}
	for _, d := range p.FSDeny() {
		why = append(why, "fs_deny "+d+": Landlock only adds rights, so a path inside a grant cannot be hidden in a Pod; grant the folders beside it instead")
	}
	for _, f := range p.FSProtect() {
		why = append(why, "fs_protect "+f+": nothing is written back in a Pod; remove it")
	}
	if len(p.Credentials()) > 0 {
		why = append(why, "credentials: the backend without namespaces adds none; remove them")
	}
	var missing []string
	for _, d := range []policy.Downgrade{policy.DowngradeMemory, policy.DowngradeCPU, policy.DowngradePids} {
		if !p.AcceptsDowngrade(d) {
			missing = append(missing, string(d))
		}
	}
	if len(missing) > 0 {
		why = append(why, "allow_downgrade lacks "+strings.Join(missing, ", ")+": airlock has no cgroup of its own in a Pod; the Pod's limits hold max_memory and max_cpu for the whole Pod (airlock included) and max_pids is the node's pod pids limit; add them to allow_downgrade to accept that")
	}
	if len(why) > 0 {
		return nil, fmt.Errorf("%w: a Pod cannot enforce it: %s", ErrInvalidPolicy, strings.Join(why, "; "))
	}
	return p, nil
}

// podParams is one Pod to build.
type podParams struct {
	namespace string
	name      string // empty with generateName
	genName   string
	image     string
	configMap string // the policy's ConfigMap
	pol       *policy.Policy
	argv      []string // nil: a warm Pod, which waits for its command
	labels    map[string]string
	deadline  time.Duration // activeDeadlineSeconds
	owner     metav1.OwnerReference
	airlock   string
	seccomp   *corev1.SeccompProfile // the Pod's (Options.seccomp)
	hostNet   bool                   // Options.HostNetwork
}

// buildPod returns the Pod that runs argv (or waits for it) under the
// policy in configMap, hardened as export/k8s hardens its Pod.
func buildPod(pp podParams) *corev1.Pod {
	b := pp.pol.Budget()
	milli := max(int64(b.CPU/time.Millisecond)*1000/max(int64(b.Wall/time.Millisecond), 1), minMilliCPU)
	res := corev1.ResourceList{
		corev1.ResourceMemory:           *resource.NewQuantity(b.Memory+memoryOverhead, resource.BinarySI),
		corev1.ResourceCPU:              *resource.NewMilliQuantity(milli, resource.DecimalSI),
		corev1.ResourceEphemeralStorage: *resource.NewQuantity(b.Scratch, resource.BinarySI),
	}
	cmd := []string{pp.airlock, "run", "--isolation", "landlock", "--policy", policyDir + "/" + policyFile, "--summary-file", terminationLog}
	vols := []corev1.Volume{
		{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: resource.NewQuantity(b.Scratch, resource.BinarySI)}}},
		{Name: "policy", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: pp.configMap}}}},
	}
	mounts := []corev1.VolumeMount{{Name: "tmp", MountPath: "/tmp"}, {Name: "policy", MountPath: policyDir, ReadOnly: true}}
	if pp.argv == nil {
		cmd = append(cmd, "--argv-file", assignDir+"/"+argvFile)
		vols = append(vols, corev1.Volume{Name: "assignment", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{
			Items: []corev1.DownwardAPIVolumeFile{{Path: argvFile, FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['" + AnnotationArgv + "']"}}},
		}}})
		mounts = append(mounts, corev1.VolumeMount{Name: "assignment", MountPath: assignDir, ReadOnly: true})
	} else {
		cmd = append(append(cmd, "--"), pp.argv...)
	}
	deadline := int64((pp.deadline + time.Second - 1) / time.Second)
	spec := corev1.PodSpec{
		ActiveDeadlineSeconds: &deadline,
		Containers: []corev1.Container{{
			Name:                     container,
			Image:                    pp.image,
			Command:                  cmd,
			Resources:                corev1.ResourceRequirements{Limits: res, Requests: res.DeepCopy()},
			VolumeMounts:             mounts,
			TerminationMessagePath:   terminationLog,
			TerminationMessagePolicy: corev1.TerminationMessageReadFile,
		}},
		Volumes:     vols,
		HostNetwork: pp.hostNet,
	}
	// airlock stacks its own seccomp allow-list for the command on it.
	sc := pp.seccomp
	if sc == nil {
		sc = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	}
	k8s.Harden(&spec, sc)
	labels := map[string]string{LabelManagedBy: ManagedBy}
	for k, v := range pp.labels {
		labels[k] = v
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: pp.name, GenerateName: pp.genName, Namespace: pp.namespace, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{pp.owner}},
		Spec: spec,
	}
}

// policyConfigMap is the ConfigMap that holds text as policy.yaml,
// immutable: a Pod runs the policy it was made with.
func policyConfigMap(namespace, name, text string, owner metav1.OwnerReference) *corev1.ConfigMap {
	yes := true
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{LabelManagedBy: ManagedBy},
			OwnerReferences: []metav1.OwnerReference{owner}},
		Data:      map[string]string{policyFile: text},
		Immutable: &yes,
	}
}

// ownerRef is a controller reference to obj of kind.
func ownerRef(kind string, obj metav1.Object) metav1.OwnerReference {
	yes := true
	return metav1.OwnerReference{APIVersion: "airlock.dev/v1alpha1", Kind: kind, Name: obj.GetName(), UID: obj.GetUID(), Controller: &yes, BlockOwnerDeletion: &yes}
}

// childName derives a name from parent's and suffix, within max bytes
// (a hash of the full name replaces what does not fit).
func childName(parent, suffix string, max int) string {
	n := parent + "-" + suffix
	if len(n) <= max {
		return n
	}
	h := sha256.Sum256([]byte(n))
	keep := max - len(suffix) - 12
	return strings.TrimRight(parent[:keep], "-.") + "-" + hex.EncodeToString(h[:])[:10] + "-" + suffix
}

// specHash identifies a template's policy and image: warm Pods made for
// another are replaced.
func specHash(pol, image string) string {
	h := sha256.Sum256([]byte(pol + "\x00" + image))
	return hex.EncodeToString(h[:])[:10]
}

// podReady reports whether pod runs and its container is ready.
func podReady(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// decodeSummary reads the report summary from a termination message.
func decodeSummary(msg string) (*api.Summary, error) {
	if strings.TrimSpace(msg) == "" {
		return nil, errors.New("the Pod left no termination message: airlock did not write its report (was the container's command airlock run?)")
	}
	var s api.Summary
	if err := jsonStrict([]byte(msg), &s); err != nil {
		return nil, fmt.Errorf("the termination message is not an airlock report summary: %w", err)
	}
	return &s, nil
}
