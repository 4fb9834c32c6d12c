package k8s

import (
	corev1 "k8s.io/api/core/v1"
)

// Harden sets on spec what every sandbox Pod gets, the exported one and
// the airlock controller's: no restart, no ServiceAccount token, no
// Service links in the environment, a 1 s grace period, and for the Pod
// and each of its containers uid and gid SandboxUID (non-root), no
// privilege escalation (no_new_privs), a read-only root, no capability
// (drop ALL), not privileged and the seccomp profile sc; init containers
// get the same as the others. It overwrites those fields and leaves the
// others alone.
func Harden(spec *corev1.PodSpec, sc *corev1.SeccompProfile) {
	uid, no, yes := int64(SandboxUID), false, true
	spec.RestartPolicy = corev1.RestartPolicyNever
	spec.AutomountServiceAccountToken = &no
	spec.EnableServiceLinks = &no
	spec.TerminationGracePeriodSeconds = ptr(int64(1))
	spec.SecurityContext = &corev1.PodSecurityContext{
		RunAsNonRoot: &yes, RunAsUser: &uid, RunAsGroup: &uid, FSGroup: &uid,
		SeccompProfile: sc.DeepCopy(),
	}
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range cs {
			cs[i].SecurityContext = &corev1.SecurityContext{
				RunAsNonRoot: &yes, RunAsUser: ptr(uid), RunAsGroup: ptr(uid),
				Privileged: &no, AllowPrivilegeEscalation: ptr(false), ReadOnlyRootFilesystem: &yes,
				Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				SeccompProfile: sc.DeepCopy(),
			}
		}
	}
}
