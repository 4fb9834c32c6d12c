// Package k8s turns a compiled airlock plan into Kubernetes objects that
// keep as much of the sandbox as a cluster can express: a Pod with no
// privileges (non-root, read-only root, no privilege escalation, every
// capability dropped, airlock's seccomp allow-list as a Localhost profile,
// gVisor's runtime class), its budget as resources and a deadline, its
// grants as volumes, and a NetworkPolicy under which the only way out is an
// egress proxy that admits net_hosts.
//
// Export is pure: plan and policy in, API objects out (Manifests.Write
// puts them in a folder). It is the only package that imports the
// Kubernetes API types, and, like export/oci (whose seccomp translation it
// reuses), it never imports sandbox or internal/enforce/... itself. It
// stops a cluster deployment from running the agent's code with more than
// the policy grants.
//
// # What the export defines and what it takes as parameters
//
// The objects refer to nothing outside the export except parameters the
// caller names, which Manifests.Outside lists and the YAML header repeats:
// the namespace (Options.Namespace), the sandbox's image (Options.Image,
// required), the proxy's image (Options.ProxyImage), the RuntimeClass
// (Options.RuntimeClass), one existing PersistentVolumeClaim per
// claim-backed grant (Options.Volumes), the default StorageClass for the
// claims the export defines (Volume.New), the proxy's clusterIP
// (Options.ProxyClusterIP) or kube-dns (Options.ProxyDNS), and the
// seccomp profile installed on the nodes, and the ServiceAccount the Pod
// and the proxy run as (Options.ServiceAccount, by default the
// namespace's "default", which the controller-manager creates; the
// ServiceAccount admission plugin refuses a Pod whose account is missing),
// with no token mounted. The export defines no account: a server-side dry
// run creates nothing, so a Pod naming an account of the same file would
// be refused by `kubectl apply --dry-run=server`. No Secret is named. So
// `kubectl apply -f` of the YAML (or `kubectl apply -R -f` of the folder
// Write fills) creates every object once the parameters exist, also in a
// namespace that enforces the restricted Pod Security level.
//
// # Mapping
//
//   - fs_read, fs_write: hostPath would hand the node's filesystem to the
//     Pod, and a claim the export made itself would be empty, so each
//     grant is backed as Options.Volumes says, and a grant without an
//     entry is refused: "claim:NAME" mounts the existing
//     PersistentVolumeClaim NAME at the grant's path (volume and mount
//     readOnly for fs_read); "new:SIZE" (fs_write only) defines a new,
//     empty ReadWriteOnce claim NAME-VOLUME of that size, a place for
//     what the sandbox writes that stays when the Pod is deleted; "image"
//     (fs_read only) says the image already holds the path, and nothing
//     is mounted. A claim mounts a folder, so
//     a grant of a single file must be granted as its folder or come from
//     the image. When one grant lies inside another, the outer claim must
//     already hold the inner grant's folder: a read-only mount cannot get
//     a new mount point.
//   - net_hosts: a NetworkPolicy denies all ingress and all egress except
//     to the egress proxy's pods on its ports. DNS is closed: the proxy
//     resolves the names it admits, and a resolver the sandbox can query
//     is a channel out. So the Pod reaches the proxy by address:
//     Options.ProxyClusterIP pins the proxy Service's clusterIP, and
//     HTTP_PROXY, HTTPS_PROXY and ALL_PROXY name it (network plugins
//     apply the policy after the Service address is translated to the
//     proxy pod's, so the egress rule to the proxy's pods admits it).
//     Only Options.ProxyDNS
//     instead lets the cluster pick the address, names the Service in
//     those variables and allows DNS (UDP and TCP 53) to kube-dns in
//     kube-system. With net_hosts one of the two is required. The proxy
//     is a Deployment running `airlock egress-proxy --config
//     /etc/airlock/policy.json` with the canonical policy JSON from a
//     ConfigMap, behind a Service; its image (DefaultProxyImage, built
//     from packaging/egress-proxy) must have airlock on its PATH.
//     Without net_hosts there is no proxy and no egress at all.
//   - budget: max_memory is the memory request and limit; max_scratch is
//     the size of the memory-backed /tmp emptyDir and the
//     ephemeral-storage request and limit; max_wall is
//     activeDeadlineSeconds. max_cpu is CPU time, a Kubernetes cpu limit is
//     a rate: the Pod gets max_cpu/max_wall cores (at least 10m), so that
//     running flat out until the deadline uses at most max_cpu. max_pids,
//     max_output_bytes and max_ops have no Pod field (set the kubelet's
//     podPidsLimit; the proxy counts ops).
//   - allowed_tools: the image decides what exists, and nothing in a Pod
//     stops the command from running anything else the image holds: use
//     an image with only the tools. The command is the plan's argv,
//     resolved on the exporting host, so the image must hold it and the
//     tools at the same paths (Manifests.ImagePaths). airlock cannot look
//     inside a remote image, so Image has no default.
//   - seccomp: the profile file (Manifests.Seccomp) must be installed on
//     every node under the kubelet's seccomp root (by default
//     /var/lib/kubelet/seccomp/) at Manifests.SeccompPath; Write puts it
//     at SeccompDir/SeccompPath. Its name ends in SeccompExt, not .json,
//     so that `kubectl apply -R` of the folder skips it. runsc applies it
//     only with --oci-seccomp; gVisor's own kernel is the stronger layer
//     there.
package k8s
