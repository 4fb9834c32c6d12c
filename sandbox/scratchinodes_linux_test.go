package sandbox_test

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// TestAttackScratchInodes creates empty files in /tmp until the kernel
// refuses, on every backend whose /tmp is a tmpfs: an empty file costs no
// bytes, so only the tmpfs's inode cap bounds the kernel memory they pin
// (each inode and dentry is about 1 KiB of unreclaimable memory, outside
// max_memory where the memory controller does not count kernel memory).
// The cap is the plan's (spec.Mount.Inodes); the loop stops well past it
// so that a missing cap fails the test instead of filling the host.
// gVisor is left out: its tmpfs has no inode cap, but its inodes are the
// Sentry's own memory, inside the sandbox's cgroup and so max_memory.
func TestAttackScratchInodes(t *testing.T) {
	const scratch = 4 << 20 // 1024 inodes
	const limit = 1024
	code := `
import os
n = 0
try:
    for i in range(` + strconv.Itoa(4*limit) + `):
        open("/tmp/f%d" % i, "w").close()
        n += 1
except OSError as e:
    print("refused", e.errno)
print("created", n)
`
	for _, b := range scratchBackends() {
		if b.name == "gvisor" {
			continue // no inode cap: the Sentry's tmpfs inodes are its memory, inside max_memory
		}
		t.Run(b.name, func(t *testing.T) {
			b.require(t)
			rep := runOn(t, b.cfg, policy.Spec{Budget: budget.Limits{Scratch: scratch, Wall: 60 * time.Second}}, code)
			wantExit(t, rep, 0)
			_, after, ok := strings.Cut(rep.Stdout, "created ")
			n, err := strconv.Atoi(strings.TrimSpace(after))
			if !ok || err != nil {
				t.Fatalf("stdout = %q", rep.Stdout)
			}
			if n >= limit {
				t.Fatalf("created %d files in a /tmp of %d bytes, whose tmpfs should hold at most %d inodes:\n%s", n, scratch, limit, rep.Stdout)
			}
		})
	}
}

// TestAttackDevWrites writes files into /dev, which a runtime mounts as a
// tmpfs of its own outside max_scratch: nothing may be created there on any
// backend (the device nodes stay usable).
func TestAttackDevWrites(t *testing.T) {
	code := `
import os
made = []
for name in ["/dev/planted", "/dev/pts/planted", "/dev/shm/planted", "/dev/mqueue/planted"]:
    try:
        with open(name, "wb") as f:
            f.write(b"x" * (1 << 20))
        made.append(name)
    except OSError:
        pass
try:
    os.mkdir("/dev/d")
    made.append("/dev/d")
except OSError:
    pass
with open("/dev/null", "wb") as f:
    f.write(b"devices still work")
print("made", made)
`
	for _, b := range scratchBackends() {
		t.Run(b.name, func(t *testing.T) {
			b.require(t)
			rep := runOn(t, b.cfg, policy.Spec{Budget: budget.Limits{Wall: 60 * time.Second}}, code)
			wantExit(t, rep, 0)
			if b.name == "gvisor" {
				// Documented weaker: the sentry's own /dev, inside max_memory.
				if !slices.ContainsFunc(rep.Enforcement.Weaker, func(w string) bool { return strings.Contains(w, "/dev and /dev/shm") }) {
					t.Fatalf("gVisor's writable /dev is not among the weaker lines: %q\n%s", rep.Enforcement.Weaker, rep.Stdout)
				}
				return
			}
			if !strings.Contains(rep.Stdout, "made []") {
				t.Fatalf("files were created under /dev:\n%s%s", rep.Stdout, rep.Stderr)
			}
		})
	}
}

// tmpfsBackend is a backend whose /tmp and /dev are tmpfs mounts.
type tmpfsBackend struct {
	name    string
	require func(t *testing.T)
	cfg     sandbox.Config
}

func scratchBackends() []tmpfsBackend {
	return []tmpfsBackend{
		{"namespaces", requireSandbox, sandbox.Config{}},
		{"crun", func(t *testing.T) { airtest.RequireRoot(t); airtest.RequireBinary(t, "/usr/bin/crun") },
			sandbox.Config{Isolation: sandbox.IsolationOCI, Runtime: "crun"}},
		{"runc", func(t *testing.T) { airtest.RequireRoot(t); airtest.RequireBinary(t, "/usr/sbin/runc") },
			sandbox.Config{Isolation: sandbox.IsolationOCI, Runtime: "runc"}},
		{"gvisor", requireGVisor, sandbox.Config{Isolation: sandbox.IsolationGVisor}},
	}
}

// runOn runs python3 code under spec on the backend cfg names.
func runOn(t *testing.T, cfg sandbox.Config, spec policy.Spec, code string) *sandbox.Report {
	t.Helper()
	airtest.RequireBinary(t, "/usr/bin/python3")
	if os.Geteuid() != 0 && cfg.Isolation != sandbox.IsolationLandlock {
		// A normal user without a delegated cgroup.
		spec.AllowDowngrade = append(spec.AllowDowngrade, airtest.RootlessDowngrades()...)
	}
	p, err := policy.New(spec)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Policy = p
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	rep, err := (&sandbox.Cmd{Config: cfg, Args: []string{"/usr/bin/python3", "-c", code}, CommandIsGranted: true}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}
