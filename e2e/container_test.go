//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/airtest"
)

// Inside containers (issue 15): airlock runs in a podman container as root
// (uid 0 without CAP_SYS_ADMIN in the initial user namespace) and as a
// non-root user, where the kernel refuses the sandbox a /proc of its own
// because the container masks parts of its /proc. With allow_downgrade
// proc the sandbox sees the container's /proc read-only; everything else
// holds as on the host, and the report says what is weaker.

// A container's secret: a process of the container holds it in its
// environment, a file outside every grant holds it on disk.
const containerSecret = "airlock-e2e-container-secret-7f3a"

// podman runs podman in a private mount namespace without the cgroup2
// mount crun refuses on this host's hybrid layout (DESIGN §7).
func podman(ctx context.Context, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "unshare", append([]string{"-m", "--propagation", "private", "sh", "-c",
		`umount /sys/fs/cgroup/unified 2>/dev/null; exec podman "$@"`, "sh"}, args...)...)
}

// containerRoot builds a root filesystem for podman from the host's /usr
// (bound read-only when the container starts): users, the mountpoints the
// tests use, a secret outside every grant and a file that is granted.
func containerRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{"usr", "etc", "tmp", "proc", "sys", "dev", "root", "run", "var/tmp", "opt/airlock", "work/out", "data", "home/user"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range []string{"bin", "lib", "lib64", "sbin"} {
		if err := os.Symlink("usr/"+l, filepath.Join(root, l)); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		"etc/passwd":      "root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/home/user:/bin/sh\n",
		"etc/group":       "root:x:0:\nuser:x:1000:\n",
		"secret.txt":      containerSecret + "\n",
		"data/public.txt": "public data\n",
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(root, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"tmp", "var/tmp", "work", "work/out"} {
		if err := os.Chmod(filepath.Join(root, d), 0o1777); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	return root
}

// containerBinaries builds airlock and airlock-init into a folder the
// container's users can read.
func containerBinaries(t *testing.T) string {
	t.Helper()
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "build", "-o", dir, "./cmd/airlock", "./cmd/airlock-init")
	build.Dir = filepath.Dir(strings.TrimSpace(string(gomod)))
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return dir
}

// container is a running podman container with airlock in it.
type container struct {
	name, user string
	seccomp    string // a seccomp profile for podman, "" for podman's default
}

// startContainer starts a container from root as user ("" for root) whose
// main process keeps two helpers alive: a process with the secret in its
// environment and an HTTP server on the container's loopback.
func startContainer(t *testing.T, ctx context.Context, root, bin, user, seccompProfile string) *container {
	t.Helper()
	c := &container{name: fmt.Sprintf("airlock-e2e-%d-%s", os.Getpid(), map[string]string{"": "root"}[user]+user), user: user, seccomp: seccompProfile}
	if seccompProfile != "" {
		c.name += "-nouserns"
	}
	c.name = strings.ReplaceAll(c.name, ":", "-")
	args := []string{"run", "-d", "--rm", "--name", c.name, "--cgroups=disabled", "--network=none",
		"--ulimit", "nofile=20000:20000", "--ulimit", "nproc=20000:20000",
		"-v", "/usr:/usr:ro", "-v", bin + ":/opt/airlock:ro"}
	if user != "" {
		args = append(args, "--user", user)
	}
	if seccompProfile != "" {
		args = append(args, "--security-opt", "seccomp="+seccompProfile)
	}
	args = append(args, "--rootfs", root, "/bin/sh", "-c",
		"AIRLOCK_E2E_SECRET="+containerSecret+" sleep 1000 & python3 -m http.server --bind 127.0.0.1 18765 >/dev/null 2>&1 & wait")
	if out, err := podman(ctx, args...).CombinedOutput(); err != nil {
		t.Fatalf("podman run: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = podman(ctx, "rm", "-f", "-t", "0", c.name).Run() // --rm removes it too
	})
	// The helpers are up when the server answers.
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, err := c.exec(ctx, "python3", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:18765/', timeout=2)")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the container's helpers did not start: %v\n%s", err, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return c
}

// exec runs argv in the container as its user.
func (c *container) exec(ctx context.Context, argv ...string) ([]byte, error) {
	args := []string{"exec"}
	if c.user != "" {
		args = append(args, "--user", c.user)
	}
	args = append(append(args, c.name), argv...)
	var out bytes.Buffer
	cmd := podman(ctx, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}

// containerReport is what the tests read of a report.
type containerReport struct {
	ExitCode    int     `json:"exit_code"`
	HaltedBy    *string `json:"halted_by"`
	Stdout      string  `json:"stdout"`
	Stderr      string  `json:"stderr"`
	Error       string  `json:"error"`
	Enforcement struct {
		Backend    string   `json:"backend"`
		Namespaces bool     `json:"namespaces"`
		Landlock   int      `json:"landlock_abi"`
		Seccomp    bool     `json:"seccomp"`
		Downgrades []string `json:"downgrades"`
		Weaker     []string `json:"weaker"`
		FSDenials  string   `json:"fs_denials"`
	} `json:"enforcement"`
}

// run runs `airlock run --json FLAGS -- ARGV` in the container.
func (c *container) run(t *testing.T, ctx context.Context, flags []string, argv ...string) containerReport {
	t.Helper()
	args := append(append([]string{"/opt/airlock/airlock", "run", "--json"}, flags...), "--")
	out, _ := c.exec(ctx, append(args, argv...)...) // the exit status is the command's
	return parseReport(t, out, argv)
}

func TestInsideContainer(t *testing.T) {
	airtest.RequireRoot(t) // podman with --rootfs runs rootful here
	airtest.RequireBinary(t, "/usr/bin/podman")
	airtest.RequireBinary(t, "/usr/bin/python3")
	airtest.RequireBinary(t, "/usr/bin/unshare")
	airtest.RequireLandlockABI(t, 4)
	bin := containerBinaries(t)
	for _, user := range []string{"", "1000:1000"} {
		t.Run(map[string]string{"": "root", "1000:1000": "user"}[user], func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			c := startContainer(t, ctx, containerRoot(t), bin, user, "")
			testContainerDoctor(t, ctx, c)
			testContainerRefusesSilentDowngrade(t, ctx, c, "proc")
			testContainerSandbox(t, ctx, c, procMode)
		})
	}
}

// noUsernsProfile is a seccomp profile for podman that refuses to create
// user namespaces, as Docker's default does without CAP_SYS_ADMIN:
// unshare and clone with CLONE_NEWUSER fail with EPERM, clone3 with ENOSYS
// (its flags are out of a filter's reach), everything else is allowed.
const noUsernsProfile = `{
  "defaultAction": "SCMP_ACT_ALLOW",
  "syscalls": [
    {"names": ["unshare"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1},
    {"names": ["clone"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1,
     "args": [{"index": 0, "value": 268435456, "valueTwo": 268435456, "op": "SCMP_CMP_MASKED_EQ"}]},
    {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": 38}
  ]
}`

// TestInsideContainerWithoutUserNamespaces: in a container whose seccomp
// profile refuses user namespaces, as root and as a user, airlock refuses
// unless the policy accepts the namespaces downgrade, and then runs the
// backend without namespaces, where the same attacks fail.
func TestInsideContainerWithoutUserNamespaces(t *testing.T) {
	airtest.RequireRoot(t)
	airtest.RequireBinary(t, "/usr/bin/podman")
	airtest.RequireBinary(t, "/usr/bin/python3")
	airtest.RequireBinary(t, "/usr/bin/unshare")
	airtest.RequireLandlockABI(t, 6)
	bin := containerBinaries(t)
	profile := filepath.Join(t.TempDir(), "no-userns.json")
	if err := os.WriteFile(profile, []byte(noUsernsProfile), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, user := range []string{"", "1000:1000"} {
		t.Run(map[string]string{"": "root", "1000:1000": "user"}[user], func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			c := startContainer(t, ctx, containerRoot(t), bin, user, profile)
			if out, err := c.exec(ctx, "unshare", "--user", "true"); err == nil {
				t.Fatalf("the container's seccomp profile let unshare --user run: %s", out)
			}
			testContainerRefusesSilentDowngrade(t, ctx, c, "namespaces")
			testContainerSandbox(t, ctx, c, noNamespacesMode)
		})
	}
}

// testContainerDoctor: doctor inside the container names the refused
// /proc and its downgrade, and does not take root in a container for root
// on the host.
func testContainerDoctor(t *testing.T, ctx context.Context, c *container) {
	out, _ := c.exec(ctx, "/opt/airlock/airlock", "doctor", "--json") // exit 1: not fully enforceable here
	var r struct {
		Checks []struct {
			Name   string `json:"name"`
			OK     bool   `json:"ok"`
			Detail string `json:"detail"`
		} `json:"checks"`
		Layers []struct {
			Name, Verdict, Downgrade string
		} `json:"layers"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("airlock doctor --json in the container: %v\n%s", err, out)
	}
	proc := slices.IndexFunc(r.Layers, func(l struct{ Name, Verdict, Downgrade string }) bool { return l.Name == "proc" })
	if proc < 0 || r.Layers[proc].Verdict != "refused" || r.Layers[proc].Downgrade != "proc" {
		t.Errorf("doctor in the container: proc layer = %+v; want refused unless allow_downgrade proc\n%s", r.Layers, out)
	}
	for _, ch := range r.Checks {
		if ch.Name == "root" && c.user == "" && !strings.Contains(ch.Detail, "root in a container") {
			t.Errorf("doctor as root in the container says %q; want root in a container", ch.Detail)
		}
	}
}

// cgroupDowngrades are what a container without delegated cgroups needs.
var cgroupDowngrades = []string{"--allow-downgrade", "max_memory", "--allow-downgrade", "max_pids", "--allow-downgrade", "max_cpu"}

// testContainerRefusesSilentDowngrade: without allow_downgrade d the
// run is refused with the reason and the fix, and nothing starts.
func testContainerRefusesSilentDowngrade(t *testing.T, ctx context.Context, c *container, d string) {
	rep := c.run(t, ctx, cgroupDowngrades, "/bin/sh", "-c", "echo started")
	if rep.ExitCode != 125 || strings.Contains(rep.Stdout, "started") || !strings.Contains(rep.Error, "allow_downgrade") || !strings.Contains(rep.Error, d) {
		t.Errorf("without allow_downgrade %s: exit %d, stdout %q, error %q; want 125, nothing started, the fix named", d, rep.ExitCode, rep.Stdout, rep.Error)
	}
}

// containerMode is what differs between the backends a container gets.
type containerMode struct {
	downgrades []string // beyond cgroupDowngrades
	backend    string
	namespaces bool
	weaker     string // a prefix one of enforcement.weaker has
	// deniedTool is the shell's exit status for a tool outside
	// allowed_tools: 127 where it is absent (mount namespace), 126 where
	// Landlock refuses to execute it.
	deniedTool string
}

var (
	procMode         = containerMode{downgrades: []string{"proc"}, backend: "namespaces", namespaces: true, weaker: "proc: ", deniedTool: "exit 127"}
	noNamespacesMode = containerMode{downgrades: []string{"namespaces", "staged_writes"}, backend: "landlock", weaker: "namespaces: ", deniedTool: "exit 126"}
)

// testContainerSandbox runs the attacks that apply inside a container, and
// their positive controls, with allow_downgrade proc.
func testContainerSandbox(t *testing.T, ctx context.Context, c *container, mode containerMode) {
	downgrades := slices.Clone(cgroupDowngrades)
	for _, d := range mode.downgrades {
		downgrades = append(downgrades, "--allow-downgrade", d)
	}
	flags := append(slices.Clone(downgrades), "--tool", "cat", "--tool", "python3")
	// The report names the backend and what is weaker.
	rep := c.run(t, ctx, flags, "/bin/sh", "-c", "echo hello")
	e := rep.Enforcement
	if rep.ExitCode != 0 || rep.Stdout != "hello\n" || e.Backend != mode.backend || e.Namespaces != mode.namespaces || e.Landlock == 0 || !e.Seccomp ||
		!slices.Contains(e.Downgrades, mode.downgrades[0]) || !slices.ContainsFunc(e.Weaker, func(w string) bool { return strings.HasPrefix(w, mode.weaker) }) {
		t.Fatalf("positive control: exit %d, stdout %q, error %q, enforcement %+v", rep.ExitCode, rep.Stdout, rep.Error, e)
	}

	t.Run("secret-outside-grants", func(t *testing.T) {
		rep := c.run(t, ctx, append(flags, "--fs-read", "/data/public.txt"), "/bin/sh", "-c", "cat /data/public.txt; cat /secret.txt; cat /proc/1/root/secret.txt")
		if strings.Contains(rep.Stdout, containerSecret) || !strings.Contains(rep.Stdout, "public data") {
			t.Errorf("stdout %q: want the granted file and not the secret", rep.Stdout)
		}
	})
	t.Run("container-process-memory-and-environment", func(t *testing.T) {
		// /proc lists the container's processes; their environment,
		// memory, fds and root stay out of reach.
		// (The numbers of their open fds can be listed: the kernel checks
		// only the owner for that, and the report says so.)
		code := `import os, glob
own = "/proc/" + os.readlink("/proc/self")
seen = 0
for d in glob.glob("/proc/[0-9]*"):
    if d == own:
        continue
    seen += 1
    for f in ("environ", "mem", "maps", "fd/0", "fd/1", "root/secret.txt", "cwd/secret.txt"):
        try:
            p = d + "/" + f
            data = os.readlink(p) if f.startswith("fd/") else open(p, "rb").read(65536)
            print("READ", p, repr(data)[:200])
        except OSError:
            pass
print("processes", seen)`
		rep := c.run(t, ctx, flags, "python3", "-c", code)
		if strings.Contains(rep.Stdout, containerSecret) || strings.Contains(rep.Stdout, "READ ") || !strings.Contains(rep.Stdout, "processes") ||
			strings.Contains(rep.Stdout, "processes 0\n") {
			t.Errorf("another process's environment, memory, fds or root was read (or /proc listed none):\n%s\nstderr: %s", rep.Stdout, rep.Stderr)
		}
		if out, err := c.exec(ctx, "python3", "-c", fmt.Sprintf(`import glob
alive = [p for p in glob.glob("/proc/[0-9]*/environ") if b"%s" in open(p, "rb").read()]
assert alive, "the secret-holding process is gone"`, containerSecret)); err != nil {
			t.Errorf("after the sandbox ran, the container's secret-holding process: %v\n%s", err, out)
		}
	})
	t.Run("writes-outside-grants", func(t *testing.T) {
		rep := c.run(t, ctx, append(flags, "--fs-write", "/work/out"), "/bin/sh", "-c", "echo inside > /work/out/ok.txt; echo evil > /work/evil.txt; echo evil > /data/evil.txt; echo done")
		if rep.ExitCode != 0 || rep.Stdout != "done\n" {
			t.Errorf("exit %d, stdout %q, stderr %q", rep.ExitCode, rep.Stdout, rep.Stderr)
		}
		if out, err := c.exec(ctx, "cat", "/work/out/ok.txt"); err != nil || string(out) != "inside\n" {
			t.Errorf("the granted write did not reach the container: %q, %v", out, err)
		}
		for _, p := range []string{"/work/evil.txt", "/data/evil.txt"} {
			if out, err := c.exec(ctx, "cat", p); err == nil {
				t.Errorf("%s was written outside the grants: %q", p, out)
			}
		}
	})
	t.Run("container-loopback", func(t *testing.T) {
		rep := c.run(t, ctx, flags, "python3", "-c", `import socket
try:
    socket.create_connection(("127.0.0.1", 18765), timeout=3)
    print("CONNECTED")
except OSError as e:
    print("refused", e)`)
		if strings.Contains(rep.Stdout, "CONNECTED") || !strings.Contains(rep.Stdout, "refused") {
			t.Errorf("the sandbox reached the container's loopback server: %q %q", rep.Stdout, rep.Stderr)
		}
	})
	t.Run("denied-tool", func(t *testing.T) {
		rep := c.run(t, ctx, downgrades, "/bin/sh", "-c", "cat /etc/passwd; echo exit $?")
		if strings.Contains(rep.Stdout, "root:") || !strings.Contains(rep.Stdout, mode.deniedTool) {
			t.Errorf("cat ran without being allowed: stdout %q stderr %q error %q", rep.Stdout, rep.Stderr, rep.Error)
		}
	})
	testBudgetsHalt(t, ctx, c.run, flags)
}

// reportRunner runs `airlock run --json FLAGS -- ARGV` somewhere and
// returns its report.
type reportRunner func(t *testing.T, ctx context.Context, flags []string, argv ...string) containerReport

// testBudgetsHalt: the deadline halts a busy loop with a background copy
// of itself, and the output cap halts a flood at 1 KiB.
func testBudgetsHalt(t *testing.T, ctx context.Context, run reportRunner, flags []string) {
	t.Run("deadline", func(t *testing.T) {
		start := time.Now()
		rep := run(t, ctx, append(slices.Clone(flags), "--max-wall", "2s"), "/bin/sh", "-c", "(setsid sh -c 'while :; do :; done' &) ; while :; do :; done")
		if rep.HaltedBy == nil || *rep.HaltedBy != "max_wall" || rep.ExitCode != 124 || time.Since(start) > time.Minute {
			t.Errorf("halted_by %v, exit %d after %v; want max_wall, 124", rep.HaltedBy, rep.ExitCode, time.Since(start))
		}
	})
	t.Run("output-cap", func(t *testing.T) {
		rep := run(t, ctx, append(slices.Clone(flags), "--max-output", "1KiB"), "/bin/sh", "-c", "while :; do echo yyyyyyyyyyyyyyyy; done")
		if rep.HaltedBy == nil || *rep.HaltedBy != "max_output_bytes" || len(rep.Stdout)+len(rep.Stderr) > 1024 {
			t.Errorf("halted_by %v, %d bytes of output; want max_output_bytes and at most 1 KiB", rep.HaltedBy, len(rep.Stdout)+len(rep.Stderr))
		}
	})
}

// parseReport reads the report airlock run --json printed in out.
func parseReport(t *testing.T, out []byte, argv []string) containerReport {
	t.Helper()
	var rep containerReport
	start := bytes.IndexByte(out, '{')
	if start < 0 || json.Unmarshal(out[start:], &rep) != nil {
		t.Fatalf("airlock run %q printed no report:\n%s", argv, out)
	}
	return rep
}
