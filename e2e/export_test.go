//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/airtest"
)

// An exported OCI bundle, run by runc and crun with exactly the command
// lines `airlock export oci` prints: the bundle's pid 1 is airlock's init,
// so a signal to the runtime ends a workload that ignores it as pid 1
// (Python), and max_wall is enforced (exit 124) with no supervisor.

// exportedRunLines exports a bundle for argv and returns the printed
// command lines that run it, by runtime, with NAME replaced by name.
func exportedRunLines(t *testing.T, bin, dir, name string, flags []string, argv ...string) map[string]string {
	t.Helper()
	// The runtime's mapped uid must reach the bundle; t.TempDir's parent
	// is 0700. (airlock export says so when it is not.)
	if err := os.Chmod(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	args := append(append([]string{"export", "oci", "--out", dir}, flags...), "--")
	out, err := exec.Command(bin, append(args, argv...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("airlock export oci: %v\n%s", err, out)
	}
	lines := map[string]string{}
	for _, l := range strings.Split(string(out), "\n") {
		l = strings.TrimSpace(l)
		l = strings.TrimPrefix(strings.TrimPrefix(l, "run it with: "), "or: ")
		for _, rt := range []string{"runc", "crun"} {
			if (strings.HasPrefix(l, rt+" run") || strings.Contains(l, "exec "+rt+" run")) && lines[rt] == "" {
				lines[rt] = strings.ReplaceAll(l, "NAME", name)
			}
		}
	}
	if lines["runc"] == "" || lines["crun"] == "" {
		t.Fatalf("airlock export oci printed no runc and crun command lines:\n%s", out)
	}
	return lines
}

func TestExportedBundleRunsAsDocumented(t *testing.T) {
	airtest.RequireRoot(t)
	airtest.RequireBinary(t, "/usr/bin/python3")
	for _, rt := range []string{"/usr/sbin/runc", "/usr/bin/crun"} {
		airtest.RequireBinary(t, rt)
	}
	bin := mcpBinary(t)
	for _, rt := range []string{"runc", "crun"} {
		t.Run(rt, func(t *testing.T) {
			// A workload that ignores nothing but is pid 1's child: the
			// runtime's SIGTERM (from timeout) ends it at once.
			dir := t.TempDir()
			name := fmt.Sprintf("airlock-e2e-%s-%d", rt, os.Getpid())
			lines := exportedRunLines(t, bin, dir, name, nil, "/usr/bin/python3", "-c", "import time; print('started', flush=True); time.sleep(100)")
			start := time.Now()
			out, code := runShell(t, "timeout -s TERM 3 "+lines[rt])
			cleanupContainer(rt, name)
			if el := time.Since(start); el > 20*time.Second || !strings.Contains(out, "started") {
				t.Fatalf("timeout 3 %s: exit %d after %v, output %q; want it ended by the forwarded SIGTERM", lines[rt], code, el, out)
			}

			// max_wall without a supervisor: everything is killed, exit 124.
			dir = t.TempDir()
			name += "-wall"
			lines = exportedRunLines(t, bin, dir, name, []string{"--max-wall", "2s"}, "/usr/bin/python3", "-c",
				"import os, time\nif os.fork() == 0:\n    os.setsid()\n    while True: pass\nprint('started', flush=True)\nwhile True: time.sleep(1)")
			start = time.Now()
			out, code = runShell(t, lines[rt])
			cleanupContainer(rt, name)
			if el := time.Since(start); code != 124 || el > 30*time.Second || !strings.Contains(out, "max_wall 2s passed") {
				t.Fatalf("%s with max_wall 2s: exit %d after %v, output %q; want 124 and the init's note", lines[rt], code, el, out)
			}
		})
	}
}

// runShell runs a printed command line with sh, bounded, and returns its
// output and exit status.
func runShell(t *testing.T, line string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", line)
	cmd.Dir = "/"
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("sh -c %q: %v", line, err)
	}
	return out.String(), code
}

// cleanupContainer deletes a container the runtime may have left.
func cleanupContainer(rt, name string) {
	_ = exec.Command(rt, "delete", "-f", name).Run()
	_ = exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c", "umount /sys/fs/cgroup/unified 2>/dev/null; "+rt+" delete -f "+name).Run()
}
