package sandbox_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// concurrentRuns is how many sandboxes TestConcurrentRuns starts at once.
const concurrentRuns = 100

// TestConcurrentRuns: 100 sandboxes released at the same instant from one
// supervisor process all run, each with its own output, and leave nothing
// behind: every run exits 0 with exactly the line it printed, and
// afterwards no process any of them started is alive (each left a setsid'd
// sleep behind, which must die with its sandbox), no sandbox init is a
// child of the test any more, no cgroup named for this process exists, the
// host mount table is as it was, and the runs' TMPDIR is empty. It asserts
// correctness only, never timing; the outer deadline only keeps a hang
// from hanging CI.
func TestConcurrentRuns(t *testing.T) {
	requireSandbox(t)
	for _, bin := range []string{"/bin/sh", "/usr/bin/setsid", "/usr/bin/sleep"} {
		airtest.RequireBinary(t, bin)
	}
	var r [8]byte
	_, _ = rand.Read(r[:])
	mark := "airlock-loadtest-" + hex.EncodeToString(r[:])
	runTmp := t.TempDir()
	t.Setenv("TMPDIR", runTmp) // where airlock's own temporary files would land
	spec := policy.Spec{
		AllowedTools: []string{"sleep", "setsid"},
		Env:          []string{"AIRLOCK_LOADTEST=" + mark},
		// Generous: a halt under a loaded CI host would be a failure here.
		Budget: budget.Limits{Wall: 90 * time.Second},
	}
	if os.Geteuid() != 0 {
		spec.AllowDowngrade = []string{"max_memory", "max_pids", "max_cpu"}
	}
	p, err := policy.New(spec)
	if err != nil {
		t.Fatalf("policy.New: %v", err)
	}
	self, err := procStartTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	cgroupDirs := ownCgroupDirs(t)
	mountsBefore := mountinfo(t)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	reports := make([]*sandbox.Report, concurrentRuns)
	errs := make([]error, concurrentRuns)
	gate := make(chan struct{})
	var ready, done sync.WaitGroup
	for i := range concurrentRuns {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			cmd := &sandbox.Cmd{Config: sandbox.Config{Policy: p}, CommandIsGranted: true,
				Args: []string{"/bin/sh", "-c", `setsid sleep 1000 & echo "run $1"`, mark, strconv.Itoa(i)}}
			ready.Done()
			<-gate
			reports[i], errs[i] = cmd.Run(ctx)
		}()
	}
	ready.Wait()
	close(gate)
	done.Wait()
	if ctx.Err() != nil {
		t.Fatalf("%d concurrent runs did not all end within the outer deadline", concurrentRuns)
	}

	var failed []string
	for i, rep := range reports {
		want := fmt.Sprintf("run %d\n", i)
		switch {
		case errs[i] != nil:
			failed = append(failed, fmt.Sprintf("run %d: Run: %v", i, errs[i]))
		case rep.ExitCode != 0 || rep.HaltedBy != nil || rep.Error != "":
			failed = append(failed, fmt.Sprintf("run %d: exit %d, halted_by %s, error %q, stderr %q", i, rep.ExitCode, deref(rep.HaltedBy), rep.Error, rep.Stderr))
		case rep.Stdout != want:
			failed = append(failed, fmt.Sprintf("run %d: stdout %q, want %q", i, rep.Stdout, want))
		}
	}
	if len(failed) > 0 {
		t.Errorf("%d of %d concurrent runs failed:\n%s", len(failed), concurrentRuns, strings.Join(failed, "\n"))
	}

	t.Run("no-processes", func(t *testing.T) {
		if alive := survivors(t, mark, time.Now().Add(10*time.Second)); len(alive) > 0 {
			t.Fatalf("%d processes of the runs survived them:\n%s", len(alive), strings.Join(alive, "\n"))
		}
		var kids []string
		for _, pid := range allPids(t) {
			if ppid, err := procPPid(pid); err == nil && ppid == os.Getpid() {
				kids = append(kids, describe(pid))
			}
		}
		if len(kids) > 0 {
			t.Fatalf("children of the supervisor remain after every Run returned:\n%s", strings.Join(kids, "\n"))
		}
	})
	t.Run("no-cgroups", func(t *testing.T) {
		if left := groupsOf(t, cgroupDirs, map[owner]bool{{os.Getpid(), self}: true}); len(left) > 0 {
			t.Fatalf("cgroups of the runs remain:\n%s", strings.Join(left, "\n"))
		}
	})
	t.Run("no-mounts", func(t *testing.T) {
		if got := added(mountsBefore, mountinfo(t)); len(got) > 0 {
			t.Fatalf("the host mount table gained entries:\n%s", strings.Join(got, "\n"))
		}
	})
	t.Run("no-temp-dirs", func(t *testing.T) {
		entries, err := os.ReadDir(runTmp)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) > 0 {
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			t.Fatalf("the runs' TMPDIR %s is not empty: %v", runTmp, names)
		}
	})
}

// TestForkBombThatExitsIsHalted: a shell starts sleepers until the kernel
// refuses a fork at max_pids, and then (dash on a failed fork) exits at
// once, so the run can end before any periodic look at the cgroup's
// counters. The kernel refused a fork all the same: the run is a max_pids
// halt every time (the supervisor reads the counters once more after the
// run), not a plain exit 2 (issue 13 §3).
func TestForkBombThatExitsIsHalted(t *testing.T) {
	requireSandbox(t)
	airtest.RequireCgroupV1(t, "pids")
	for i := range 10 {
		rep := sh(t, policy.Spec{Budget: budget.Limits{Pids: 16, Wall: 30 * time.Second}}, `while :; do sleep 1000 & done`, "sleep")
		if rep.HaltedBy == nil || *rep.HaltedBy != string(budget.MaxPids) || rep.ExitCode != 124 {
			t.Fatalf("try %d: halted_by = %s, exit %d; want max_pids, exit 124\nerror: %s\nstderr: %.300s", i, deref(rep.HaltedBy), rep.ExitCode, rep.Error, rep.Stderr)
		}
	}
}
