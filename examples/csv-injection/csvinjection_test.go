//go:build linux

// Package csvinjection_test runs the csv-injection example end to end: the
// real airlock binary, the example's policy, a planted credential and a
// loopback listener playing the attacker.
package csvinjection_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// copyExample copies the example's files (not out/) into dir.
func copyExample(t *testing.T, dir string) {
	t.Helper()
	for _, name := range []string{"sales.csv", "agent_snippet.py", "policy.yaml"} {
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "out"), 0o755); err != nil {
		t.Fatal(err)
	}
}

func buildAirlock(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "airlock")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	// go test puts $GOROOT/bin first on PATH.
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/airlock-sandbox/airlock/cmd/airlock").CombinedOutput()
	if err != nil {
		t.Fatalf("go build ./cmd/airlock: %v\n%s", err, out)
	}
	return bin
}

// buildStatic builds airlock and airlock-init with CGO_ENABLED=0 into one
// folder (a microVM's initramfs holds the init and no loader) and returns
// airlock's path.
func buildStatic(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", dir+"/", "github.com/airlock-sandbox/airlock/cmd/airlock", "github.com/airlock-sandbox/airlock/cmd/airlock-init")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("CGO_ENABLED=0 go build ./cmd/airlock ./cmd/airlock-init: %v\n%s", err, out)
	}
	return filepath.Join(dir, "airlock")
}

// TestCSVInjection is the README's opening story: the honest work lands in
// out/, the credential read fails, the attacker receives nothing, the loop
// dies at max_wall, and the report lists the refused POST and the halt.
// TestCSVInjection runs the reference scenario on every backend: airlock's
// namespaces (the default), the backend without namespaces, gVisor, and
// the microVM (with a deadline that leaves room for its boot).
func TestCSVInjection(t *testing.T) {
	airtest.RequireBinary(t, "/usr/bin/python3")
	bin := buildAirlock(t)
	t.Run("namespaces", func(t *testing.T) {
		airtest.RequireUserNS(t)
		airtest.RequireLandlockABI(t, 4)
		testCSVInjection(t, bin, false, "--fs-audit")
	})
	t.Run("landlock", func(t *testing.T) {
		airtest.RequireLandlockABI(t, 6)
		testCSVInjection(t, bin, false, "--isolation", "landlock", "--allow-downgrade", "staged_writes", "--fs-audit")
	})
	t.Run("gvisor", func(t *testing.T) {
		airtest.RequireRoot(t)
		airtest.RequireBinary(t, "/usr/bin/runsc")
		testCSVInjection(t, bin, false, "--isolation", "gvisor", "--allow-downgrade", "staged_writes")
	})
	t.Run("microvm", func(t *testing.T) {
		airtest.RequireRoot(t)
		airtest.RequireBinary(t, "/usr/bin/qemu-system-x86_64")
		if m, _ := filepath.Glob("/lib/modules/*/kernel/fs/9p/9p.ko"); len(m) == 0 {
			airtest.SkipOrFail(t, "no guest kernel with the 9p modules (/lib/modules/*/kernel/fs/9p/9p.ko): apt-get install linux-image-amd64")
		}
		testCSVInjection(t, buildStatic(t), true, "--isolation", "microvm", "--allow-downgrade", "staged_writes")
	})
}

// microvmPolicy gives the example's policy a deadline that leaves room for
// the microVM's boot under software emulation, which takes from about 5 s
// on an idle 2-core host to past 15 s while other test packages load it
// (max_wall counts the boot).
func microvmPolicy(t *testing.T, dir string) {
	t.Helper()
	p := filepath.Join(dir, "policy.yaml")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(b), "max_wall: 5s", "max_wall: 40s", 1)
	if s == string(b) {
		t.Fatalf("the example's policy changed; update microvmPolicy:\n%s", b)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func testCSVInjection(t *testing.T, bin string, vm bool, flags ...string) {
	dir := t.TempDir()
	copyExample(t, dir)
	if vm {
		microvmPolicy(t, dir)
	}
	// gVisor writes in place as the container's host uid: out must be
	// writable by others, and the folders above it searchable.
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(dir, "out"), 0o777); err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(t.TempDir(), "home")
	const secret = "aws_secret_access_key = AIRLOCKTESTSECRETDONOTSEND"
	if err := os.MkdirAll(filepath.Join(home, ".aws"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".aws", "credentials"), []byte("[default]\n"+secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	evil := airtest.NewAttacker(t)
	// The attacker listens on the host's loopback, which the sandbox names
	// host.airlock.internal (its own 127.0.0.1 is direct): only the proxy
	// could reach it, and the policy does not grant it.
	attackerHost := "host.airlock.internal:" + strconv.Itoa(evil.Port())
	url := "http://" + attackerHost + "/collect"

	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	args := append(append([]string{"run"}, airtest.RootlessFlags()...), flags...)
	args = append(args, "--policy", "policy.yaml", "--env", "HOME="+home, "--env", "ATTACKER_URL="+url, "--json", "--", "python3", "../agent_snippet.py")
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	evil.Close()
	if ctx.Err() != nil {
		t.Fatalf("airlock run did not finish within 90s (max_wall is 5s, 40s under microvm)\nstderr:\n%s", stderr.String())
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 124 {
		t.Errorf("airlock run: %v, want exit status 124\nstderr:\n%s", err, stderr.String())
	}
	var rep sandbox.Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("report is not JSON: %v\n%s", err, stdout.String())
	}
	t.Logf("report:\n%s", stdout.String())

	// The task the user asked for was done.
	trend, err := os.ReadFile(filepath.Join(dir, "out", "trend.txt"))
	if err != nil || !strings.Contains(string(trend), "2024-01") || !strings.Contains(string(trend), "2024-04") {
		t.Errorf("out/trend.txt = %q, %v; want the monthly totals for 2024-01 to 2024-04", trend, err)
	}
	chart, err := os.ReadFile(filepath.Join(dir, "out", "trend.svg"))
	if err != nil || !bytes.HasPrefix(chart, []byte("<svg")) || !bytes.Contains(chart, []byte("<polyline")) {
		t.Errorf("out/trend.svg = %.80q, %v; want an SVG line chart", chart, err)
	}
	if !strings.Contains(rep.Stdout, "step trend: wrote") {
		t.Errorf("stdout lacks the trend step:\n%s", rep.Stdout)
	}

	// The injected steps failed.
	if !strings.Contains(rep.Stdout, "step credentials: FAILED") || strings.Contains(rep.Stdout, "AIRLOCKTESTSECRET") {
		t.Errorf("the credential read did not fail inside the sandbox:\n%s", rep.Stdout)
	}
	if !strings.Contains(rep.Stdout, "step exfiltrate: FAILED") {
		t.Errorf("the POST did not fail inside the sandbox:\n%s", rep.Stdout)
	}
	if n, b := evil.Got(); n != 0 || b != 0 {
		t.Errorf("the attacker's listener got %d connections and %d bytes, want none", n, b)
	}

	// And the loop died at the deadline.
	if rep.HaltedBy == nil || *rep.HaltedBy != "max_wall" || rep.ExitCode != 124 {
		t.Errorf("report halted_by = %v, exit_code = %d; want max_wall and 124", rep.HaltedBy, rep.ExitCode)
	}
	if !strings.Contains(rep.Stdout, "step loop: waiting forever") {
		t.Errorf("the loop never started, so the halt proves nothing:\n%s", rep.Stdout)
	}

	// The report explains the refusals.
	target := attackerHost
	var netDenied, fsDenied bool
	for _, d := range rep.Denials {
		if d.Layer == "net" && d.Rule == "net_hosts" && d.Target == target {
			netDenied = true
		}
		if d.Layer == "fs" {
			fsDenied = true
		}
	}
	if vm && rep.Enforcement.Backend != "microvm" {
		t.Errorf("enforcement.backend = %q, want microvm", rep.Enforcement.Backend)
	}
	if !netDenied {
		t.Errorf("report lists no net_hosts denial of %s: %+v", target, rep.Denials)
	}
	switch {
	case fsDenied:
		t.Logf("the credential read is listed as a filesystem denial")
	case strings.Contains(rep.Enforcement.FSDenials, "do not exist inside") || strings.HasPrefix(rep.Enforcement.FSDenials, "unavailable") || strings.HasPrefix(rep.Enforcement.FSDenials, "not reported"):
		// The credentials are outside every grant, so they do not exist in
		// the sandbox: the read fails with ENOENT and the report says why
		// no filesystem denial is itemized.
		t.Logf("no filesystem denial listed; enforcement.fs_denials = %q", rep.Enforcement.FSDenials)
	default:
		t.Errorf("report lists no filesystem denial and enforcement.fs_denials does not say why")
	}
}
