// Package k8stest starts a real Kubernetes control plane for tests, in
// the manner of controller-runtime's envtest: an etcd and a
// kube-apiserver of their own on free loopback ports, with a temporary
// data folder, serving certificates and a service-account key generated
// with Go's crypto, and a bearer token in the system:masters group. Start
// waits until the API server is ready and gives a kubeconfig file, a
// *rest.Config and a clientset; t.Cleanup stops both processes (SIGTERM,
// then SIGKILL), waits for them and removes the folder, whether the test
// passed or not. On Linux both processes also die with the test binary
// (PR_SET_PDEATHSIG), so a test killed by -timeout leaves none behind.
//
// There is no controller-manager, scheduler or kubelet: objects are
// stored and admitted (validation, defaulting, the ServiceAccount,
// RuntimeClass and PodSecurity admission plugins), never run. Namespace
// therefore creates the `default` ServiceAccount that the
// controller-manager would.
//
// The binaries come from the folder AIRLOCK_TEST_K8S names (bin/etcd,
// bin/kube-apiserver, bin/kubectl), which .ci/k8s builds and prints.
// Without it a test skips, naming what is missing, and fails instead when
// AIRLOCK_TEST_STRICT=1, as in CI.
//
// StartGarbageCollector, StartScheduler and StartNode add
// kube-controller-manager's garbage collector, kube-scheduler and a real
// node (a kubelet with containerd and runc; pods with the host's network,
// or with one of their own on a bridge that leads nowhere else)
// for tests that run Pods; Image, DirLayer and FilesLayer build the
// images those Pods run, without a registry, and ImportOperator the
// operator's image the controller's Pods take airlock from.
//
// Only tests import it (deps_test.go keeps it out of production
// packages). It stops an export that a real API server would refuse, or
// that a restricted namespace would not admit, and a controller whose
// Pods a real kubelet would not run, from passing on fakes.
package k8stest
