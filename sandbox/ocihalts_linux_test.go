package sandbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// TestOCIBudgetHalts: under the OCI runtimes and gVisor the runtime's
// cgroup enforces max_memory and max_pids, and a blown one is a halt of
// the whole tree that the report names (halted_by, exit 124), as under
// airlock's own init, never an exit status the caller must interpret.
func TestOCIBudgetHalts(t *testing.T) {
	airtest.RequireRoot(t)
	airtest.RequireBinary(t, "/usr/bin/python3")
	for _, rt := range []struct{ name, isolation, runtime, bin string }{
		{"crun", sandbox.IsolationOCI, "crun", "/usr/bin/crun"},
		{"runc", sandbox.IsolationOCI, "runc", "/usr/sbin/runc"},
		{"gvisor", sandbox.IsolationGVisor, "", "/usr/bin/runsc"},
	} {
		t.Run(rt.name, func(t *testing.T) {
			airtest.RequireBinary(t, rt.bin)
			run := func(t *testing.T, spec policy.Spec, code string) *sandbox.Report {
				t.Helper()
				spec.Budget.Wall = 60 * time.Second
				p, err := policy.New(spec)
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
				defer cancel()
				rep, err := (&sandbox.Cmd{Config: sandbox.Config{Policy: p, Isolation: rt.isolation, Runtime: rt.runtime},
					Args: []string{"/usr/bin/python3", "-c", code}, CommandIsGranted: true}).Run(ctx)
				if err != nil {
					t.Fatal(err)
				}
				return rep
			}
			t.Run("memory", func(t *testing.T) {
				rep := run(t, policy.Spec{Budget: budget.Limits{Memory: 64 << 20}}, `
import time
hog = []
for _ in range(4096):
    hog.append(bytearray(1 << 20))
print("ALLOCATED 4 GiB")
time.sleep(60)`)
				if rep.HaltedBy == nil || *rep.HaltedBy != string(budget.MaxMemory) || rep.ExitCode != 124 {
					t.Errorf("4 GiB under max_memory 64 MiB: halted_by %v, exit %d, stdout %q, error %q; want max_memory and 124", rep.HaltedBy, rep.ExitCode, rep.Stdout, rep.Error)
				}
			})
			t.Run("pids", func(t *testing.T) {
				rep := run(t, policy.Spec{Budget: budget.Limits{Pids: 16}, AllowedTools: []string{"sleep"}}, `
import subprocess, time
procs = []
try:
    for _ in range(200):
        procs.append(subprocess.Popen(["sleep", "60"]))
    print("STARTED", len(procs))
except OSError as e:
    print("refused after", len(procs), e)
time.sleep(60)`)
				if rep.HaltedBy == nil || *rep.HaltedBy != string(budget.MaxPids) || rep.ExitCode != 124 {
					t.Errorf("200 processes under max_pids 16: halted_by %v, exit %d, stdout %q, error %q; want max_pids and 124", rep.HaltedBy, rep.ExitCode, rep.Stdout, rep.Error)
				}
			})
		})
	}
}
