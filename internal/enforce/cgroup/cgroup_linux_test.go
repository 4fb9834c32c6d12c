package cgroup_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/internal/enforce/cgroup"
)

// testTimeout bounds every child process a test starts.
const testTimeout = 60 * time.Second

// requireHost skips unless running as root on a host that offers the given
// controllers, and returns it.
func requireHost(t *testing.T, controllers ...string) cgroup.Host {
	t.Helper()
	airtest.RequireRoot(t)
	h, err := cgroup.Detect()
	if err != nil {
		airtest.SkipOrFail(t, "cgroup detection: %v", err)
	}
	for _, c := range controllers {
		if h.Controllers[c] == "" {
			airtest.SkipOrFail(t, "cgroup controller %q unavailable (%s host; problems: %v)", c, h.Version, h.Problems)
		}
	}
	return h
}

// newGroup creates a group and registers its destruction, after which no
// directory of it may remain in any hierarchy.
func newGroup(t *testing.T, h cgroup.Host, cfg cgroup.Config) *cgroup.Group {
	t.Helper()
	if cfg.Name == "" {
		name, err := cgroup.NewName(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		cfg.Name = name
	}
	g, err := cgroup.Create(h, cfg)
	if err != nil {
		t.Fatalf("Create(%+v): %v", cfg, err)
	}
	dirs := g.Status().Dirs
	t.Cleanup(func() {
		if err := g.Destroy(); err != nil {
			t.Errorf("Destroy: %v", err)
		}
		checkGone(t, dirs)
	})
	return g
}

func checkGone(t *testing.T, dirs []string) {
	t.Helper()
	for _, d := range dirs {
		if _, err := os.Lstat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cgroup %s left behind (lstat: %v)", d, err)
		}
	}
}

// child is a helper process placed in a group before it runs anything.
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
}

// startIn starts cmd inside g with Start. The child still waits for "go"
// on stdin, so a test decides when it runs.
func startIn(t *testing.T, g *cgroup.Group, cmd *exec.Cmd) *child {
	t.Helper()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := g.Start(cmd); err != nil {
		if cmd.Process != nil {
			_ = cmd.Process.Kill() // reaped by Wait below
			_ = cmd.Wait()
		}
		t.Fatalf("Start %v: %v", cmd.Args, err)
	}
	timer := time.AfterFunc(testTimeout, func() { g.Kill() }) // outer bound: result checked by the test
	t.Cleanup(func() {
		timer.Stop()
		g.Kill() // result checked by newGroup's Destroy
		stdin.Close()
		cmd.Wait() // killed above; its status is irrelevant here
	})
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatalf("release child: %v", err)
	}
	return &child{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout)}
}

// poll waits until cond holds, checking every few milliseconds, for at most
// timeout.
func poll(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(timeout)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
	}
}

func TestDetectHybrid(t *testing.T) {
	h := requireHost(t)
	if h.Version != cgroup.Hybrid {
		airtest.SkipOrFail(t, "host is %q, not the hybrid layout this test describes", h.Version)
	}
	for _, c := range []string{cgroup.Memory, cgroup.Pids, cgroup.CPU} {
		if d := h.Controllers[c]; d == "" || d == h.Unified || h.Self[d] == "" {
			t.Errorf("Detect: controller %s at %q (self %q), want a v1 hierarchy", c, d, h.Self[d])
		}
	}
	if h.Unified == "" || h.Self[h.Unified] == "" || !h.KillFile {
		t.Errorf("Detect: unified %q self %q kill %v, want a cgroup2 mount with cgroup.kill", h.Unified, h.Self[h.Unified], h.KillFile)
	}
}

func TestCreateDestroy(t *testing.T) {
	h := requireHost(t, cgroup.Memory, cgroup.Pids, cgroup.CPU)
	g := newGroup(t, h, cgroup.Config{MemoryBytes: 64 << 20, Pids: 16, CPUQuota: 0.5})
	st := g.Status()
	if len(st.Dirs) == 0 || st.Swap == "" || st.Kill == "" {
		t.Fatalf("Status() = %+v, want dirs, a swap mode and a kill mode", st)
	}
	for _, d := range st.Dirs {
		if _, err := os.Stat(filepath.Join(d, "cgroup.procs")); err != nil {
			t.Errorf("group dir %s: %v", d, err)
		}
	}
	if err := g.Destroy(); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	checkGone(t, st.Dirs)
	if err := g.Destroy(); err != nil {
		t.Errorf("second Destroy = %v, want nil (idempotent)", err)
	}
	if err := g.Start(exec.Command("/bin/true")); err == nil {
		t.Errorf("Start after Destroy = nil, want an error")
	}
}

// TestLimitLater: a group made without limits gets them from Limit, as
// Create would have written them, and a limit whose controller the group
// was made without is a ControllerError.
func TestLimitLater(t *testing.T) {
	h := requireHost(t, cgroup.Memory, cgroup.Pids)
	g := newGroup(t, h, cgroup.Config{})
	if err := g.Limit(cgroup.Config{MemoryBytes: 64 << 20, Pids: 5}); err != nil {
		t.Fatalf("Limit: %v", err)
	}
	ref := newGroup(t, h, cgroup.Config{MemoryBytes: 64 << 20, Pids: 5})
	if got, want := g.Status().Swap, ref.Status().Swap; got != want {
		t.Errorf("Status().Swap = %q, want %q as Create sets it", got, want)
	}
	for _, d := range g.Status().Dirs {
		for _, f := range []string{"pids.max", "memory.max", "memory.limit_in_bytes"} {
			b, err := os.ReadFile(filepath.Join(d, f))
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			want := map[string]string{"pids.max": "5", "memory.max": "67108864", "memory.limit_in_bytes": "67108864"}[f]
			if err != nil || strings.TrimSpace(string(b)) != want {
				t.Errorf("%s/%s = %q, %v; want %s", d, f, b, err, want)
			}
		}
	}
	noMem := h
	noMem.Controllers = map[string]string{cgroup.Pids: h.Controllers[cgroup.Pids]}
	g2 := newGroup(t, noMem, cgroup.Config{})
	var ce *cgroup.ControllerError
	if err := g2.Limit(cgroup.Config{MemoryBytes: 64 << 20}); !errors.As(err, &ce) || ce.Controller != cgroup.Memory {
		t.Errorf("Limit(memory) on a group without it = %v, want a ControllerError for memory", err)
	}
	if err := g2.Limit(cgroup.Config{Pids: -1}); err == nil {
		t.Error("Limit with a negative pids limit = nil, want an error")
	}
}

func TestCreateErrors(t *testing.T) {
	h := requireHost(t, cgroup.Pids)
	noMem := h
	noMem.Controllers = map[string]string{}
	for c, d := range h.Controllers {
		if c != cgroup.Memory {
			noMem.Controllers[c] = d
		}
	}
	name, err := cgroup.NewName(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		host  cgroup.Host
		cfg   cgroup.Config
		check func(error) bool
	}{
		{"memory-missing", noMem, cgroup.Config{Name: name, MemoryBytes: 1 << 20, Pids: 4},
			func(err error) bool {
				var ce *cgroup.ControllerError
				return errors.Is(err, cgroup.ErrNoController) && errors.As(err, &ce) && ce.Controller == cgroup.Memory
			}},
		{"foreign-name", h, cgroup.Config{Name: "user.slice"}, func(err error) bool { return err != nil }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := cgroup.Create(tt.host, tt.cfg)
			if err == nil {
				g.Destroy() // unexpected success: clean up, the test fails below
			}
			if !tt.check(err) {
				t.Errorf("Create(%+v) = %v, want the error this case describes", tt.cfg, err)
			}
			if strings.HasPrefix(tt.cfg.Name, "airlock-") {
				for _, d := range h.Self {
					checkGone(t, []string{filepath.Join(d, tt.cfg.Name)})
				}
			}
		})
	}
	// A name already taken is refused, and the first group stays intact.
	g := newGroup(t, h, cgroup.Config{Name: name})
	if g2, err := cgroup.Create(h, cgroup.Config{Name: name}); err == nil {
		g2.Destroy() // would remove g's directories too; the test fails anyway
		t.Fatalf("Create with a taken name = nil error, want EEXIST")
	} else if !errors.Is(err, syscall.EEXIST) {
		t.Errorf("Create with a taken name = %v, want EEXIST", err)
	}
	for _, d := range g.Status().Dirs {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("first group's %s after the refused Create: %v", d, err)
		}
	}
}

func TestPidsLimitStopsForkBomb(t *testing.T) {
	h := requireHost(t, cgroup.Pids)
	airtest.RequireBinary(t, "/usr/bin/python3")
	const limit = 16
	g := newGroup(t, h, cgroup.Config{Pids: limit})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	script := `
import os, signal, sys
signal.alarm(120)
sys.stdin.readline()
kids, fails, errs = 0, 0, set()
for i in range(64):
    try:
        pid = os.fork()
    except OSError as e:
        fails += 1
        errs.add(e.errno)
        continue
    if pid == 0:
        signal.alarm(120)
        signal.pause()
        os._exit(0)
    kids += 1
print(kids, fails, *sorted(errs), flush=True)
sys.stdin.readline()
`
	c := startIn(t, g, exec.CommandContext(ctx, "/usr/bin/python3", "-c", script))
	line, err := c.out.ReadString('\n')
	if err != nil {
		t.Fatalf("fork bomb report: %v", err)
	}
	f := strings.Fields(line)
	if len(f) < 2 {
		t.Fatalf("fork bomb report %q: want kids fails errnos", line)
	}
	kids, _ := strconv.Atoi(f[0])
	fails, _ := strconv.Atoi(f[1])
	if kids >= limit || fails == 0 {
		t.Errorf("fork bomb: %d forks succeeded, %d failed; want fewer than %d and some failures", kids, fails, limit)
	}
	if got := strings.Join(f[2:], " "); got != strconv.Itoa(int(syscall.EAGAIN)) {
		t.Errorf("fork bomb errnos = %q, want only EAGAIN (%d)", got, syscall.EAGAIN)
	}
	ev, err := g.Events()
	if err != nil || ev.PidsMaxHits == 0 {
		t.Errorf("Events() = %+v, %v, want PidsMaxHits > 0", ev, err)
	}
	u, err := g.Usage()
	if err != nil || u.Pids > limit || u.Pids == 0 {
		t.Errorf("Usage() = %+v, %v, want 0 < Pids <= %d", u, err, limit)
	}
	if err := exec.Command("/bin/true").Run(); err != nil {
		t.Errorf("host fork after the bomb: %v", err)
	}
	if err := g.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	// pids.current drops when the dead are reaped: our child by us, the
	// orphaned forks by init.
	c.cmd.Wait() // SIGKILLed above
	poll(t, 10*time.Second, "pids.current to drop to 0", func() bool {
		u, err := g.Usage()
		return err == nil && u.Pids == 0
	})
}

func TestMemoryLimitOOMKills(t *testing.T) {
	h := requireHost(t, cgroup.Memory)
	const limit = 64 << 20
	g := newGroup(t, h, cgroup.Config{MemoryBytes: limit})
	if st := g.Status(); st.Swap == "" {
		t.Errorf("Status().Swap is empty, want the swap mode of a memory limit")
	}
	c := startIn(t, g, helperCmd("alloc"))
	out, _ := io.ReadAll(c.out)
	err := c.cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("512 MiB in a 64 MiB group: wait = %v, output %q; want death by SIGKILL", err, out)
	}
	ev, err := g.Events()
	if err != nil || ev.OOMKills == 0 {
		t.Errorf("Events() = %+v, %v, want OOMKills > 0", ev, err)
	}
	u, err := g.Usage()
	if err != nil || u.MemoryPeak <= 0 || u.MemoryPeak > limit+(1<<20) {
		t.Errorf("Usage() = %+v, %v, want 0 < MemoryPeak <= %d", u, err, limit)
	}
	// The group is empty: its counters no longer move.
	if peak, cpu, err := g.MemoryCPU(); err != nil || peak != u.MemoryPeak || cpu != u.CPU {
		t.Errorf("MemoryCPU() = %d, %v, %v; want Usage's %d, %v", peak, cpu, err, u.MemoryPeak, u.CPU)
	}
}

func TestCPUQuota(t *testing.T) {
	h := requireHost(t, cgroup.CPU)
	g := newGroup(t, h, cgroup.Config{CPUQuota: 0.5})
	cpuDir := h.Controllers[cgroup.CPU]
	file, want := "cpu.cfs_quota_us", "50000"
	if cpuDir == h.Unified {
		file, want = "cpu.max", "50000 100000"
	}
	b, err := os.ReadFile(filepath.Join(h.Self[cpuDir], g.Name(), file))
	if err != nil || strings.TrimSpace(string(b)) != want {
		t.Errorf("%s = %q, %v, want %q", file, b, err, want)
	}
	c := startIn(t, g, helperCmd("spin"))
	poll(t, 10*time.Second, "CPU usage to grow", func() bool {
		u, err := g.Usage()
		return err == nil && u.CPU > 0
	})
	c.stdin.Close()
	if err := c.cmd.Wait(); err != nil {
		t.Errorf("spin helper: %v", err)
	}
}
