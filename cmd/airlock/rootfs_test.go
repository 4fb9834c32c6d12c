//go:build linux

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/airtest"
)

// TestRootfsFlag: `airlock run --rootfs DIR` runs in the environment and
// names it (explain and the report); the OCI export carries it as the
// binds of its system base and tools (the Kubernetes export's half is
// cmd/airlock-server's TestExportK8sRootfs); and a bad environment is
// refused before anything starts.
func TestRootfsFlag(t *testing.T) {
	root := os.Getenv("AIRLOCK_TEST_ROOTFS")
	if root == "" {
		airtest.SkipOrFail(t, "AIRLOCK_TEST_ROOTFS is not set: build a Debian root with .ci/rootfs (debootstrap, as root) and point it there")
	}
	r := airlock(t, "", "explain", "--rootfs", root, "--tool", "tree", "--", "tree")
	if r.code != 0 || !strings.Contains(r.stdout, "environment: "+root) {
		t.Errorf("explain --rootfs: exit %d, stdout lacks the environment:\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = airlock(t, "", "run", "--json", "--rootfs", root, "--", "tree", "--version")
	var rep struct {
		ExitCode    int    `json:"exit_code"`
		Stdout      string `json:"stdout"`
		Enforcement struct {
			Rootfs string `json:"rootfs"`
		} `json:"enforcement"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || rep.ExitCode != 0 || !strings.Contains(rep.Stdout, "tree v") || rep.Enforcement.Rootfs != root {
		t.Errorf("run --rootfs: exit %d (%v) %+v\n%s", r.code, err, rep, r.stderr)
	}

	out := t.TempDir()
	r = airlock(t, "", "export", "oci", "--rootfs", root, "--out", out, "--", "tree")
	if r.code != 0 {
		t.Fatalf("export oci --rootfs: exit %d\n%s", r.code, r.stderr)
	}
	var spec struct {
		Mounts []struct{ Destination, Source string }
	}
	b, err := os.ReadFile(filepath.Join(out, "config.json"))
	if err != nil || json.Unmarshal(b, &spec) != nil {
		t.Fatalf("config.json: %v", err)
	}
	from := map[string]string{}
	for _, m := range spec.Mounts {
		from[m.Destination] = m.Source
	}
	if from["/usr/lib"] != root+"/usr/lib" || from["/usr/bin/tree"] != root+"/usr/bin/tree" {
		t.Errorf("the OCI export does not bind the environment's base and tools: /usr/lib from %q, /usr/bin/tree from %q", from["/usr/lib"], from["/usr/bin/tree"])
	}

	for _, c := range []struct{ root, want string }{
		{t.TempDir(), "has no /usr folder"},
		{"/", "/ is the host's own root"},
	} {
		r = airlock(t, "", "run", "--rootfs", c.root, "--", "/bin/true")
		if r.code != 125 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("run --rootfs %s: exit %d, want 125 saying %q\n%s", c.root, r.code, c.want, r.stderr)
		}
	}
}

// TestExportPlacedGrant: a placed grant is exported at its place: the OCI
// bundle binds the host folder at /workspace and starts there (the
// Kubernetes Pod's half is cmd/airlock-server's TestExportK8sPlacedGrant).
func TestExportPlacedGrant(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "proj"), 0o755); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	r := airlock(t, dir, "export", "oci", "--fs-write", "./proj:/workspace", "--out", out, "--", "/bin/true")
	if r.code != 0 {
		t.Fatalf("export oci: exit %d\n%s", r.code, r.stderr)
	}
	b, err := os.ReadFile(filepath.Join(out, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Process struct{ Cwd string }
		Mounts  []struct{ Destination, Source string }
	}
	if err := json.Unmarshal(b, &spec); err != nil {
		t.Fatal(err)
	}
	bound := false
	for _, m := range spec.Mounts {
		bound = bound || m.Destination == "/workspace" && strings.HasSuffix(m.Source, "proj")
	}
	if !bound || spec.Process.Cwd != "/workspace" {
		t.Errorf("OCI bundle: /workspace bound from proj %v, cwd %q\n%s", bound, spec.Process.Cwd, b)
	}
}
