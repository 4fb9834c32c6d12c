//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"sigs.k8s.io/yaml"

	"github.com/airlock-sandbox/airlock/internal/airtest"
)

// Issue 16: the egress proxy image that `airlock export k8s` deploys is
// built from the repository with exactly the commands that
// packaging/egress-proxy/README.md documents, it is the image the export
// names by default, and it runs the exported Deployment's command as the
// Deployment runs it: as uid 65532, read-only, with no capabilities.

// readmeBlocks returns the lines of each ```sh block of the README below
// heading, in order.
func readmeBlocks(t *testing.T, root, heading string) [][]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "packaging/egress-proxy/README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var blocks [][]string
	in, under := false, false
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		l := sc.Text()
		switch {
		case strings.HasPrefix(l, "## "):
			under = l == "## "+heading
		case under && l == "```sh":
			in = true
			blocks = append(blocks, nil)
		case in && l == "```":
			in = false
		case in:
			blocks[len(blocks)-1] = append(blocks[len(blocks)-1], l)
		}
	}
	if len(blocks) == 0 {
		t.Fatalf("packaging/egress-proxy/README.md has no sh block under ## %s", heading)
	}
	return blocks
}

// podmanHostFlags are what `podman run` needs on this host and not on a
// plain one: no cgroups (crun and the hybrid layout, see podman), and
// rlimits crun may set. podman's defaults (1048576) exceed the hard limits
// here, and crun then fails with EPERM; the values are those of
// startContainer, capped by the test's own hard limits.
func podmanHostFlags(t *testing.T) []string {
	t.Helper()
	flags := []string{"--cgroups=disabled"}
	for _, l := range []struct {
		name string
		res  int
	}{{"nofile", unix.RLIMIT_NOFILE}, {"nproc", unix.RLIMIT_NPROC}} {
		var rl unix.Rlimit
		if err := unix.Getrlimit(l.res, &rl); err != nil {
			t.Fatalf("getrlimit %s: %v", l.name, err)
		}
		n := min(rl.Max, 20000)
		flags = append(flags, "--ulimit", fmt.Sprintf("%s=%d:%d", l.name, n, n))
	}
	return flags
}

func TestK8sProxyImage(t *testing.T) {
	airtest.RequireRoot(t) // rootful podman: the test host's storage and the unshare wrapper
	if _, err := exec.LookPath("podman"); err != nil {
		airtest.SkipOrFail(t, "podman is not on PATH (%v): the test builds and runs the egress proxy image with it", err)
	}
	airtest.RequireBinary(t, "/usr/bin/unshare")
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	// Build: the README's commands, verbatim, from the checkout's root.
	bin := filepath.Join(root, "packaging/egress-proxy/airlock")
	if _, err := os.Lstat(bin); errors.Is(err, os.ErrNotExist) {
		t.Cleanup(func() { os.Remove(bin) }) // leave a binary someone built there
	}
	blocks := readmeBlocks(t, root, "Build")
	tag := ""
	for _, line := range blocks[0] {
		cmd := exec.CommandContext(ctx, "sh", "-c", line)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("documented command %q: %v\n%s", line, err, out)
		}
		if f := strings.Fields(line); len(f) >= 4 && f[0] == "podman" && f[1] == "build" && f[2] == "-t" {
			tag = f[3]
		}
	}
	if tag == "" {
		t.Fatalf("the README's build block has no `podman build -t NAME` line: %q", blocks[0])
	}
	image := "localhost/" + tag + ":latest"
	static, err := elf.Open(bin)
	if err != nil {
		t.Fatalf("the built binary: %v", err)
	}
	for _, p := range static.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s asks for a dynamic loader: the scratch image has none (build with CGO_ENABLED=0)", bin)
		}
	}
	static.Close()
	out, err := podman(ctx, "image", "inspect", "--format", "{{.Config.User}}|{{json .Config.Entrypoint}}|{{.Os}}", image).CombinedOutput()
	if got := strings.TrimSpace(string(out)); err != nil || got != `65532:65532|["/usr/local/bin/airlock","egress-proxy"]|linux` {
		t.Fatalf("podman image inspect %s = %q, %v; want user 65532:65532 and entrypoint airlock egress-proxy", image, got, err)
	}

	// The README's check: the image starts and prints the proxy's usage.
	if len(blocks) < 2 || len(blocks[1]) != 1 {
		t.Fatalf("the README's Build section has no one-line check block after the build: %q", blocks)
	}
	check := strings.Fields(blocks[1][0])
	if len(check) < 3 || check[0] != "podman" || check[1] != "run" {
		t.Fatalf("the README's check %q is not a podman run", blocks[1][0])
	}
	args := append(append([]string{"run"}, podmanHostFlags(t)...), check[2:]...)
	out, err = podman(ctx, args...).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "usage: airlock egress-proxy --config FILE") {
		t.Fatalf("podman %s: %v\n%s\nwant exit 0 (--help) and the proxy's usage", strings.Join(args, " "), err, out)
	}

	// The export names this image and runs it as the Deployment says. The
	// image holds airlock alone; the export is airlock-server's, next to
	// the airlock under test.
	dir := t.TempDir()
	pol := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(pol, []byte("version: 1\nnet_hosts: [example.org]\nbudget: {max_wall: 3s}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = exec.CommandContext(ctx, mcpBinary(t), "export", "k8s", "--policy", pol, "--image", "registry.example/agent:1",
		"--proxy-cluster-ip", "10.96.0.50", "--out", filepath.Join(dir, "k8s"), "--", "/bin/sh", "-c", "true").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "image "+image+" (--proxy-image)") {
		t.Fatalf("airlock export k8s: %v\n%s\nwant it to name %s as a parameter", err, out, image)
	}
	dep, policyJSON := exportedProxy(t, filepath.Join(dir, "k8s", "airlock.yaml"))
	if dep.image != image {
		t.Fatalf("the exported Deployment runs %q, want %q (what the README builds)", dep.image, image)
	}
	cfg := filepath.Join(dir, "config")
	if err := os.Mkdir(cfg, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfg, "policy.json"), []byte(policyJSON), 0o644); err != nil {
		t.Fatal(err)
	}
	entry, err := json.Marshal(dep.command)
	if err != nil {
		t.Fatal(err)
	}
	args = append(append([]string{"run", "--rm", "--pull=never", "--network=none"}, podmanHostFlags(t)...),
		"--read-only", "--cap-drop=all", "--security-opt=no-new-privileges", "--user", fmt.Sprintf("%d:%d", dep.uid, dep.uid),
		"-v", cfg+":"+dep.mountPath+":ro", "--entrypoint", string(entry), image)
	out, err = podman(ctx, args...).CombinedOutput()
	for _, want := range []string{"listening on [::]:3128", "listening on [::]:1080", "max_wall reached"} {
		if err != nil || !strings.Contains(string(out), want) {
			t.Fatalf("podman %s: %v\n%s\nwant %q: the Deployment's command serves until max_wall", strings.Join(args, " "), err, out, want)
		}
	}
}

// proxyDeployment is what the test takes from the exported Deployment.
type proxyDeployment struct {
	image, mountPath string
	command          []string
	uid              int64
}

// exportedProxy reads the proxy Deployment and the policy of its
// ConfigMap from an exported manifest, and checks that it opens no DNS.
func exportedProxy(t *testing.T, file string) (proxyDeployment, string) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var dep proxyDeployment
	var policyJSON string
	for _, doc := range bytes.Split(data, []byte("\n---\n"))[1:] {
		var obj struct {
			Kind string            `json:"kind"`
			Data map[string]string `json:"data"`
			Spec struct {
				Egress []struct {
					Ports []struct {
						Port int `json:"port"`
					} `json:"ports"`
				} `json:"egress"`
				Template struct {
					Spec struct {
						SecurityContext struct {
							RunAsUser int64 `json:"runAsUser"`
						} `json:"securityContext"`
						Containers []struct {
							Image        string   `json:"image"`
							Command      []string `json:"command"`
							VolumeMounts []struct {
								MountPath string `json:"mountPath"`
							} `json:"volumeMounts"`
						} `json:"containers"`
					} `json:"spec"`
				} `json:"template"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		switch obj.Kind {
		case "Deployment":
			ps := obj.Spec.Template.Spec
			if len(ps.Containers) != 1 || len(ps.Containers[0].VolumeMounts) != 1 {
				t.Fatalf("%s: the proxy Deployment has %d containers, want 1 with the policy mounted", file, len(ps.Containers))
			}
			c := ps.Containers[0]
			dep = proxyDeployment{image: c.Image, command: c.Command, uid: ps.SecurityContext.RunAsUser, mountPath: c.VolumeMounts[0].MountPath}
		case "ConfigMap":
			policyJSON = obj.Data["policy.json"]
		case "NetworkPolicy":
			for _, r := range obj.Spec.Egress {
				for _, p := range r.Ports {
					if p.Port == 53 {
						t.Errorf("%s: a NetworkPolicy allows port 53 without --proxy-dns", file)
					}
				}
			}
		}
	}
	if dep.image == "" || dep.uid == 0 || policyJSON == "" {
		t.Fatalf("%s: no proxy Deployment running as non-root with a policy ConfigMap", file)
	}
	return dep, policyJSON
}
