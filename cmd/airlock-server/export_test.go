package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/airtest"
)

// TestExportK8sRootfs: the Kubernetes export of a policy with an
// environment checks the tools at the environment's paths and says the
// Pod's image must be the environment, and how to make it (the other
// half of cmd/airlock's TestRootfsFlag).
func TestExportK8sRootfs(t *testing.T) {
	root := os.Getenv("AIRLOCK_TEST_ROOTFS")
	if root == "" {
		airtest.SkipOrFail(t, "AIRLOCK_TEST_ROOTFS is not set: build a Debian root with .ci/rootfs (debootstrap, as root) and point it there")
	}
	r := airlockServer(t, "", "export", "k8s", "--rootfs", root, "--image", "registry.example/agent:1", "--out", t.TempDir(), "--", "tree")
	if r.code != 0 || !strings.Contains(r.stdout, "must hold the command and allowed_tools at /usr/bin/tree") || !strings.Contains(r.stdout, "podman import - registry.example/agent:1") {
		t.Errorf("export k8s --rootfs: exit %d, want the Pod's image named as the environment\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// TestExportK8sPlacedGrant: a placed grant is exported at its place: the
// Pod mounts the claim named for /workspace there and starts in it (the
// OCI half is cmd/airlock's TestExportPlacedGrant).
func TestExportK8sPlacedGrant(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "proj"), 0o755); err != nil {
		t.Fatal(err)
	}
	kout := t.TempDir()
	r := airlockServer(t, dir, "export", "k8s", "--fs-write", "./proj:/workspace", "--volume", "/workspace=claim:work", "--image", "registry.example/agent:1", "--out", kout, "--", "/bin/true")
	if r.code != 0 {
		t.Fatalf("export k8s: exit %d\n%s", r.code, r.stderr)
	}
	y, err := os.ReadFile(filepath.Join(kout, "airlock.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(y), "mountPath: /workspace") || !strings.Contains(string(y), "workingDir: /workspace") || !strings.Contains(string(y), "claimName: work") {
		t.Errorf("the Pod does not mount the claim at /workspace:\n%s", y)
	}
}
