package controller_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/airlock-sandbox/airlock/controller"
	"github.com/airlock-sandbox/airlock/controller/api/v1alpha1"
	"github.com/airlock-sandbox/airlock/internal/k8stest"
)

// secretLine is the credential the images hold, readable by the Pods'
// user: only airlock keeps a command from it.
const secretLine = "aws_secret_access_key = AIRLOCKTESTSECRETDONOTSEND"

// strictPolicy lets a command run cat and sh and read nothing outside the
// system base: the credential in /home/agent is refused.
const strictPolicy = `version: 1
allowed_tools: [cat, sh]
allow_downgrade: [max_memory, max_cpu, max_pids]
budget:
  max_wall: 20s
  max_cpu: 4s
`

// fakeAirlock is what an image's author puts at the path a Pod runs as
// airlock: it runs the command with no policy at all and writes a report
// of success whose output carries a marker and the command's output.
const fakeAirlock = `#!/bin/sh
sf=/dev/termination-log
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  if [ "$1" = "--summary-file" ]; then sf=$2; fi
  shift
done
shift
out=$("$@" 2>&1 | tr -d '\n"\\')
printf '{"exit_code":0,"duration_ms":1,"usage":{},"denials_total":0,"stdout":"FAKE-AIRLOCK %s"}' "$out" > "$sf"
`

// TestAttacksOnNode attacks, on a real node (kubelet, containerd, runc),
// what a Sandbox's Pod runs as its enforcer and under which policy: an
// image whose own airlock is a fake, with the Pods on the node's network
// and on one of their own; and, on the node's network, a template's
// policy ConfigMap made beforehand by a tenant, and an image whose
// environment tries to steer airlock.
func TestAttacksOnNode(t *testing.T) {
	base := k8stest.BaseLayer(t)
	for _, hostNet := range []bool{true, false} {
		t.Run(map[bool]string{true: "host-network", false: "pod-network"}[hostNet], func(t *testing.T) {
			attacksOnNode(t, base, hostNet)
		})
	}
}

func attacksOnNode(t *testing.T, base k8stest.Layer, hostNet bool) {
	e := start(t, startOptions{opts: controller.Options{
		PodSeccomp:  &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined},
		HostNetwork: hostNet,
	}})
	e.cp.StartScheduler(t)
	n := k8stest.StartNode(t, e.cp, []k8stest.Layer{base})
	n.ImportOperator(t)
	ns := "attacks" // Unconfined (and hostNetwork): not a restricted namespace
	e.cp.Namespace(t, ns, nil)
	cred := k8stest.File{Data: []byte("[default]\n" + secretLine + "\n"), Mode: 0o644}

	// The author's images: one with a fake airlock where the Pod looked
	// for it, one with the real airlock (as an author could also ship),
	// and one with the real airlock and an environment aimed at it.
	fake := importImage(t, n, base, "localhost/k8stest/fake-airlock:1", nil, map[string]k8stest.File{
		"/usr/local/bin/airlock":       {Data: []byte(fakeAirlock), Mode: 0o755},
		"/home/agent/.aws/credentials": cred,
	})
	// The folder the enforcer is mounted on, as a symlink to the fake's:
	// the mount must land where the command's path leads, over the fake.
	linked := importImage(t, n, base, "localhost/k8stest/fake-airlock-linked:1", nil, map[string]k8stest.File{
		"/usr/local/bin/airlock":       {Data: []byte(fakeAirlock), Mode: 0o755},
		"/.airlock":                    {Link: "/usr/local/bin"},
		"/home/agent/.aws/credentials": cred,
	})
	real := k8stest.AirlockFiles(t)
	real["/home/agent/.aws/credentials"] = cred
	plain := importImage(t, n, base, "localhost/k8stest/author:1", nil, real)
	steer := importImage(t, n, base, "localhost/k8stest/steer:1",
		[]string{"GODEBUG=gctrace=1", "GOGC=1", "TMPDIR=/dev/shm", "HOME=/dev/shm", "GOMAXPROCS=1"}, real)

	run := func(t *testing.T, ctx context.Context, name string, spec v1alpha1.SandboxSpec) *v1alpha1.Sandbox {
		t.Helper()
		sb := &v1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
		if err := e.c.Create(ctx, sb); err != nil {
			t.Fatal(err)
		}
		return e.sandbox(t, ctx, ns, name, "finished", func(s *v1alpha1.Sandbox) bool {
			return s.Status.FinishTime != nil || s.Status.Phase == v1alpha1.PhaseFailed
		})
	}
	stdout := func(sb *v1alpha1.Sandbox) string {
		if sb.Status.Report == nil {
			return ""
		}
		return sb.Status.Report.Stdout
	}

	for _, img := range []struct{ name, image string }{{"fake", fake}, {"linked", linked}} {
		t.Run("fake-airlock-"+img.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			sb := run(t, ctx, img.name, v1alpha1.SandboxSpec{Image: img.image, Policy: strictPolicy, Command: []string{"cat", "/home/agent/.aws/credentials"}})
			t.Logf("status: phase %s, exit %v, report %+v", sb.Status.Phase, deref(sb.Status.ExitCode), sb.Status.Report)
			if out := stdout(sb); strings.Contains(out, "FAKE-AIRLOCK") || strings.Contains(out, "AIRLOCKTESTSECRET") {
				t.Errorf("the Pod ran the image's own airlock as the enforcer: report stdout %q", out)
			}
			if r := sb.Status.Report; r == nil || r.Backend != "landlock" || !strings.Contains(r.Stderr, "Permission denied") {
				t.Errorf("the operator's airlock did not refuse the read: report %+v", r)
			}
		})
	}

	if !hostNet {
		return // the rest does not depend on the network
	}
	t.Run("preclaimed-policy", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		tc := e.tenant(t, ns, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create"}})
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shared-policy-" + hash10(strictPolicy+"\x00"+plain)},
			Data: map[string]string{"policy.yaml": permissive}}
		if err := tc.Create(ctx, cm); err != nil {
			t.Fatalf("the tenant could not pre-create configmap %s: %v", cm.Name, err)
		}
		tp := &v1alpha1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shared"},
			Spec: v1alpha1.SandboxTemplateSpec{Policy: strictPolicy, Image: plain, WarmPool: 1}}
		if err := e.c.Create(ctx, tp); err != nil {
			t.Fatal(err)
		}
		e.waitReady(t, ctx, tp, 1)
		sb := run(t, ctx, "claim", v1alpha1.SandboxSpec{TemplateRef: &v1alpha1.TemplateRef{Name: "shared"}, Command: []string{"cat", "/home/agent/.aws/credentials"}})
		t.Logf("status: phase %s, warm %v, exit %v, report %+v", sb.Status.Phase, sb.Status.Warm, deref(sb.Status.ExitCode), sb.Status.Report)
		if out := stdout(sb); strings.Contains(out, "AIRLOCKTESTSECRET") {
			t.Errorf("the claim ran under the tenant's policy: it read the credential: %q", out)
		}
		if sb.Status.Report == nil || sb.Status.Report.Backend != "landlock" {
			t.Errorf("the claim has no report from airlock: %+v", sb.Status)
		}
	})

	t.Run("image-env", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		sb := run(t, ctx, "steer", v1alpha1.SandboxSpec{Image: steer, Policy: strictPolicy, Command: []string{"sh", "-c", `echo "tmp=$TMPDIR home=$HOME"`}})
		t.Logf("status: phase %s, exit %v, report %+v", sb.Status.Phase, deref(sb.Status.ExitCode), sb.Status.Report)
		if out := stdout(sb); !strings.HasPrefix(out, "tmp=/tmp/airlock-scratch-") {
			t.Errorf("the image's TMPDIR moved airlock's scratch folder out of the Pod's /tmp volume: the command printed %q", out)
		}
		logs := containerLog(t, n, ns, sb.Status.PodName)
		if !strings.Contains(logs, "tmp=") {
			t.Fatalf("the container's log lacks the command's output: is it the right log?\n%.600s", logs)
		}
		if strings.Contains(logs, "gc 1 @") {
			t.Errorf("the image's GODEBUG reached airlock's runtime (gctrace lines in its log):\n%.600s", logs)
		}
	})
}

// importImage builds an image of base and files, with env in its config,
// and imports it into the node.
func importImage(t *testing.T, n *k8stest.Node, base k8stest.Layer, name string, env []string, files map[string]k8stest.File) string {
	t.Helper()
	top, err := k8stest.FilesLayer(t.TempDir(), files)
	if err != nil {
		t.Fatal(err)
	}
	img := &k8stest.Image{Name: name, Layers: []k8stest.Layer{base, top}, Env: env}
	if err := n.Import(t, img); err != nil {
		t.Fatal(err)
	}
	return img.Name
}

// containerLog returns what the sandbox container of pod ns/name wrote, as
// the kubelet keeps it on the node.
func containerLog(t *testing.T, n *k8stest.Node, ns, name string) string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(n.Dir(), "logs", ns+"_"+name+"_*", "sandbox", "*.log"))
	if err != nil || len(files) == 0 {
		var all []string
		_ = filepath.WalkDir(filepath.Join(n.Dir(), "logs"), func(p string, _ os.DirEntry, _ error) error {
			all = append(all, p)
			return nil
		})
		t.Fatalf("no log of pod %s/%s on the node (%v); the logs folder holds %q", ns, name, err, all)
	}
	var b strings.Builder
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(data)
	}
	return b.String()
}
