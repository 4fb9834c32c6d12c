package controller_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/controller"
	"github.com/airlock-sandbox/airlock/controller/api/v1alpha1"
	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/internal/k8stest"
)

// nodePolicy is the CSV example's policy for a Pod: absolute paths (a
// Pod has no policy folder), no fs_write (a controller Pod has no
// writable volume), env to set HOME and the attacker's URL as the
// example's test does, and the downgrades every Pod policy lists.
const nodePolicy = `version: 1
fs_read: [/srv/csv]
net_hosts: [pypi.org:443]
allowed_tools: [python3, env]
allow_downgrade: [max_memory, max_cpu, max_pids]
budget:
  max_wall: 5s
  max_cpu: 2s # the Pod's cpu request is max_cpu over max_wall: 0.4 of the node's 2 cores
`

// TestOnNode runs Sandboxes on a real node: the controller in this
// process, kube-scheduler placing its Pods, a kubelet with containerd and
// runc starting them, the garbage collector removing what a deleted
// Sandbox owned. The CSV example's snippet runs under its policy; its
// credential read fails, the attacker's listener on the host's loopback
// (the Pods share the host's network: there is no pod network here) gets
// nothing, max_wall halts its loop, and airlock's report lands in the
// Sandbox's status. A claim on a template with a warm Pod is timed
// against a cold one, both to the end of a short command.
func TestOnNode(t *testing.T) {
	base := k8stest.BaseLayer(t)
	e := start(t, startOptions{opts: controller.Options{
		PodSeccomp:  &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined},
		HostNetwork: true,
	}})
	e.cp.StartGarbageCollector(t)
	e.cp.StartScheduler(t)
	n := k8stest.StartNode(t, e.cp, []k8stest.Layer{base})
	n.ImportOperator(t)
	img := csvImage(t, n, base)
	ns := "nodetest" // hostNetwork and Unconfined: not a restricted namespace
	e.cp.Namespace(t, ns, nil)
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		var pods corev1.PodList
		if err := e.c.List(context.Background(), &pods, client.InNamespace(ns)); err != nil {
			t.Logf("list pods: %v", err)
			return
		}
		for _, p := range pods.Items {
			t.Logf("pod %s: node %q phase %s conditions %+v containers %+v", p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.Conditions, p.Status.ContainerStatuses)
		}
	})

	t.Run("csv", func(t *testing.T) {
		evil := airtest.NewAttacker(t)
		url := "http://127.0.0.1:" + strconv.Itoa(evil.Port()) + "/collect"
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		sb := &v1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "csv"}, Spec: v1alpha1.SandboxSpec{
			Image: img, Policy: nodePolicy,
			Command: []string{"env", "HOME=/home/agent", "ATTACKER_URL=" + url, "python3", "/srv/csv/agent_snippet.py"},
		}}
		if err := e.c.Create(ctx, sb); err != nil {
			t.Fatal(err)
		}
		sb = e.sandbox(t, ctx, ns, "csv", "finished", func(s *v1alpha1.Sandbox) bool { return s.Status.FinishTime != nil })
		evil.Close()
		r := sb.Status.Report
		if r == nil {
			t.Fatalf("the Sandbox ended with no report; status %+v", sb.Status)
		}
		t.Logf("status: phase %s, exit %v, report: exit %d, halted_by %q, stdout %q, denials %+v", sb.Status.Phase, deref(sb.Status.ExitCode), r.ExitCode, r.HaltedBy, r.Stdout, r.Denials)
		if sb.Status.Phase != v1alpha1.PhaseFailed || deref(sb.Status.ExitCode) != 124 || r.HaltedBy != "max_wall" {
			t.Errorf("phase %s, exit code %v, halted_by %v; want Failed, 124, max_wall (the loop halted)", sb.Status.Phase, deref(sb.Status.ExitCode), r.HaltedBy)
		}
		if !strings.Contains(r.Stdout, "step credentials: FAILED") || strings.Contains(r.Stdout, "AIRLOCKTESTSECRET") {
			t.Errorf("the credential read did not fail:\n%s", r.Stdout)
		}
		if !strings.Contains(r.Stdout, "step exfiltrate: FAILED") || !strings.Contains(r.Stdout, "step loop: waiting forever") {
			t.Errorf("the POST did not fail, or the loop never started:\n%s", r.Stdout)
		}
		if c, b := evil.Got(); c != 0 || b != 0 {
			t.Errorf("the attacker's listener got %d connections and %d bytes, want none", c, b)
		}
		if !slices.ContainsFunc(r.Denials, func(d api.Denial) bool {
			return d.Layer == "net" && strings.HasPrefix(url, "http://"+d.Target+"/")
		}) {
			t.Errorf("the report lists no denial of the connect to the attacker: %+v", r.Denials)
		}

		// Deleting the Sandbox takes its Pod with it.
		pod := sb.Status.PodName
		if err := e.c.Delete(ctx, sb); err != nil {
			t.Fatal(err)
		}
		waitFor(t, ctx, "pod "+pod+" garbage-collected", func() (bool, error) {
			err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: pod}, new(corev1.Pod))
			return err != nil && strings.Contains(err.Error(), "not found"), nil
		})
	})

	t.Run("warm-vs-cold", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		pol := "version: 1\nallowed_tools: [python3]\nallow_downgrade: [max_memory, max_cpu, max_pids]\nbudget:\n  max_wall: 30s\n  max_cpu: 5s\n"
		tp := &v1alpha1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "py"},
			Spec: v1alpha1.SandboxTemplateSpec{Policy: pol, Image: img, WarmPool: 1}}
		if err := e.c.Create(ctx, tp); err != nil {
			t.Fatal(err)
		}
		// The command prints the time it started: create to start is what
		// a warm Pod saves (the kubelet's status updates, seconds apart,
		// dominate the time to the finished status in both cases).
		run := func(name string, spec v1alpha1.SandboxSpec) (time.Duration, *v1alpha1.Sandbox) {
			began := time.Now()
			sb := &v1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
			if err := e.c.Create(ctx, sb); err != nil {
				t.Fatal(err)
			}
			sb = e.sandbox(t, ctx, ns, name, "finished", func(s *v1alpha1.Sandbox) bool { return s.Status.FinishTime != nil })
			if sb.Status.Phase != v1alpha1.PhaseSucceeded || sb.Status.Report == nil {
				t.Fatalf("sandbox %s: phase %s, report %+v; want Succeeded", name, sb.Status.Phase, sb.Status.Report)
			}
			started, err := strconv.ParseFloat(strings.TrimSpace(sb.Status.Report.Stdout), 64)
			if err != nil {
				t.Fatalf("sandbox %s printed %q, want the time it started", name, sb.Status.Report.Stdout)
			}
			return time.Unix(0, int64(started*1e9)).Sub(began), sb
		}
		argv := []string{"python3", "-c", "import time; print(repr(time.time()))"}
		var warm, cold []time.Duration
		for i := range 3 {
			e.waitReady(t, ctx, tp, 1)
			d, sb := run(fmt.Sprintf("warm-%d", i), v1alpha1.SandboxSpec{TemplateRef: &v1alpha1.TemplateRef{Name: "py"}, Command: argv})
			if !sb.Status.Warm {
				t.Fatalf("sandbox warm-%d was not bound to a warm Pod", i)
			}
			warm = append(warm, d)
			d, sb = run(fmt.Sprintf("cold-%d", i), v1alpha1.SandboxSpec{Image: img, Policy: pol, Command: argv})
			if sb.Status.Warm {
				t.Fatalf("sandbox cold-%d was bound to a warm Pod", i)
			}
			cold = append(cold, d)
		}
		slices.Sort(warm)
		slices.Sort(cold)
		t.Logf("create to the command's start on the node: warm claim %v (median of %d: %v), new Pod %v (median %v)", warm, len(warm), warm[1], cold, cold[1])
		if warm[1] >= cold[1] {
			t.Errorf("a warm claim (median %v) was not faster than a new Pod (median %v)", warm[1], cold[1])
		}
	})
}

func deref(p *int32) int32 {
	if p == nil {
		return -1
	}
	return *p
}

// csvImage builds and imports the image the Pods run: the Debian base,
// the example's files under /srv/csv and a credential in /home/agent
// readable by the Pod's user, so that only airlock (the operator's,
// which the Pod's init container installs) keeps the snippet from it.
// The image holds no airlock of its own.
func csvImage(t *testing.T, n *k8stest.Node, base k8stest.Layer) string {
	t.Helper()
	ex := "../examples/csv-injection/"
	files := map[string]k8stest.File{}
	files["/srv/csv/sales.csv"] = k8stest.File{Source: ex + "sales.csv", Mode: 0o644}
	files["/srv/csv/agent_snippet.py"] = k8stest.File{Source: ex + "agent_snippet.py", Mode: 0o644}
	files["/home/agent/.aws/credentials"] = k8stest.File{Data: []byte("[default]\naws_secret_access_key = AIRLOCKTESTSECRETDONOTSEND\n"), Mode: 0o644}
	top, err := k8stest.FilesLayer(t.TempDir(), files)
	if err != nil {
		t.Fatal(err)
	}
	img := &k8stest.Image{Name: "localhost/k8stest/airlock-csv:1", Layers: []k8stest.Layer{base, top}}
	if err := n.Import(t, img); err != nil {
		t.Fatal(err)
	}
	return img.Name
}
