package cgroup_test

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
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

// TestAddCloned: a process started into the cgroup2 directory with
// UnifiedFD and then AddCloned is in the group in every hierarchy.
func TestAddCloned(t *testing.T) {
	h := requireHost(t, cgroup.Pids, cgroup.Memory)
	g := newGroup(t, h, cgroup.Config{Pids: 8, MemoryBytes: 64 << 20})
	fd, ok := g.UnifiedFD()
	if !ok {
		airtest.SkipOrFail(t, "no cgroup2 mount (%s host): AddCloned is Add here", h.Version)
	}
	cmd := helperCmd("idle")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = g.Kill() // checked by newGroup's Destroy
		stdin.Close()
		_ = cmd.Wait() // killed
	}()
	if err := g.AddCloned(cmd.Process.Pid); err != nil {
		t.Fatalf("AddCloned: %v", err)
	}
	for _, d := range g.Status().Dirs {
		b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if err != nil || !slices.Contains(strings.Fields(string(b)), strconv.Itoa(cmd.Process.Pid)) {
			t.Errorf("%s/cgroup.procs = %q, %v; want pid %d there", d, b, err, cmd.Process.Pid)
		}
	}
	if err := g.AddCloned(os.Getpid()); err == nil {
		t.Error("AddCloned(the caller) succeeded; the supervisor must stay outside")
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
