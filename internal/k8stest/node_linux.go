package k8stest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/airlock-sandbox/airlock/internal/airtest"
)

// Node is a real kubelet with containerd and runc, registered with a
// ControlPlane: pods that name it (spec.nodeName; there is no scheduler)
// run on this machine. Images come from Import (there is no registry).
type Node struct {
	// Name is the node's name, for a pod's spec.nodeName.
	Name string

	cp         *ControlPlane
	dir        string // short: it holds containerd's socket
	sock       string
	containerd *proc
	kubelet    *proc
	sysctls    map[string]string // the kubelet changes these; restored at the end
}

// PauseImage is the sandbox ("pause") image containerd starts for every
// pod: a shell sleeping, from the layers given to StartNode.
const PauseImage = "localhost/k8stest/pause:1"

// PodBridge is the host's bridge the pods without hostNetwork are on; the
// node removes it when it stops. podSubnet is their addresses' range,
// reachable from nowhere else.
const (
	PodBridge = "k8stest0"
	podSubnet = "10.244.77.0/24"
)

// kubeletSysctls are the kernel settings the kubelet sets on start
// (setupKernelTunables): the harness puts them back when the node stops.
var kubeletSysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
}

// StartNode starts containerd and a kubelet for cp and waits until the
// node is registered and Ready. base are the layers of the pause image
// (they must hold /bin/sleep). It needs root and the binaries of
// .ci/k8s (containerd, ctr and runc from Debian, the kubelet built), and
// skips or fails like Bin without them.
//
// containerd runs as pid 1 of a pid namespace of its own (in a mount
// namespace that receives the host's mounts, so it sees the kubelet's
// volumes): when the test ends or dies, it dies, and with it every shim
// and container. The kubelet runs on the host, listening on loopback
// only. Cleanup stops both, unmounts what the kubelet mounted, removes
// the folder and puts the kernel settings the kubelet changed back.
func StartNode(t testing.TB, cp *ControlPlane, base []Layer) *Node {
	t.Helper()
	if os.Geteuid() != 0 {
		airtest.SkipOrFail(t, "a kubelet needs root (it mounts volumes and starts containers)")
	}
	for _, b := range []string{"/usr/bin/containerd", "/usr/bin/ctr", "/usr/bin/containerd-shim-runc-v2", "/usr/sbin/runc", "/usr/bin/unshare"} {
		if _, err := os.Stat(b); err != nil {
			airtest.SkipOrFail(t, "%s is missing: .ci/k8s installs containerd and runc (Debian's containerd, runc)", b)
		}
	}
	if _, err := os.Stat(filepath.Join(cp.bin, "kubelet")); err != nil {
		airtest.SkipOrFail(t, "%s has no kubelet: run .ci/k8s again, which builds it", cp.bin)
	}
	// One node at a time on this machine, across test binaries (go test
	// runs packages in parallel): the kubelet changes kernel settings the
	// harness restores, and containerd's cgroup parent is shared.
	lock, err := os.OpenFile(filepath.Join(os.TempDir(), "airlock-k8stest-node.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	waited := time.Now()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		lock.Close()
		t.Fatalf("k8stest: lock for the node: %v", err)
	}
	t.Cleanup(func() { lock.Close() }) // registered first, so it runs after the node stops
	if w := time.Since(waited); w > time.Second {
		t.Logf("k8stest: waited %.1f s for another test's node to stop", w.Seconds())
	}
	dir, err := os.MkdirTemp("", "k8sn-")
	if err != nil {
		t.Fatal(err)
	}
	n := &Node{Name: "k8stest-node", cp: cp, dir: dir, sock: filepath.Join(dir, "c.sock"), sysctls: map[string]string{}}
	for _, s := range kubeletSysctls {
		if b, err := os.ReadFile("/proc/sys/" + s); err == nil {
			n.sysctls[s] = strings.TrimSpace(string(b))
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range []*proc{n.kubelet, n.containerd} {
				if p != nil {
					t.Logf("k8stest: %s's log ends:\n%s", p.name, p.tail(25))
				}
			}
		}
		n.stop(t)
	})
	began := time.Now()
	if err := n.start(t, base); err != nil {
		t.Fatal(err)
	}
	t.Logf("k8stest: node %s Ready %.1f s after start", n.Name, time.Since(began).Seconds())
	return n
}

func (n *Node) start(t testing.TB, base []Layer) error {
	ports, err := freePorts(2) // kubelet, its healthz
	if err != nil {
		return err
	}
	for _, d := range []string{"root", "state", "opt", "kubelet", "logs", "cni", "volplugins", "runc"} {
		if err := os.MkdirAll(filepath.Join(n.dir, d), 0o700); err != nil {
			return err
		}
	}
	// containerd's mount namespace receives the kubelet's mounts (volumes
	// it mounts after the pod was created, such as a downward-API tmpfs)
	// only from a shared mount; the host's may be private. The folder
	// becomes a shared mount point of its own; stop unmounts it.
	if err := unix.Mount(n.dir, n.dir, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("k8stest: bind the node's folder: %w", err)
	}
	if err := unix.Mount("", n.dir, "", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("k8stest: make the node's folder a shared mount: %w", err)
	}
	// A network configuration makes the node Ready. A pod of its own
	// network gets an address on PodBridge, a bridge with no address or
	// route on the host and no masquerade: it reaches its own loopback
	// and the other pods, nothing else. Most tests' pods use the host's
	// network (hostNetwork) to reach a listener on the host's loopback.
	cni := fmt.Sprintf(`{"cniVersion": "1.0.0", "name": "k8stest", "plugins": [{"type": "bridge", "bridge": %q, "isGateway": false, "ipMasq": false,
  "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "dataDir": %q}}]}`, PodBridge, podSubnet, filepath.Join(n.dir, "ipam"))
	if err := os.WriteFile(filepath.Join(n.dir, "cni", "10-k8stest.conflist"), []byte(cni), 0o600); err != nil {
		return err
	}
	cfg := fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = %[3]q
[ttrpc]
  address = %[4]q
[plugins."io.containerd.internal.v1.opt"]
  path = %[5]q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[6]q
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = %[8]q
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %[7]q
`, filepath.Join(n.dir, "root"), filepath.Join(n.dir, "state"), n.sock, n.sock+".ttrpc",
		filepath.Join(n.dir, "opt"), PauseImage, filepath.Join(n.dir, "cni"), filepath.Join(n.dir, "runc"))
	cfgPath := filepath.Join(n.dir, "containerd.toml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return err
	}
	n.containerd, err = startProc("containerd", filepath.Join(n.dir, "containerd.log"), []string{
		"/usr/bin/unshare", "--pid", "--fork", "--kill-child", "--mount", "--propagation", "slave", "--mount-proc",
		"/usr/bin/containerd", "--config", cfgPath,
	}, os.Environ())
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if err := n.containerd.waitReady(ctx, pollInterval, func(ctx context.Context) error {
		_, err := n.ctr(ctx, "version")
		return err
	}); err != nil {
		return err
	}
	if err := n.Import(t, &Image{Name: PauseImage, Layers: base, Entrypoint: []string{"/bin/sleep", "infinity"}}); err != nil {
		return err
	}

	kcfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: %d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %d
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: unix://%s
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
podLogsDir: %s
evictionHard: {"memory.available": "1Mi", "nodefs.available": "1%%", "imagefs.available": "1%%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
nodeStatusUpdateFrequency: 2s
syncFrequency: 10s
resolvConf: ""
serializeImagePulls: false
`, ports[0], ports[1], n.sock, filepath.Join(n.dir, "logs"))
	kcfgPath := filepath.Join(n.dir, "kubelet.yaml")
	if err := os.WriteFile(kcfgPath, []byte(kcfg), 0o600); err != nil {
		return err
	}
	n.kubelet, err = startProc("kubelet", filepath.Join(n.dir, "kubelet.log"), []string{
		filepath.Join(n.cp.bin, "kubelet"),
		"--config=" + kcfgPath,
		"--kubeconfig=" + n.cp.Kubeconfig,
		"--root-dir=" + filepath.Join(n.dir, "kubelet"),
		"--cert-dir=" + filepath.Join(n.dir, "kubelet", "pki"),
		"--volume-plugin-dir=" + filepath.Join(n.dir, "volplugins"),
		"--hostname-override=" + n.Name,
		"--v=1",
	}, os.Environ())
	if err != nil {
		return err
	}
	return n.kubelet.waitReady(ctx, 200*time.Millisecond, func(ctx context.Context) error {
		node, err := n.cp.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		ready := false
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				if c.Status != corev1.ConditionTrue {
					return fmt.Errorf("node %s: Ready=%s: %s", n.Name, c.Status, c.Message)
				}
				ready = true
			}
		}
		if !ready {
			return fmt.Errorf("node %s has no Ready condition yet", n.Name)
		}
		// The kubelet registers the node with the not-ready taint, which
		// the controller-manager's node lifecycle controller (not run
		// here) removes once the node is Ready: do what it does, so that
		// the scheduler places pods here.
		keep := node.Spec.Taints[:0]
		for _, taint := range node.Spec.Taints {
			if taint.Key != corev1.TaintNodeNotReady {
				keep = append(keep, taint)
			}
		}
		if len(keep) == len(node.Spec.Taints) {
			return nil
		}
		node.Spec.Taints = keep
		if _, err := n.cp.Client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("node %s: remove the not-ready taint: %w", n.Name, err)
		}
		return nil
	})
}

// SeccompDir is the kubelet's seccomp root: a pod's Localhost profile
// names a file below it.
func (n *Node) SeccompDir() string { return filepath.Join(n.dir, "kubelet", "seccomp") }

// Import writes img as an archive and imports it into the node's
// containerd, where pods find it (imagePullPolicy Never).
func (n *Node) Import(t testing.TB, img *Image) error {
	t.Helper()
	archive := filepath.Join(n.dir, "image.tar")
	defer os.Remove(archive)
	if err := img.writeArchive(archive); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if out, err := n.ctr(ctx, "--namespace=k8s.io", "images", "import", "--no-unpack=false", archive); err != nil {
		return fmt.Errorf("k8stest: import %s: %w\n%s", img.Name, err, out)
	}
	return nil
}

// ctr runs Debian's ctr against the node's containerd.
func (n *Node) ctr(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "/usr/bin/ctr", append([]string{"--address=" + n.sock}, args...)...).CombinedOutput()
	return string(out), err
}

// stop ends the kubelet, removes every container through containerd (so
// runc removes their cgroups and the shims their sockets), then ends
// containerd (its pid namespace takes whatever is left with it), unmounts
// what is left below the folder, removes it and restores the kernel
// settings.
func (n *Node) stop(t testing.TB) {
	if n.kubelet != nil {
		n.kubelet.stop(stopGrace)
	}
	if n.containerd != nil && !n.containerd.exited() {
		if err := n.removeContainers(); err != nil {
			t.Errorf("k8stest: %v", err)
		}
		n.containerd.stop(stopGrace)
	}
	// What containerd made for its containers and does not remove: the
	// parent of their cgroups and the folder of the shims' sockets
	// (rmdir leaves both alone when they are not empty).
	for _, d := range append(must(filepath.Glob("/sys/fs/cgroup/*/k8s.io")), "/run/containerd/s", "/run/containerd") {
		_ = os.Remove(d)
	}
	if err := exec.Command("/usr/sbin/ip", "link", "show", PodBridge).Run(); err == nil {
		if out, err := exec.Command("/usr/sbin/ip", "link", "delete", PodBridge).CombinedOutput(); err != nil {
			t.Errorf("k8stest: remove the pods' bridge %s: %v: %s", PodBridge, err, out)
		}
	}
	if err := unmountBelow(n.dir); err != nil {
		t.Errorf("k8stest: %v", err)
	}
	if err := os.RemoveAll(n.dir); err != nil {
		t.Errorf("k8stest: remove the node's folder: %v", err)
	}
	for s, v := range n.sysctls {
		if b, err := os.ReadFile("/proc/sys/" + s); err == nil && strings.TrimSpace(string(b)) != v {
			if err := os.WriteFile("/proc/sys/"+s, []byte(v), 0o644); err != nil {
				t.Errorf("k8stest: restore %s=%s (the kubelet changed it): %v", strings.ReplaceAll(s, "/", "."), v, err)
			}
		}
	}
}

// removeContainers kills and deletes every task and container of the
// kubelet's containerd namespace. A task may be ending meanwhile (its
// shim closing), which fails a delete: it retries, and reports only what
// is still listed at the end.
func (n *Node) removeContainers() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ids := func(what string) ([]string, error) {
		out, err := n.ctr(ctx, "--namespace=k8s.io", what, "ls", "--quiet")
		if err != nil {
			return nil, fmt.Errorf("ctr %s ls: %w: %s", what, err, out)
		}
		return strings.Fields(out), nil
	}
	for _, what := range []string{"tasks", "containers"} {
		for attempt := range 5 {
			left, err := ids(what)
			if err != nil {
				return err
			}
			if len(left) == 0 {
				break
			}
			if attempt > 0 {
				time.Sleep(200 * time.Millisecond)
			}
			for _, id := range left {
				// Errors show in the next list.
				if what == "tasks" {
					_, _ = n.ctr(ctx, "--namespace=k8s.io", "tasks", "kill", "--all", "--signal=SIGKILL", id)
					_, _ = n.ctr(ctx, "--namespace=k8s.io", "tasks", "delete", "--force", id)
				} else {
					_, _ = n.ctr(ctx, "--namespace=k8s.io", "containers", "rm", id)
				}
			}
		}
		if left, err := ids(what); err != nil || len(left) > 0 {
			return fmt.Errorf("containerd still lists %s %v after five attempts to remove them (%v)", what, left, err)
		}
	}
	return nil
}

// unmountBelow unmounts every mount point at or below dir, deepest first.
func unmountBelow(dir string) error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	defer f.Close()
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		p := unescapeMount(fields[4])
		if p == dir || strings.HasPrefix(p, dir+"/") {
			points = append(points, p)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	var errs []error
	for _, p := range points {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// RootfsEnv names the Debian root .ci/rootfs makes; BaseLayer turns it
// into the layer images here are built on.
const RootfsEnv = "AIRLOCK_TEST_ROOTFS"

// BaseLayer returns a layer of the Debian root AIRLOCK_TEST_ROOTFS names
// (python3, a shell, coreutils), cached by the root's folder name (it
// holds the hash of the recipe that made it) under the user's cache
// folder. It skips or fails like Bin when the variable is unset.
func BaseLayer(t testing.TB) Layer {
	t.Helper()
	if os.Geteuid() != 0 {
		// Only a node runs images, and a node needs root: spare the
		// unprivileged run a large tar it cannot use.
		airtest.SkipOrFail(t, "images are for the harness's node, which needs root")
	}
	root := os.Getenv(RootfsEnv)
	if root == "" {
		airtest.SkipOrFail(t, "%s is not set: build a Debian root with .ci/rootfs (debootstrap, as root) and point it there", RootfsEnv)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatalf("k8stest: a cache for the image layer: %v", err)
	}
	l, err := DirLayer(root, filepath.Join(cache, "airlock-k8stest"), filepath.Base(filepath.Clean(root)))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// WaitTerminated waits until container of the pod ns/name has ended and
// returns how. It fails t when ctx ends first, with the pod's status.
func WaitTerminated(t testing.TB, ctx context.Context, cp *ControlPlane, ns, name, container string) *corev1.ContainerStateTerminated {
	t.Helper()
	var last *corev1.Pod
	for {
		p, err := cp.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			last = p
			for _, s := range p.Status.ContainerStatuses {
				if s.Name == container && s.State.Terminated != nil {
					return s.State.Terminated
				}
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("k8stest: pod %s/%s: container %s did not end: %v; last status: %+v", ns, name, container, ctx.Err(), last.Status)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func must[T any](v T, _ error) T { return v }

// Dir is the node's folder: containerd's and the kubelet's state, logs
// and sockets, removed when the node stops.
func (n *Node) Dir() string { return n.dir }

// Pids returns the process ids of the node's containerd (the unshare
// that holds its pid namespace) and kubelet.
func (n *Node) Pids() []int {
	return []int{n.containerd.cmd.Process.Pid, n.kubelet.cmd.Process.Pid}
}

// AirlockFiles builds airlock and airlock-init, static (CGO_ENABLED=0,
// as an image without a C library needs), and returns them as the files
// /usr/local/bin/airlock and /usr/local/bin/airlock-init of a layer.
func AirlockFiles(t testing.TB) map[string]File {
	t.Helper()
	return programFiles(t, "airlock", "airlock-init")
}

// ImportOperator builds airlock, airlock-init and airlock-controller,
// static, and imports an image of only them, in /usr/local/bin, on no
// base: the operator's image that the controller's Pods take their
// enforcer from (controller.Options.AirlockImage). It returns the
// image's name, OperatorImage; pods must pull it Never.
func (n *Node) ImportOperator(t testing.TB) string {
	t.Helper()
	top, err := FilesLayer(t.TempDir(), programFiles(t, "airlock", "airlock-init", "airlock-controller"))
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Import(t, &Image{Name: OperatorImage, Layers: []Layer{top}}); err != nil {
		t.Fatal(err)
	}
	return OperatorImage
}

// programFiles builds airlock's programs (cmd/NAME), static, and returns
// them as /usr/local/bin/NAME files of a layer.
func programFiles(t testing.TB, names ...string) map[string]File {
	t.Helper()
	bins := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	args := []string{"build", "-o", bins + "/"}
	for _, name := range names {
		args = append(args, "github.com/airlock-sandbox/airlock/cmd/"+name)
	}
	// go test puts $GOROOT/bin first on PATH.
	build := exec.CommandContext(ctx, "go", args...)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("k8stest: go build %s: %v\n%s", strings.Join(names, ", "), err, out)
	}
	files := map[string]File{}
	for _, name := range names {
		files["/usr/local/bin/"+name] = File{Source: filepath.Join(bins, name), Mode: 0o755}
	}
	return files
}
