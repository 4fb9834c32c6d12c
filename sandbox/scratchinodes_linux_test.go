package sandbox_test

import (
	"context"
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
// gVisor is not here: its tmpfs has no inode cap, but its inodes are the
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
	backends := []struct {
		name    string
		require func(t *testing.T)
		cfg     sandbox.Config
	}{
		{"namespaces", requireSandbox, sandbox.Config{}},
		{"crun", func(t *testing.T) { airtest.RequireRoot(t); airtest.RequireBinary(t, "/usr/bin/crun") },
			sandbox.Config{Isolation: sandbox.IsolationOCI, Runtime: "crun"}},
		{"runc", func(t *testing.T) { airtest.RequireRoot(t); airtest.RequireBinary(t, "/usr/sbin/runc") },
			sandbox.Config{Isolation: sandbox.IsolationOCI, Runtime: "runc"}},
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			b.require(t)
			airtest.RequireBinary(t, "/usr/bin/python3")
			p, err := policy.New(policy.Spec{Budget: budget.Limits{Scratch: scratch, Wall: 60 * time.Second}})
			if err != nil {
				t.Fatal(err)
			}
			cfg := b.cfg
			cfg.Policy = p
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			rep, err := (&sandbox.Cmd{Config: cfg, Args: []string{"/usr/bin/python3", "-c", code}, CommandIsGranted: true}).Run(ctx)
			if err != nil {
				t.Fatal(err)
			}
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
