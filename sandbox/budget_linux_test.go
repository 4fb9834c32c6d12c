package sandbox_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
	"github.com/airlock-sandbox/airlock/sandbox"
)

func wantHalt(t *testing.T, rep *sandbox.Report, l budget.Limit) {
	t.Helper()
	if rep.HaltedBy == nil || *rep.HaltedBy != string(l) || rep.ExitCode != 124 {
		got := "<nil>"
		if rep.HaltedBy != nil {
			got = *rep.HaltedBy
		}
		t.Fatalf("halted_by = %s, exit %d; want %s, exit 124\nerror: %s\nstdout: %.500s\nstderr: %.500s", got, rep.ExitCode, l, rep.Error, rep.Stdout, rep.Stderr)
	}
}

// TestBudgetWallKillsEverything: a busy loop plus a double-forked, setsid'd,
// SIGTERM-ignoring grandchild. The grandchild holds a FIFO in the write
// grant open; after the run, a non-blocking read of the FIFO returns EOF
// only if no writer (no survivor) is left.
func TestBudgetWallKillsEverything(t *testing.T) {
	requireSandbox(t)
	tr := newTree(t)
	fifo := filepath.Join(tr.out, "alive")
	if err := syscall.Mkfifo(fifo, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(tr.out, os.Getuid(), os.Getgid()); err != nil {
		t.Fatal(err)
	}
	rep := py(t, policy.Spec{FSWrite: []string{tr.out}, Budget: budget.Limits{Wall: 2 * time.Second}}, fmt.Sprintf(`
import os, signal
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        fd = os.open(%q, os.O_RDWR)
        while True:
            pass
    os._exit(0)
print("looping", flush=True)
while True:
    pass`, fifo))
	wantHalt(t, rep, budget.MaxWall)
	if rep.DurationMS < 1900 || rep.DurationMS > 10000 {
		t.Errorf("duration %d ms, want about 2000", rep.DurationMS)
	}
	fd, err := syscall.Open(fifo, syscall.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	var b [1]byte
	n, err := syscall.Read(fd, b[:])
	if errors.Is(err, syscall.EAGAIN) {
		t.Fatal("a process of the sandbox survived max_wall: the FIFO still has a writer")
	}
	if n != 0 || err != nil {
		t.Fatalf("read FIFO = %d, %v; want EOF", n, err)
	}
}

func TestBudgetOutputCap(t *testing.T) {
	requireSandbox(t)
	const limit = 1 << 20
	rep := run(t, policy.Spec{AllowedTools: []string{"yes"}, Budget: budget.Limits{OutputBytes: limit}}, "yes")
	wantHalt(t, rep, budget.MaxOutputBytes)
	if len(rep.Stdout)+len(rep.Stderr) != limit || !rep.StdoutTruncated {
		t.Fatalf("kept %d+%d bytes (truncated=%v), want exactly %d", len(rep.Stdout), len(rep.Stderr), rep.StdoutTruncated, limit)
	}
	if strings.Trim(rep.Stdout, "y\n") != "" {
		t.Fatal("captured output is not what the command wrote")
	}
}

func TestBudgetOutputCapBinaryAndHugeLine(t *testing.T) {
	requireSandbox(t)
	rep := py(t, policy.Spec{Budget: budget.Limits{OutputBytes: 100000}}, `
import os, sys
sys.stdout.buffer.write(bytes(range(256)) * 2000)
sys.stdout.flush()`)
	wantHalt(t, rep, budget.MaxOutputBytes)
	if len(rep.Stdout) != 100000 {
		t.Fatalf("kept %d bytes, want 100000", len(rep.Stdout))
	}
}

func TestBudgetScratchIsENOSPC(t *testing.T) {
	requireSandbox(t)
	rep := py(t, policy.Spec{Budget: budget.Limits{Scratch: 1 << 20}}, `
import errno
try:
    with open("/tmp/fill", "wb") as f:
        for _ in range(64):
            f.write(b"x" * 65536)
    print("no ENOSPC")
except OSError as e:
    print("errno", e.errno == errno.ENOSPC)
print("still running")`)
	wantExit(t, rep, 0)
	if !strings.Contains(rep.Stdout, "errno True") || !strings.Contains(rep.Stdout, "still running") {
		t.Fatalf("stdout = %q, want ENOSPC and the run going on", rep.Stdout)
	}
}

func TestBudgetMemory(t *testing.T) {
	requireSandbox(t)
	airtest.RequireCgroupV1(t, "memory")
	rep := py(t, policy.Spec{Budget: budget.Limits{Memory: 128 << 20}}, `
b = bytearray(2 << 30)
for i in range(0, len(b), 4096):
    b[i] = 1
print("allocated 2 GiB")`)
	wantHalt(t, rep, budget.MaxMemory)
}

func TestBudgetForkBomb(t *testing.T) {
	requireSandbox(t)
	airtest.RequireCgroupV1(t, "pids")
	rep := py(t, policy.Spec{Budget: budget.Limits{Pids: 64, Wall: 30 * time.Second}}, `
import os
while True:
    try:
        os.fork()
    except OSError:
        pass`)
	wantHalt(t, rep, budget.MaxPids)
	if err := exec.Command("/bin/true").Run(); err != nil {
		t.Fatalf("the host cannot fork after the bomb: %v", err)
	}
}

// TestBudgetForkBombQuickExit: a shell that exits as soon as a fork fails
// (the way dash does) is halted by max_pids every time, however quickly it
// ends: the kernel's counter decides, not a poll that may come too late.
func TestBudgetForkBombQuickExit(t *testing.T) {
	requireSandbox(t)
	airtest.RequireCgroupV1(t, "pids")
	for i := range 20 {
		rep := sh(t, policy.Spec{Budget: budget.Limits{Pids: 64, Wall: 30 * time.Second}}, `while :; do sleep 30 & done`, "sleep")
		if rep.HaltedBy == nil || *rep.HaltedBy != string(budget.MaxPids) || rep.ExitCode != 124 {
			t.Fatalf("try %d: halted_by = %v, exit %d; want max_pids, exit 124 every time\nstderr: %s", i+1, rep.HaltedBy, rep.ExitCode, rep.Stderr)
		}
	}
}

func TestBudgetCPU(t *testing.T) {
	requireSandbox(t)
	rep := py(t, policy.Spec{Budget: budget.Limits{CPU: time.Second, Wall: 20 * time.Second}}, `
while True:
    pass`)
	wantHalt(t, rep, budget.MaxCPU)
}
