package cgroup_test

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/internal/enforce/cgroup"
)

// awaitWake waits, at most timeout, for n to announce a change.
func awaitWake(t *testing.T, n *cgroup.Notifier, timeout time.Duration, what string) {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-n.C():
	case <-timer.C:
		t.Fatalf("no notification within %v after %s", timeout, what)
	}
}

// TestNotifyOOM: the OOM killer striking inside the group wakes the
// Notifier, so that a watcher needs no timer to notice it.
func TestNotifyOOM(t *testing.T) {
	h := requireHost(t, cgroup.Memory)
	g := newGroup(t, h, cgroup.Config{MemoryBytes: 64 << 20})
	n, err := g.Notify()
	if err != nil {
		t.Fatalf("Notify: %v", err)
	}
	defer n.Close()
	if _, oom := n.Covers(); !oom {
		t.Fatalf("Covers() reports no OOM notification on a %s host with a memory controller", h.Version)
	}
	select {
	case <-n.C():
		t.Fatal("a notification before anything happened")
	default:
	}
	c := startIn(t, g, helperCmd("alloc"))
	_, _ = io.ReadAll(c.out)
	_ = c.cmd.Wait() // SIGKILLed by the OOM killer; TestMemoryLimitOOMKills checks that
	awaitWake(t, n, 10*time.Second, "an OOM kill")
	if ev, err := g.Events(); err != nil || ev.OOMKills == 0 {
		t.Errorf("Events() after the wake-up = %+v, %v, want OOMKills > 0", ev, err)
	}
	n.Close()
	n.Close() // idempotent
}

// TestNotifyPidsV2: on a host whose pids controller is in cgroup2, a
// refused fork wakes the Notifier; cgroup v1 pids.events announces
// nothing, and Covers says so.
func TestNotifyPidsV2(t *testing.T) {
	h := requireHost(t, cgroup.Pids)
	g := newGroup(t, h, cgroup.Config{Pids: 4})
	n, err := g.Notify()
	if err != nil {
		t.Fatalf("Notify: %v", err)
	}
	defer n.Close()
	pids, _ := n.Covers()
	if h.Controllers[cgroup.Pids] != h.Unified {
		if pids {
			t.Fatalf("Covers() reports pids notifications with pids on cgroup v1 (%s), which announces nothing", h.Controllers[cgroup.Pids])
		}
		t.Skipf("pids controller is on cgroup v1 here (%s host), which announces nothing (checked above)", h.Version)
	}
	if !pids {
		t.Fatal("Covers() reports no pids notification with pids on cgroup2")
	}
	airtest.RequireBinary(t, "/bin/sh")
	startIn(t, g, exec.Command("/bin/sh", "-c", "read go; for i in 1 2 3 4 5 6 7 8; do sleep 5 & done; echo done; wait"))
	awaitWake(t, n, 10*time.Second, "forks past pids.max")
	if ev, err := g.Events(); err != nil || ev.PidsMaxHits == 0 {
		t.Errorf("Events() after the wake-up = %+v, %v, want PidsMaxHits > 0", ev, err)
	}
}

// TestNotifyAfterDestroy: a destroyed group offers nothing to watch.
func TestNotifyAfterDestroy(t *testing.T) {
	h := requireHost(t, cgroup.Pids)
	name, err := cgroup.NewName(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	g, err := cgroup.Create(h, cgroup.Config{Name: name, Pids: 8})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Destroy(); err != nil {
		t.Fatal(err)
	}
	if n, err := g.Notify(); err == nil || n != nil {
		t.Fatalf("Notify after Destroy = %v, %v; want an error", n, err)
	}
	var nilN *cgroup.Notifier
	if nilN.C() != nil {
		t.Error("a nil Notifier's channel is not nil")
	}
	nilN.Close() // must not panic
}

// TestStart: a process Start starts is in the group in every hierarchy
// (each directory's cgroup.procs lists it alone), and the
// thread that started it is back in its own cgroups: it is neither in
// a tasks file nor holds the group up (Destroy succeeds).
func TestStart(t *testing.T) {
	h := requireHost(t, cgroup.Pids, cgroup.Memory)
	g := newGroup(t, h, cgroup.Config{Pids: 8, MemoryBytes: 64 << 20})
	runtime.LockOSThread() // read this thread's cgroups before and after
	defer runtime.UnlockOSThread()
	before, err := os.ReadFile("/proc/thread-self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	cmd := helperCmd("idle")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Start(cmd); err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer func() {
		_ = g.Kill() // checked by newGroup's Destroy
		stdin.Close()
		_ = cmd.Wait() // killed
	}()
	after, err := os.ReadFile("/proc/thread-self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	if string(after) != string(before) {
		t.Errorf("the starting thread's cgroups changed:\nbefore %s\nafter  %s", before, after)
	}
	for _, d := range g.Status().Dirs {
		b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if err != nil || !slices.Equal(strings.Fields(string(b)), []string{strconv.Itoa(cmd.Process.Pid)}) {
			t.Errorf("%s/cgroup.procs = %q, %v; want only pid %d", d, b, err, cmd.Process.Pid)
		}
	}
	// No task of this process (the starting thread is one) is left in a v1 tasks file.
	self, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range g.Status().Dirs {
		b, err := os.ReadFile(filepath.Join(d, "tasks"))
		if errors.Is(err, os.ErrNotExist) {
			continue // cgroup2 has no tasks file; cgroup.procs above holds only the child
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range self {
			if slices.Contains(strings.Fields(string(b)), e.Name()) {
				t.Errorf("%s/tasks lists the test's own thread %s", d, e.Name())
			}
		}
	}
}

// TestDetectWhileLeaderInside: Detect reads the calling thread's cgroups,
// so a supervisor whose leader thread is inside a sandbox's group for a
// moment (Start) never makes the next group inside that one.
func TestDetectWhileLeaderInside(t *testing.T) {
	h := requireHost(t, cgroup.Pids)
	if h.Controllers[cgroup.Pids] == h.Unified {
		airtest.SkipOrFail(t, "pids is a cgroup2 controller here: Start moves no thread on this host")
	}
	cmd := helperCmd("leader")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
}

// TestStartFailure: a command that cannot start leaves nothing in the
// group, the thread included.
func TestStartFailure(t *testing.T) {
	h := requireHost(t, cgroup.Pids)
	g := newGroup(t, h, cgroup.Config{Pids: 8})
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before, err := os.ReadFile("/proc/thread-self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Start(exec.Command("/nonexistent/airlock-test")); err == nil {
		t.Fatal("Start of a missing program = nil, want an error")
	}
	after, err := os.ReadFile("/proc/thread-self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	if string(after) != string(before) {
		t.Errorf("the starting thread's cgroups changed:\nbefore %s\nafter  %s", before, after)
	}
	if u, err := g.Usage(); err != nil || u.Pids != 0 {
		t.Errorf("Usage() = %+v, %v; want no task in the group", u, err)
	}
}

// TestJanitorShared: while one supervisor's pass holds the lock (during
// the pass and its cooldown), another's call skips; once the holder is
// gone the next call runs a full pass and removes a dead owner's group.
func TestJanitorShared(t *testing.T) {
	h := requireHost(t, cgroup.Pids)
	dead := fmt.Sprintf("airlock-999999999-1-%016x", rand.Uint64()|1<<63)
	deadGroup := newGroup(t, h, cgroup.Config{Name: dead, Pids: 8})

	// Another supervisor's pass, seen from here: its lock on the shared
	// cgroup directory.
	anchor := h.Self[h.Unified]
	if h.Unified == "" {
		for _, c := range []string{cgroup.Memory, cgroup.Pids, cgroup.CPU, cgroup.CPUAcct, cgroup.Freezer} {
			if m := h.Controllers[c]; m != "" {
				anchor = h.Self[m]
				break
			}
		}
	}
	fd, err := unix.Open(anchor, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		unix.Close(fd)
		t.Skipf("%s is locked by another process (another supervisor's janitor pass): %v", anchor, err)
	}
	ran, removed, err := cgroup.JanitorShared(h, time.Hour)
	if ran || len(removed) > 0 || err != nil {
		t.Errorf("JanitorShared while another pass holds %s = %v, %v, %v; want a skip", anchor, ran, removed, err)
	}
	for _, d := range deadGroup.Status().Dirs {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s after a skipped pass: %v, want it kept", d, err)
		}
	}
	unix.Close(fd) // the other supervisor exits

	ran, removed, err = cgroup.JanitorShared(h, 0)
	if err != nil {
		t.Logf("JanitorShared reported errors (may concern other groups): %v", err)
	}
	if !ran {
		t.Fatal("JanitorShared skipped with the lock free")
	}
	for _, d := range deadGroup.Status().Dirs {
		if !slices.Contains(removed, d) {
			t.Errorf("JanitorShared removed %v, want it to include the dead owner's %s", removed, d)
		}
	}
	checkGone(t, deadGroup.Status().Dirs)

	// A pass keeps the lock for its cooldown: a second supervisor skips.
	fd2, err := unix.Open(anchor, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd2)
	if ran, _, _ := cgroup.JanitorShared(h, 30*time.Second); !ran {
		t.Skip("another supervisor's pass holds the lock now: cannot check the cooldown")
	}
	if err := unix.Flock(fd2, unix.LOCK_EX|unix.LOCK_NB); !errors.Is(err, unix.EWOULDBLOCK) {
		t.Errorf("flock of %s during the pass's cooldown = %v, want EWOULDBLOCK", anchor, err)
	}
}
