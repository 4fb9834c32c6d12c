package controller

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/airlock-sandbox/airlock/internal/airtest"
)

// runPolicy is a policy a Pod can enforce, with a tool the test's command
// uses.
const runPolicy = `version: 1
allowed_tools: [cat]
allow_downgrade: [max_memory, max_cpu, max_pids]
budget:
  max_wall: 20s
`

// TestPodCommandRuns runs the container command the controller writes
// into its Pods, cold and warm, with the real airlock, as the Pod's user
// (uid 65532, not root) and without namespaces of its own, as in a
// container: Install puts airlock, airlock-init and the policy from the
// init container's environment where the command finds them, the flags
// are accepted, the policy is enforced (a file outside the grants is
// unreadable), the warm one waits for its command in the downward-API
// file, and the termination message decodes into what the Sandbox's
// status gets. Only the Pod's absolute paths (the enforcer and
// downward-API folders, the termination log) are moved into a temporary
// folder. There is no kubelet or container runtime here: images, mounts,
// the read-only root and the Pod's seccomp profile are not exercised.
func TestPodCommandRuns(t *testing.T) {
	airtest.RequireRoot(t) // to run as uid 65532
	bin := buildAirlock(t)
	pol, err := checkPolicy(runPolicy)
	if err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(openDir(t), "secret")
	if err := os.WriteFile(secret, []byte("token"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The control: without airlock, the Pod's user reads it.
	ctl := exec.Command("/bin/cat", secret)
	ctl.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65532, Gid: 65532, Groups: []uint32{}}}
	if out, err := ctl.Output(); err != nil || string(out) != "token" {
		t.Fatalf("uid 65532 cannot read %s without airlock (%v): the test would prove nothing", secret, err)
	}
	argv := []string{"/bin/sh", "-c", "cat " + secret + " || echo denied; exit 3"}
	for _, warm := range []bool{false, true} {
		name := map[bool]string{false: "cold", true: "warm"}[warm]
		t.Run(name, func(t *testing.T) {
			dir := openDir(t)
			pp := podParams{namespace: "ns", genName: "p-", image: "img", text: runPolicy, pol: pol, argv: argv,
				deadline: time.Minute, owner: metav1.OwnerReference{}, o: Options{AirlockImage: "operator"}}
			if warm {
				pp.argv = nil
			}
			pod := buildPod(pp)
			cmd := podPaths(t, dir, pod.Spec.Containers[0].Command)
			// What the init container does, from the folder of airlock
			// and airlock-init as built.
			if err := os.Mkdir(filepath.Join(dir, EnforcerDir), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := Install(filepath.Join(bin, "airlock"), filepath.Join(dir, EnforcerDir), initEnv(t, pod, EnvPolicy)); err != nil {
				t.Fatal(err)
			}
			argvPath := filepath.Join(dir, "etc/airlock/assignment/argv")
			write(t, argvPath, "") // the kubelet writes the file before the annotation exists
			write(t, filepath.Join(dir, "dev/termination-log"), "")
			// The kubelet gives the container its termination log, and /tmp
			// is the Pod's emptyDir, writable through fsGroup.
			scratch := filepath.Join(dir, "tmp")
			if err := os.Mkdir(scratch, 0o700); err != nil {
				t.Fatal(err)
			}
			for _, p := range []string{filepath.Join(dir, "dev/termination-log"), scratch} {
				if err := os.Chown(p, 65532, 65532); err != nil {
					t.Fatal(err)
				}
			}

			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			c := exec.CommandContext(ctx, cmd[0], cmd[1:]...)
			c.Dir = dir
			c.Env = []string{"PATH=/usr/bin:/bin", "TMPDIR=" + scratch}
			c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65532, Gid: 65532, Groups: []uint32{}}}
			var out strings.Builder
			c.Stdout, c.Stderr = &out, &out
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			if warm {
				// What claim writes into the annotation.
				b, err := json.Marshal(argv)
				if err != nil {
					t.Fatal(err)
				}
				write(t, argvPath+".new", string(b))
				if err := os.Rename(argvPath+".new", argvPath); err != nil {
					t.Fatal(err)
				}
			}
			err := c.Wait()
			if code := c.ProcessState.ExitCode(); code != 3 {
				t.Fatalf("pod command %q: exit %d (%v), want 3\n%s", cmd, code, err, out.String())
			}
			if strings.Contains(out.String(), "token") || !strings.Contains(out.String(), "denied") {
				t.Errorf("the secret outside the policy was readable:\n%s", out.String())
			}
			msg, err := os.ReadFile(filepath.Join(dir, "dev/termination-log"))
			if err != nil {
				t.Fatal(err)
			}
			rep, err := decodeSummary(string(msg))
			if err != nil {
				t.Fatal(err)
			}
			if rep.ExitCode != 3 || rep.Backend != "landlock" || !strings.Contains(rep.Stdout, "denied") {
				t.Errorf("report = %+v, want exit 3 from the landlock backend with the output", rep)
			}
		})
	}
}

// podPaths moves the Pod's absolute paths in cmd below dir.
func podPaths(t *testing.T, dir string, cmd []string) []string {
	t.Helper()
	out := make([]string, len(cmd))
	for i, a := range cmd {
		for _, p := range []string{EnforcerDir, assignDir, terminationLog} {
			if strings.HasPrefix(a, p) {
				a = filepath.Join(dir, a)
			}
		}
		out[i] = a
	}
	if out[0] == cmd[0] && !strings.HasPrefix(cmd[0], "/") {
		t.Fatalf("command %q does not start with airlock's path", cmd)
	}
	return out
}

// initEnv returns the value of the init container's variable name.
func initEnv(t *testing.T, pod *corev1.Pod, name string) string {
	t.Helper()
	for _, e := range pod.Spec.InitContainers[0].Env {
		if e.Name == name {
			return e.Value
		}
	}
	t.Fatalf("the init container has no %s", name)
	return ""
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// buildAirlock builds airlock and airlock-init into a folder the Pod's
// user can read, and returns it.
func buildAirlock(t *testing.T) string {
	t.Helper()
	dir := openDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// Static, as Install demands and an image without a C library needs.
	build := exec.CommandContext(ctx, "go", "build", "-o", dir, "../cmd/airlock", "../cmd/airlock-init")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return dir
}

// openDir returns a new temporary folder that the Pod's user can enter,
// as can its parent (the test's own temporary folder).
func openDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
