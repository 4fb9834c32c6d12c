package cgroup_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/internal/enforce/cgroup"
)

// proc identifies one process across pid reuse.
type proc struct {
	pid   int
	start string // /proc/<pid>/stat field 22
}

func procOf(t *testing.T, pid int) proc {
	t.Helper()
	st, _, err := statOf(pid)
	if err != nil {
		t.Fatalf("stat of pid %d: %v", pid, err)
	}
	return proc{pid, st}
}

// statOf returns the start time and state of pid.
func statOf(pid int) (start string, state string, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", "", err
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return f[19], f[0], nil
}

// dead reports whether p has exited: gone, a zombie, or its pid reused.
func (p proc) dead() bool {
	start, state, err := statOf(p.pid)
	return errors.Is(err, os.ErrNotExist) || start != p.start || state == "Z" || state == "X"
}

func TestKillEscapedTree(t *testing.T) {
	h := requireHost(t)
	// The same attack against each way Kill can work on this host.
	v1 := h
	v1.Unified, v1.KillFile = "", false
	bare := v1
	bare.Controllers = map[string]string{}
	for c, d := range v1.Controllers {
		if c != cgroup.Freezer {
			bare.Controllers[c] = d
		}
	}
	tests := []struct {
		name string
		host cgroup.Host
		kill string // Status().Kill
	}{
		{"cgroup.kill", h, "cgroup.kill"},
		{"v1-freezer", v1, "freeze+sigkill"},
		{"sigkill-only", bare, "sigkill"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.host.Version == "" || (tt.kill == "cgroup.kill") != tt.host.KillFile ||
				(tt.kill == "freeze+sigkill" && tt.host.Controllers[cgroup.Freezer] == "") ||
				(tt.kill == "sigkill" && tt.host.Controllers[cgroup.Pids] == "") {
				airtest.SkipOrFail(t, "host %s cannot kill by %s", h.Version, tt.kill)
			}
			g := newGroup(t, tt.host, cgroup.Config{})
			if got := g.Status().Kill; got != tt.kill {
				t.Fatalf("Status().Kill = %q, want %q", got, tt.kill)
			}
			killTree(t, g)
		})
	}
}

// killTree starts the escaping tree in g, kills g and checks that every
// process of the tree is dead and the group empty.
func killTree(t *testing.T, g *cgroup.Group) {
	t.Helper()
	c := startIn(t, g, helperCmd("tree"))
	var procs []proc
	for {
		line, err := c.out.ReadString('\n')
		if err != nil {
			t.Fatalf("tree helper output: %v (so far %v)", err, procs)
		}
		line = strings.TrimSpace(line)
		if line == "ready" {
			break
		}
		var pid int
		if _, err := fmt.Sscanf(line, "pid %d", &pid); err != nil {
			t.Fatalf("tree helper line %q: %v", line, err)
		}
		procs = append(procs, procOf(t, pid))
	}
	if len(procs) != 3 {
		t.Fatalf("tree helper reported %v, want itself, the setsid'd grandchild and the setpgid'd child", procs)
	}
	if err := g.Kill(); err != nil {
		t.Fatalf("Kill (%s): %v", g.Status().Kill, err)
	}
	c.cmd.Wait() // reap the direct child; it was SIGKILLed
	poll(t, 10*time.Second, "every process of the tree to die", func() bool {
		return !slices.ContainsFunc(procs, func(p proc) bool { return !p.dead() })
	})
	for _, d := range g.Status().Dirs {
		b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if err != nil || len(strings.TrimSpace(string(b))) != 0 {
			t.Errorf("%s/cgroup.procs after Kill = %q, %v, want empty", d, b, err)
		}
	}
}

func TestJanitor(t *testing.T) {
	h := requireHost(t, cgroup.Pids)
	r := rand.Uint64() | 1<<63
	dead := fmt.Sprintf("airlock-999999999-1-%016x", r)
	deadGroup := newGroup(t, h, cgroup.Config{Name: dead, Pids: 8})
	live := newGroup(t, h, cgroup.Config{})

	// The dead owner's group still runs an escaped process; the janitor
	// must kill it before it can remove the group.
	c := startIn(t, deadGroup, helperCmd("sleeper"))
	escaped := procOf(t, c.cmd.Process.Pid)

	parent := h.Self[h.Controllers[cgroup.Pids]]
	var foreign []string
	for _, n := range []string{fmt.Sprintf("notairlock-%x", r), fmt.Sprintf("airlock-manual-%x", r)} {
		d := filepath.Join(parent, n)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(d) }) // cgroupfs rmdir; checked below
		foreign = append(foreign, d)
	}

	removed, err := cgroup.Janitor(h, nil)
	if err != nil {
		t.Logf("Janitor reported errors (may concern other groups): %v", err)
	}
	for _, d := range deadGroup.Status().Dirs {
		if !slices.Contains(removed, d) {
			t.Errorf("Janitor removed %v, want it to include the dead owner's %s", removed, d)
		}
	}
	checkGone(t, deadGroup.Status().Dirs)
	c.cmd.Wait() // reap the killed sleeper
	if !escaped.dead() {
		t.Errorf("process %d of the dead owner's group survived Janitor", escaped.pid)
	}
	for _, d := range append(live.Status().Dirs, foreign...) {
		if slices.Contains(removed, d) {
			t.Errorf("Janitor removed %s, want it kept", d)
		}
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s after Janitor: %v, want it kept", d, err)
		}
	}
	if !cgroup.OwnerAlive(live.Name()) || cgroup.OwnerAlive(dead) {
		t.Errorf("OwnerAlive(live) = %v, OwnerAlive(dead) = %v, want true, false", cgroup.OwnerAlive(live.Name()), cgroup.OwnerAlive(dead))
	}
}

func TestOwnerAliveDefeatsPidReuse(t *testing.T) {
	requireHost(t)
	name, err := cgroup.NewName(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	pid, start, ok := cgroup.ParseName(name)
	if !ok || pid != os.Getpid() {
		t.Fatalf("ParseName(NewName(%d)) = %d, %d, %v", os.Getpid(), pid, start, ok)
	}
	tests := []struct {
		name string
		in   string
		want bool
	}{
		{"self", name, true},
		{"same-pid-other-start", fmt.Sprintf("airlock-%d-%d-0123456789abcdef", pid, start+1), false},
		{"no-such-pid", "airlock-999999999-1-0123456789abcdef", false},
		{"unparsable-kept", "airlock-x", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := cgroup.OwnerAlive(tt.in); got != tt.want {
				t.Errorf("OwnerAlive(%q) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}
