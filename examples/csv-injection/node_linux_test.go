package csvinjection_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/internal/k8stest"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// TestCSVInjectionInPod runs the reference scenario in a Kubernetes pod
// on a real node (a kubelet with containerd and runc on this machine):
// airlock inside the pod's container, with the backend without
// namespaces (a pod has no user namespace), as a non-root user with no
// capabilities, no privilege escalation and a read-only root. The pod
// shares the host's network, so nothing but airlock stands between the
// snippet and the attacker's listener on the host's loopback, which it
// targets directly (http://127.0.0.1:PORT). The credential sits in the
// pod's image, readable by the pod's user: only airlock refuses it.
//
// Under containerd's default seccomp profile (RuntimeDefault) the
// connect broker cannot read a connect (pidfd_getfd is refused), so
// airlock refuses a policy with net_hosts there, naming why and what to
// do, and starts nothing; the run that works has the pod's seccomp
// Unconfined and airlock's own filter inside.
func TestCSVInjectionInPod(t *testing.T) {
	cp := k8stest.Start(t)
	base := k8stest.BaseLayer(t)
	n := k8stest.StartNode(t, cp, []k8stest.Layer{base})

	const secret = "aws_secret_access_key = AIRLOCKTESTSECRETDONOTSEND"
	files := k8stest.AirlockFiles(t)
	files["/home/agent/.aws/credentials"] = k8stest.File{Data: []byte("[default]\n" + secret + "\n"), Mode: 0o644}
	files["/srv/csv/out"] = k8stest.File{Mode: 0o755 | os.ModeDir}
	for _, f := range []string{"policy.yaml", "sales.csv", "agent_snippet.py"} {
		files["/srv/csv/"+f] = k8stest.File{Source: f, Mode: 0o644}
	}
	top, err := k8stest.FilesLayer(t.TempDir(), files)
	if err != nil {
		t.Fatal(err)
	}
	img := &k8stest.Image{Name: "localhost/k8stest/csv:1", Layers: []k8stest.Layer{base, top}}
	if err := n.Import(t, img); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	evil := airtest.NewAttacker(t)
	url := "http://127.0.0.1:" + strconv.Itoa(evil.Port()) + "/collect"
	run := `airlock run --isolation landlock --allow-downgrade staged_writes,max_memory,max_pids,max_cpu \
  --policy policy.yaml --env HOME=/home/agent --env ATTACKER_URL="$ATTACKER_URL" --json -- python3 ../agent_snippet.py > /report/report.json 2>/report/stderr
code=$?; cp out/trend.txt /report/ 2>/dev/null; exit $code`

	t.Run("runtime-default-refused", func(t *testing.T) {
		reports := runPod(t, ctx, cp, n, "csv-default", img.Name, corev1.SeccompProfileTypeRuntimeDefault, url, run)
		out, _ := os.ReadFile(filepath.Join(reports, "report.json"))
		var rep sandbox.Report
		if err := json.Unmarshal(out, &rep); err != nil {
			t.Fatalf("the report is not JSON: %v\n%s", err, out)
		}
		if rep.ExitCode != 125 || rep.Stdout != "" || !strings.Contains(rep.Error, "pidfd_getfd(2) is refused") || !strings.Contains(rep.Error, "nothing was started") {
			t.Errorf("under RuntimeDefault the report has exit_code %d, stdout %q and error %q; want 125, nothing run, and a refusal naming pidfd_getfd and that nothing was started", rep.ExitCode, rep.Stdout, rep.Error)
		}
		if _, err := os.Stat(filepath.Join(reports, "trend.txt")); err == nil {
			t.Error("the snippet ran under RuntimeDefault, where airlock refused the policy")
		}
	})

	t.Run("csv", func(t *testing.T) {
		reports := runPod(t, ctx, cp, n, "csv", img.Name, corev1.SeccompProfileTypeUnconfined, url, run)
		stderr, _ := os.ReadFile(filepath.Join(reports, "stderr"))
		out, err := os.ReadFile(filepath.Join(reports, "report.json"))
		if err != nil {
			t.Fatalf("no report: %v; airlock's stderr:\n%s", err, stderr)
		}
		t.Logf("report:\n%s", out)
		var rep sandbox.Report
		if err := json.Unmarshal(out, &rep); err != nil {
			t.Fatalf("the report is not JSON: %v\nairlock's stderr:\n%s", err, stderr)
		}
		if trend, err := os.ReadFile(filepath.Join(reports, "trend.txt")); err != nil || !strings.Contains(string(trend), "2024-04") {
			t.Errorf("out/trend.txt = %q, %v; want the monthly totals", trend, err)
		}
		if !strings.Contains(rep.Stdout, "step credentials: FAILED") || strings.Contains(string(out), "AIRLOCKTESTSECRET") {
			t.Errorf("the credential read did not fail inside the pod's sandbox:\n%s", rep.Stdout)
		}
		if !strings.Contains(rep.Stdout, "step exfiltrate: FAILED") {
			t.Errorf("the POST did not fail:\n%s", rep.Stdout)
		}
		if rep.HaltedBy == nil || *rep.HaltedBy != "max_wall" || rep.ExitCode != 124 || !strings.Contains(rep.Stdout, "step loop: waiting forever") {
			t.Errorf("report halted_by = %v, exit_code %d, want max_wall and 124 after the loop started:\n%s", rep.HaltedBy, rep.ExitCode, rep.Stdout)
		}
		var denied bool
		for _, d := range rep.Denials {
			denied = denied || (d.Layer == "net" && d.Op == "connect" && strings.HasPrefix(url, "http://"+d.Target+"/"))
		}
		if !denied {
			t.Errorf("the report lists no denial of the connect to the attacker: %+v", rep.Denials)
		}
	})
	evil.Close()
	if c, b := evil.Got(); c != 0 || b != 0 {
		t.Errorf("the attacker's listener got %d connections and %d bytes, want none", c, b)
	}
}

// runPod runs script with /bin/sh in a pod of the image on the node, as
// uid 65532 with no capabilities, no privilege escalation, a read-only
// root and the host's network, under the seccomp profile of type sc,
// waits for its end and returns the host folder mounted at /report.
func runPod(t *testing.T, ctx context.Context, cp *k8stest.ControlPlane, n *k8stest.Node, name, image string, sc corev1.SeccompProfileType, url, script string) string {
	t.Helper()
	reports := t.TempDir()
	if err := os.Chmod(reports, 0o777); err != nil {
		t.Fatal(err)
	}
	uid, no, yes := int64(65532), false, true
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName: n.Name, HostNetwork: true, RestartPolicy: corev1.RestartPolicyNever,
			AutomountServiceAccountToken: &no,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsUser: &uid, RunAsGroup: &uid, RunAsNonRoot: &yes,
				SeccompProfile: &corev1.SeccompProfile{Type: sc},
			},
			Containers: []corev1.Container{{
				Name: "agent", Image: image, ImagePullPolicy: corev1.PullNever,
				WorkingDir: "/srv/csv",
				Command:    []string{"/bin/sh", "-c", script},
				Env:        []corev1.EnvVar{{Name: "ATTACKER_URL", Value: url}, {Name: "PATH", Value: "/usr/local/bin:/usr/bin:/bin"}},
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: &no, ReadOnlyRootFilesystem: &yes,
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
				VolumeMounts: []corev1.VolumeMount{{Name: "out", MountPath: "/srv/csv/out"}, {Name: "report", MountPath: "/report"}, {Name: "tmp", MountPath: "/tmp"}},
			}},
			Volumes: []corev1.Volume{
				{Name: "out", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				// The report leaves the pod through a host folder the test reads.
				{Name: "report", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: reports}}},
			},
		},
	}
	if _, err := cp.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	term := k8stest.WaitTerminated(t, ctx, cp, "default", name, "agent")
	t.Logf("pod %s: the container ended with exit code %d", name, term.ExitCode)
	return reports
}
