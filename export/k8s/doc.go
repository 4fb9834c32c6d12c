// Package k8s turns a compiled airlock plan into Kubernetes objects that
// keep as much of the sandbox as a cluster can express: a Pod with no
// privileges (non-root, read-only root, no privilege escalation, every
// capability dropped, airlock's seccomp allow-list as a Localhost profile,
// gVisor's runtime class), its budget as resources and a deadline, its
// grants as volumes, and a NetworkPolicy under which the only way out is an
// egress proxy that admits net_hosts.
//
// Export is pure: plan and policy in, API objects out. It is the only
// package that imports the Kubernetes API types, and, like export/oci
// (whose seccomp translation it reuses), it never imports sandbox or
// internal/enforce/... itself. It stops a cluster deployment from running
// the agent's code with more than the policy grants.
//
// # Mapping
//
//   - fs_read, fs_write: hostPath would hand the node's filesystem to the
//     Pod, so each grant becomes a volume named after the path backed by a
//     placeholder persistentVolumeClaim (claimName derived from the Pod
//     name and the path) that the operator binds to real storage; fs_read
//     volumes and mounts are readOnly.
//   - net_hosts: a NetworkPolicy denies all ingress and all egress except
//     to the egress proxy's pods on its ports (plus cluster DNS, unless
//     Options.ProxyClusterIP fixes the proxy's address: DNS is a channel
//     out, so pin the address when you can). The proxy is a Deployment
//     running `airlock egress-proxy --config /etc/airlock/policy.json`
//     with the canonical policy JSON from a ConfigMap, behind a Service;
//     HTTP_PROXY, HTTPS_PROXY and ALL_PROXY in the Pod name that Service.
//     The image must contain the airlock binary (the subcommand is in
//     cmd/airlock/egressproxy.go).
//     Without net_hosts there is no proxy and no egress at all.
//   - budget: max_memory is the memory request and limit; max_scratch is
//     the size of the memory-backed /tmp emptyDir and the
//     ephemeral-storage request and limit; max_wall is
//     activeDeadlineSeconds. max_cpu is CPU time, a Kubernetes cpu limit is
//     a rate: the Pod gets max_cpu/max_wall cores (at least 10m), so that
//     running flat out until the deadline uses at most max_cpu. max_pids,
//     max_output_bytes and max_ops have no Pod field (set the kubelet's
//     podPidsLimit; the proxy counts ops).
//   - allowed_tools: the image decides what exists; the command is the
//     plan's argv, resolved on the exporting host, so the image must have
//     it at the same path.
//   - seccomp: the profile file (Manifests.Seccomp) must be installed on
//     every node under the kubelet's seccomp root (by default
//     /var/lib/kubelet/seccomp/) at Manifests.SeccompPath. runsc applies
//     it only with --oci-seccomp; gVisor's own kernel is the stronger
//     layer there.
package k8s
