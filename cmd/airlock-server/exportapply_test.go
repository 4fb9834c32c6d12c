package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/internal/k8stest"
)

// TestExportK8sAppliesAsIs: what `airlock export k8s` writes for a few
// representative policies is applied as the README says, `kubectl apply
// -R -f DIR`, to a real kube-apiserver, in a namespace that enforces the
// restricted Pod Security level and holds only the parameters the
// export's header names; every object is created and nothing warns.
func TestExportK8sAppliesAsIs(t *testing.T) {
	cp := k8stest.Start(t)
	ctx := context.Background()
	rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "gvisor"}, Handler: "runsc"}
	if _, err := cp.Client.NodeV1().RuntimeClasses().Create(ctx, rc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	restricted := map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted",
		"pod-security.kubernetes.io/warn":    "restricted",
	}
	work := t.TempDir()
	for _, d := range []string{"data", "out"} {
		if err := os.Mkdir(filepath.Join(work, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	policyFile := filepath.Join(work, "policy.yaml")
	if err := os.WriteFile(policyFile, []byte("version: 1\nfs_read: [./data:/data]\nfs_write: [./out:/out]\nnet_hosts: [pypi.org]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	image := []string{"--image", "registry.example/agent:1"}
	tests := []struct {
		name   string
		args   []string // export k8s arguments but --out
		claims []string // existing claims the header asks for
		env    bool     // needs AIRLOCK_TEST_ROOTFS
	}{
		{"no-grants", append(image, "--", "/bin/true"), nil, false},
		{"read-write-net", append(image, "--policy", policyFile, "--namespace", "agents",
			"--volume", "/data=claim:agent-data", "--volume", "/out=new:1Gi", "--proxy-cluster-ip", "10.96.0.80",
			"--", "/bin/true"), []string{"agent-data"}, false},
		{"no-runtime-class", append(image, "--runtime-class", "", "--", "/bin/true"), nil, false},
		{"environment", append(image, "--rootfs", os.Getenv("AIRLOCK_TEST_ROOTFS"), "--", "tree"), nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.env && os.Getenv("AIRLOCK_TEST_ROOTFS") == "" {
				airtest.SkipOrFail(t, "AIRLOCK_TEST_ROOTFS is not set: build a Debian root with .ci/rootfs (debootstrap, as root) and point it there")
			}
			out := t.TempDir()
			r := airlockServer(t, work, append([]string{"export", "k8s", "--out", out}, tt.args...)...)
			if r.code != 0 {
				t.Fatalf("export k8s: exit %d\n%s%s", r.code, r.stdout, r.stderr)
			}
			ns := "agents"
			nsFlag := []string{}
			if !strings.Contains(strings.Join(tt.args, " "), "--namespace") {
				ns = "case-" + tt.name
				nsFlag = []string{"--namespace=" + ns}
			}
			cp.Namespace(t, ns, restricted)
			for _, c := range tt.claims {
				pvc := &corev1.PersistentVolumeClaim{
					ObjectMeta: metav1.ObjectMeta{Name: c},
					Spec: corev1.PersistentVolumeClaimSpec{
						AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadOnlyMany},
						Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
					},
				}
				if _, err := cp.Client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			k := cp.Kubectl(t, append(nsFlag, "apply", "--validate=strict", "-R", "-f", out)...)
			if k.Err != nil || strings.TrimSpace(k.Stderr) != "" {
				t.Fatalf("kubectl apply -R -f %s: %v\n%s%s", out, k.Err, k.Stdout, k.Stderr)
			}
			lines := strings.Split(strings.TrimSpace(k.Stdout), "\n")
			for _, l := range lines {
				if !strings.HasSuffix(l, " created") {
					t.Errorf("kubectl apply: %q, want every object created", l)
				}
			}
			if !strings.Contains(k.Stdout, "pod/airlock-sandbox created") {
				t.Errorf("kubectl apply did not create the Pod:\n%s", k.Stdout)
			}
			pod, err := cp.Client.CoreV1().Pods(ns).Get(ctx, "airlock-sandbox", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if rc := pod.Spec.RuntimeClassName; (rc == nil) != (tt.name == "no-runtime-class") {
				t.Errorf("runtimeClassName %v with --runtime-class %q", rc, tt.args)
			}
			t.Logf("%d objects: %s", len(lines), strings.Join(lines, "; "))
		})
	}
}
