package controller

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
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

// The enforcer: what the Pod's init container, from the operator's image
// (Options.AirlockImage), puts in the Pod's enforcer volume, which the
// sandbox container mounts read-only at EnforcerDir and runs airlock
// from. Nothing of it comes from the Sandbox's image.
const (
	// ImageBin is the folder of the operator's image that holds
	// airlock-controller (the installer the init container runs), airlock
	// and airlock-init.
	ImageBin = "/usr/local/bin"
	// EnforcerDir is where the sandbox container finds airlock,
	// airlock-init and policy.yaml.
	EnforcerDir = "/.airlock"
	// EnvPolicy is the init container's variable that holds the policy
	// text it writes to EnforcerDir/policy.yaml: the policy is part of
	// the Pod's spec, which cannot change once the Pod exists, and of no
	// other object that someone could make or change first.
	EnvPolicy = "AIRLOCK_POLICY"
	// InstallContainer names the init container.
	InstallContainer = "airlock-install"
)

// Paths inside the Pod.
const (
	policyFile = "policy.yaml"
	assignDir  = "/etc/airlock/assignment"
	argvFile   = "argv"
	// terminationLog is the kubelet's default terminationMessagePath.
	terminationLog = "/dev/termination-log"
	container      = "sandbox"
	enforcerVolume = "airlock"
)

// enforcerSize bounds the enforcer volume (airlock, airlock-init, the
// policy): an emptyDir on the node's disk, counted in the Pod's
// ephemeral storage.
const enforcerSize = 128 << 20

// pinnedEnv is set in the sandbox container over whatever its image's
// config says, because airlock's own process reads these and the image is
// the Sandbox author's: the Go runtime's settings (GODEBUG changes
// runtime and library behaviour, the others its collector, memory limit,
// threads and crash output), TMPDIR (where the landlock backend makes its
// scratch folder: elsewhere than the Pod's sized /tmp volume, such as
// /dev/shm, it would escape max_scratch), HOME and the XDG folders (the
// image cache), TZ and ZONEINFO (the report's times), PWD (os.Getwd) and
// the resolver's LOCALDOMAIN, RES_OPTIONS and HOSTALIASES. An empty value
// is the Go default. airlock reads no other variable of its own
// environment in a Pod: the command's environment is built afresh from
// the policy (a policy's env entry without a value passes the
// container's on, which is then these values for these names).
var pinnedEnv = []corev1.EnvVar{
	{Name: "GODEBUG"}, {Name: "GOGC"}, {Name: "GOMEMLIMIT"}, {Name: "GOMAXPROCS"}, {Name: "GOTRACEBACK"},
	{Name: "TMPDIR", Value: "/tmp"}, {Name: "HOME", Value: "/tmp"}, {Name: "XDG_CACHE_HOME"}, {Name: "XDG_CONFIG_HOME"},
	{Name: "TZ"}, {Name: "ZONEINFO"}, {Name: "PWD"}, {Name: "LOCALDOMAIN"}, {Name: "RES_OPTIONS"}, {Name: "HOSTALIASES"},
}

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
	genName   string // the Pod's generateName: its name cannot be taken first
	image     string
	text      string // the policy, as the Sandbox or template has it
	pol       *policy.Policy
	argv      []string // nil: a warm Pod, which waits for its command
	labels    map[string]string
	deadline  time.Duration // activeDeadlineSeconds
	owner     metav1.OwnerReference
	o         Options
}

// buildPod returns the Pod that runs argv (or waits for it) under the
// policy, hardened as export/k8s hardens its Pod: an init container from
// the operator's image installs airlock and the policy in the enforcer
// volume, and the sandbox container, from the Sandbox's image, runs that
// airlock, never one of its image's.
func buildPod(pp podParams) *corev1.Pod {
	b := pp.pol.Budget()
	milli := max(int64(b.CPU/time.Millisecond)*1000/max(int64(b.Wall/time.Millisecond), 1), minMilliCPU)
	res := corev1.ResourceList{
		corev1.ResourceMemory:           *resource.NewQuantity(b.Memory+memoryOverhead, resource.BinarySI),
		corev1.ResourceCPU:              *resource.NewMilliQuantity(milli, resource.DecimalSI),
		corev1.ResourceEphemeralStorage: *resource.NewQuantity(b.Scratch+enforcerSize, resource.BinarySI),
	}
	cmd := []string{EnforcerDir + "/airlock", "run", "--isolation", "landlock", "--policy", EnforcerDir + "/" + policyFile, "--summary-file", terminationLog}
	vols := []corev1.Volume{
		{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: resource.NewQuantity(b.Scratch, resource.BinarySI)}}},
		{Name: enforcerVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: resource.NewQuantity(enforcerSize, resource.BinarySI)}}},
	}
	mounts := []corev1.VolumeMount{{Name: "tmp", MountPath: "/tmp"}, {Name: enforcerVolume, MountPath: EnforcerDir, ReadOnly: true}}
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
		InitContainers: []corev1.Container{{
			Name:            InstallContainer,
			Image:           pp.o.AirlockImage,
			ImagePullPolicy: pp.o.pullPolicy(),
			Command:         []string{ImageBin + "/airlock-controller", "install", EnforcerDir},
			Env:             []corev1.EnvVar{{Name: EnvPolicy, Value: pp.text}},
			// The Pod's requests are the larger of an init container's
			// and the sum of the others': the same adds nothing.
			Resources:    corev1.ResourceRequirements{Limits: res.DeepCopy(), Requests: res.DeepCopy()},
			VolumeMounts: []corev1.VolumeMount{{Name: enforcerVolume, MountPath: EnforcerDir}},
			// Its error, on stderr, becomes the Pod's message.
			TerminationMessagePath:   terminationLog,
			TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		}},
		Containers: []corev1.Container{{
			Name:                     container,
			Image:                    pp.image,
			Command:                  cmd,
			Env:                      slices.Clone(pinnedEnv),
			Resources:                corev1.ResourceRequirements{Limits: res, Requests: res.DeepCopy()},
			VolumeMounts:             mounts,
			TerminationMessagePath:   terminationLog,
			TerminationMessagePolicy: corev1.TerminationMessageReadFile,
		}},
		Volumes:     vols,
		HostNetwork: pp.o.HostNetwork,
	}
	// airlock stacks its own seccomp allow-list for the command on it.
	k8s.Harden(&spec, pp.o.seccomp())
	labels := map[string]string{LabelManagedBy: ManagedBy}
	for k, v := range pp.labels {
		labels[k] = v
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: pp.genName, Namespace: pp.namespace, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{pp.owner}},
		Spec: spec,
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

// specHash labels a template's warm Pods with its policy and image, so
// that those made for another are found and replaced. A label anyone who
// may update Pods can change: a claim trusts the Pod's spec (samePod),
// not it.
func specHash(pol, image string) string {
	h := sha256.Sum256([]byte(pol + "\x00" + image))
	return hex.EncodeToString(h[:])[:10]
}

// PolicyDigest is "sha256:" and the hex SHA-256 of a policy's text: what
// a Sandbox's status.policyDigest names.
func PolicyDigest(text string) string {
	h := sha256.Sum256([]byte(text))
	return "sha256:" + hex.EncodeToString(h[:])
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
