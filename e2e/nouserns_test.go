//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/airtest"
)

const maxUserNS = "/proc/sys/user/max_user_namespaces"

// TestHostWithoutUserNamespaces: with user.max_user_namespaces=0, as root
// and as an unprivileged user, airlock refuses unless the policy accepts
// the namespaces downgrade, and then runs the backend without namespaces:
// secrets and writes outside the grants, a listener on the host's
// loopback, a denied tool, the deadline and the output cap hold, and the
// report names the backend and its weaker points.
//
// The user.* limits are per user namespace (ucounts), and setting them
// needs CAP_SYS_RESOURCE over the namespace, which this VM withholds from
// root in the initial one. So each airlock run gets a user namespace of
// its own, mapping the host's uids 0 to 65535 onto themselves (no
// CAP_SYS_ADMIN over the host: airlock takes the unprivileged path), whose
// max_user_namespaces the test sets to 0 before airlock starts: the same
// kernel check (ENOSPC from clone) as the host's sysctl, without changing
// the machine for the tests that run beside it.
func TestHostWithoutUserNamespaces(t *testing.T) {
	airtest.RequireRoot(t)
	airtest.RequireLandlockABI(t, 6)
	airtest.RequireBinary(t, "/usr/bin/python3")
	airtest.RequireBinary(t, "/usr/bin/setpriv")
	bin := containerBinaries(t)
	if out, err := inNoUserNS(context.Background(), "unshare", "--user", "true").CombinedOutput(); err == nil || !strings.Contains(string(out), "No space left") {
		t.Fatalf("unshare --user with max_user_namespaces=0: %v %s; want ENOSPC", err, out)
	}
	dir := t.TempDir()
	for _, d := range []string{"data", "out"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o777); err != nil {
			t.Fatal(err)
		}
	}
	// uid 1000 must reach the grants: t.TempDir's parent is 0700.
	if err := os.Chmod(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{dir, filepath.Join(dir, "out")} {
		if err := os.Chmod(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	secret := filepath.Join(dir, "secret.txt")
	for p, text := range map[string]string{secret: containerSecret + "\n", filepath.Join(dir, "data", "public.txt"): "public data\n"} {
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var hits atomic.Int32
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			hits.Add(1)
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	for _, user := range []string{"root", "user"} {
		t.Run(user, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			h := hostRunner{bin: filepath.Join(bin, "airlock"), user: user}
			testHostWithoutUserNS(t, ctx, h, dir, port)
		})
	}
	if hits.Load() != 0 {
		t.Fatalf("the host's loopback listener got %d connections from sandboxes", hits.Load())
	}
}

// inNoUserNS runs argv in a new user namespace mapping uids and gids 0 to
// 65535 onto the host's, with max_user_namespaces set to 0 inside it.
func inNoUserNS(ctx context.Context, argv ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "/bin/sh", append([]string{"-c", "echo 0 > " + maxUserNS + " && exec \"$@\"", "sh"}, argv...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:                 syscall.CLONE_NEWUSER,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 65536}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 65536}},
		GidMappingsEnableSetgroups: true,
	}
	return cmd
}

// hostRunner runs airlock on the host, as root or as uid 1000, where no
// user namespace can be created.
type hostRunner struct {
	bin, user string
}

func (h hostRunner) run(t *testing.T, ctx context.Context, flags []string, argv ...string) containerReport {
	t.Helper()
	args := append(append([]string{h.bin, "run", "--json"}, flags...), "--")
	args = append(args, argv...)
	if h.user == "user" {
		args = append([]string{"setpriv", "--reuid=1000", "--regid=1000", "--clear-groups", "--"}, args...)
	}
	cmd := inNoUserNS(ctx, args...)
	cmd.Dir = "/"
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	_ = cmd.Run() // the exit status is the command's
	return parseReport(t, out.Bytes(), argv)
}

func testHostWithoutUserNS(t *testing.T, ctx context.Context, h hostRunner, dir string, port int) {
	base := slices.Clone(cgroupDowngrades)
	rep := h.run(t, ctx, base, "/bin/sh", "-c", "echo started")
	if rep.ExitCode != 125 || strings.Contains(rep.Stdout, "started") || !strings.Contains(rep.Error, "allow_downgrade") || !strings.Contains(rep.Error, "namespaces") {
		t.Errorf("without allow_downgrade namespaces: exit %d, stdout %q, error %q; want 125, nothing started, the fix named", rep.ExitCode, rep.Stdout, rep.Error)
	}
	downgrades := append(base, "--allow-downgrade", "namespaces", "--allow-downgrade", "staged_writes")
	flags := append(slices.Clone(downgrades), "--tool", "cat", "--tool", "python3")
	rep = h.run(t, ctx, flags, "/bin/sh", "-c", "echo hello")
	e := rep.Enforcement
	if rep.ExitCode != 0 || rep.Stdout != "hello\n" || e.Backend != "landlock" || e.Namespaces || e.Landlock < 6 || !e.Seccomp ||
		!slices.Contains(e.Downgrades, "namespaces") || !slices.ContainsFunc(e.Weaker, func(w string) bool { return strings.Contains(w, "max_user_namespaces") }) ||
		!strings.HasPrefix(e.FSDenials, "off") { // the fallback keeps what the report says of filesystem denials
		t.Fatalf("positive control: exit %d, stdout %q, error %q, enforcement %+v", rep.ExitCode, rep.Stdout, rep.Error, e)
	}
	t.Run("secret-outside-grants", func(t *testing.T) {
		rep := h.run(t, ctx, append(flags, "--fs-read", filepath.Join(dir, "data")), "/bin/sh", "-c",
			fmt.Sprintf("cat %s/data/public.txt; cat %s; cat /etc/shadow; cat /proc/1/root%s", dir, filepath.Join(dir, "secret.txt"), filepath.Join(dir, "secret.txt")))
		if strings.Contains(rep.Stdout, containerSecret) || strings.Contains(rep.Stdout, "root:") || !strings.Contains(rep.Stdout, "public data") {
			t.Errorf("stdout %q, error %q: want the granted file and no secret", rep.Stdout, rep.Error)
		}
	})
	t.Run("writes-outside-grants", func(t *testing.T) {
		out := filepath.Join(dir, "out")
		evil := filepath.Join(dir, "evil-"+h.user)
		rep := h.run(t, ctx, append(flags, "--fs-write", out), "/bin/sh", "-c",
			fmt.Sprintf("echo inside > %s/ok-%s.txt; echo evil > %s; echo evil > /tmp/airlock-evil-%s; echo done", out, h.user, evil, h.user))
		if rep.ExitCode != 0 || rep.Stdout != "done\n" {
			t.Errorf("exit %d, stdout %q, stderr %q, error %q", rep.ExitCode, rep.Stdout, rep.Stderr, rep.Error)
		}
		if b, err := os.ReadFile(filepath.Join(out, "ok-"+h.user+".txt")); err != nil || string(b) != "inside\n" {
			t.Errorf("the granted write: %q, %v", b, err)
		}
		for _, p := range []string{evil, "/tmp/airlock-evil-" + h.user} {
			if _, err := os.Stat(p); err == nil {
				t.Errorf("%s was written outside the grants", p)
				os.Remove(p)
			}
		}
	})
	t.Run("host-loopback", func(t *testing.T) {
		rep := h.run(t, ctx, flags, "python3", "-c", fmt.Sprintf(`import socket
try:
    socket.create_connection(("127.0.0.1", %d), timeout=3)
    print("CONNECTED")
except OSError as e:
    print("refused", e)`, port))
		if strings.Contains(rep.Stdout, "CONNECTED") || !strings.Contains(rep.Stdout, "refused") {
			t.Errorf("the sandbox reached the host's loopback: %q %q", rep.Stdout, rep.Stderr)
		}
	})
	t.Run("denied-tool", func(t *testing.T) {
		rep := h.run(t, ctx, downgrades, "/bin/sh", "-c", "cat /etc/hostname; echo exit $?")
		if !strings.Contains(rep.Stdout, "exit 126") {
			t.Errorf("cat ran without being allowed: stdout %q stderr %q error %q", rep.Stdout, rep.Stderr, rep.Error)
		}
	})
	testBudgetsHalt(t, ctx, h.run, flags)
}
