package sandbox_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// waitStats polls p until cond holds, for at most 30 seconds.
func waitStats(t *testing.T, p *sandbox.Pool, what string, cond func(sandbox.PoolStats) bool) sandbox.PoolStats {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		s := p.Stats()
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool never reached %s: %+v", what, s)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// childrenOf lists the processes whose parent is this test process.
func childrenOf(t *testing.T) []int {
	t.Helper()
	var kids []int
	for _, pid := range allPids(t) {
		if ppid, err := procPPid(pid); err == nil && ppid == os.Getpid() {
			kids = append(kids, pid)
		}
	}
	return kids
}

// TestPoolSessions: sessions take the pool's warm inits, which the pool
// replaces; a sandbox on a warm init enforces its own policy (its grants,
// its pids limit, no network), and two sessions from the pool share
// nothing; closing the pool kills the unused inits and removes their
// cgroups.
func TestPoolSessions(t *testing.T) {
	requireSandbox(t)
	self, err := procStartTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	dirs := ownCgroupDirs(t)
	before := childrenOf(t)
	pool, err := sandbox.NewPool(sandbox.PoolConfig{Size: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	waitStats(t, pool, "2 ready", func(s sandbox.PoolStats) bool { return s.Ready == 2 })

	tr := newTree(t)
	spec := policy.Spec{FSWrite: []string{tr.out}, AllowedTools: []string{"sh", "cat"}, Budget: budget.Limits{Wall: time.Minute}}
	if os.Geteuid() != 0 {
		spec.AllowDowngrade = []string{"max_memory", "max_pids", "max_cpu"}
	}
	p, err := policy.New(spec)
	if err != nil {
		t.Fatal(err)
	}
	a, err := sandbox.NewSession(context.Background(), sandbox.Config{Policy: p, Pool: pool})
	if err != nil {
		t.Fatalf("NewSession: %v", err)
	}
	defer a.Close()
	other, err := policy.New(policy.Spec{AllowedTools: []string{"sh", "cat"}, AllowDowngrade: spec.AllowDowngrade})
	if err != nil {
		t.Fatal(err)
	}
	b, err := sandbox.NewSession(context.Background(), sandbox.Config{Policy: other, Pool: pool})
	if err != nil {
		t.Fatalf("NewSession: %v", err)
	}
	defer b.Close()
	if s := pool.Stats(); s.Taken != 2 || s.Misses != 0 {
		t.Fatalf("after two sessions the pool says %+v, want 2 taken and no miss", s)
	}

	// Session a writes its grant; b, with no grant, sees nothing of it.
	rep := execIn(t, a, sandbox.ExecRequest{Args: []string{"sh", "-c", "echo pooled > " + tr.out + "/from-a; cat /etc/shadow; cat " + tr.secret}})
	if rep.ExitCode == 0 || rep.Stdout != "" {
		t.Errorf("session a read the host's secrets: %+v", rep)
	}
	rep = execIn(t, a, sandbox.ExecRequest{Args: []string{"cat", tr.out + "/from-a"}})
	if rep.ExitCode != 0 || rep.Stdout != "pooled\n" {
		t.Errorf("session a's write in its grant: %+v", rep)
	}
	rep = execIn(t, b, sandbox.ExecRequest{Args: []string{"sh", "-c", "cat " + tr.out + "/from-a"}})
	if rep.ExitCode == 0 || strings.Contains(rep.Stdout, "pooled") {
		t.Errorf("session b read session a's grant: %+v", rep)
	}

	waitStats(t, pool, "refilled to 2 ready", func(s sandbox.PoolStats) bool { return s.Ready == 2 })
	pool.Close()
	if s := pool.Stats(); s.Ready != 0 || s.Starting != 0 {
		t.Errorf("after Close the pool says %+v, want nothing ready or starting", s)
	}
	// The sessions outlive the pool that started them.
	if rep := execIn(t, b, sandbox.ExecRequest{Args: []string{"sh", "-c", "echo alive"}}); rep.Stdout != "alive\n" {
		t.Errorf("a session after its pool closed: %+v", rep)
	}
	a.Close()
	b.Close()
	if got, err := os.ReadFile(filepath.Join(tr.out, "from-a")); err != nil || string(got) != "pooled\n" {
		t.Errorf("session a's write, copied back when it closed: %q, %v", got, err)
	}
	if kids := childrenOf(t); len(kids) > len(before) {
		var d []string
		for _, k := range kids {
			if !slices.Contains(before, k) {
				d = append(d, describe(k))
			}
		}
		t.Errorf("processes of the pool remain after Close:\n%s", strings.Join(d, "\n"))
	}
	if left := groupsOf(t, dirs, map[owner]bool{{os.Getpid(), self}: true}); len(left) > 0 {
		t.Errorf("cgroups of the pool remain after Close:\n%s", strings.Join(left, "\n"))
	}
}

// TestPoolRuns: Cmd.Run takes a warm init too, and a Config whose
// Executable is not the pool's starts cold (a miss), with the same result;
// the run on the warm init gets its own limits: a fork past its max_pids
// halts it.
func TestPoolRuns(t *testing.T) {
	requireSandbox(t)
	pool, err := sandbox.NewPool(sandbox.PoolConfig{Size: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	waitStats(t, pool, "1 ready", func(s sandbox.PoolStats) bool { return s.Ready == 1 })
	spec := policy.Spec{}
	if os.Geteuid() != 0 {
		spec.AllowDowngrade = []string{"max_memory", "max_pids", "max_cpu"}
	}
	p, err := policy.New(spec)
	if err != nil {
		t.Fatal(err)
	}
	for _, exe := range []string{"", "/proc/self/exe"} {
		cmd := &sandbox.Cmd{Config: sandbox.Config{Policy: p, Pool: pool, Executable: exe}, Args: []string{"/bin/sh", "-c", "echo $((6*7))"}, CommandIsGranted: true}
		rep, err := cmd.Run(context.Background())
		if err != nil || rep.ExitCode != 0 || rep.Stdout != "42\n" {
			t.Fatalf("Run with executable %q = %+v, %v", exe, rep, err)
		}
	}
	if s := pool.Stats(); s.Taken != 1 || s.Misses != 1 {
		t.Errorf("pool stats %+v, want 1 taken (same executable) and 1 miss (another)", s)
	}
	if os.Geteuid() != 0 {
		return // no cgroup to hold max_pids
	}
	waitStats(t, pool, "1 ready", func(s sandbox.PoolStats) bool { return s.Ready == 1 })
	lp, err := policy.New(policy.Spec{AllowedTools: []string{"sleep"}, Budget: budget.Limits{Pids: 8, Wall: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	cmd := &sandbox.Cmd{Config: sandbox.Config{Policy: lp, Pool: pool}, CommandIsGranted: true,
		Args: []string{"/bin/sh", "-c", "for i in 1 2 3 4 5 6 7 8 9 10 11 12; do sleep 30 & done; wait"}}
	rep, err := cmd.Run(context.Background())
	if err != nil || rep.HaltedBy == nil || *rep.HaltedBy != "max_pids" {
		t.Errorf("a fork past max_pids on a warm init: %+v, %v; want halted_by max_pids", rep, err)
	}
	if s := pool.Stats(); s.Taken != 2 {
		t.Errorf("pool stats %+v, want the limited run on a warm init (2 taken)", s)
	}
}

// TestPoolExpiry: an unused warm init is replaced after MaxAge, and the
// replaced one leaves nothing behind.
func TestPoolExpiry(t *testing.T) {
	requireSandbox(t)
	pool, err := sandbox.NewPool(sandbox.PoolConfig{Size: 1, MaxAge: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	waitStats(t, pool, "2 expired and 1 ready", func(s sandbox.PoolStats) bool { return s.Expired >= 2 && s.Ready == 1 })
}

// TestPoolFailures: a pool whose inits cannot start counts the failures,
// waits before it retries (no busy loop), and sandboxes start cold.
func TestPoolFailures(t *testing.T) {
	requireSandbox(t)
	pool, err := sandbox.NewPool(sandbox.PoolConfig{Size: 2, Executable: "/nonexistent/airlock-init"})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s := waitStats(t, pool, "a failure", func(s sandbox.PoolStats) bool { return s.Failed >= 1 && s.Starting == 0 })
	time.Sleep(200 * time.Millisecond) // the first retry waits a second
	if s2 := pool.Stats(); s2.Failed > s.Failed+1 {
		t.Errorf("the pool retried at once: %d failures, then %d 200 ms later", s.Failed, s2.Failed)
	}
}

func TestPoolBounds(t *testing.T) {
	for _, cfg := range []sandbox.PoolConfig{{Size: 0}, {Size: sandbox.MaxPoolSize + 1}, {Size: 1, MaxAge: -time.Second}} {
		if p, err := sandbox.NewPool(cfg); err == nil {
			p.Close()
			t.Errorf("NewPool(%+v) = nil error, want a refusal", cfg)
		}
	}
}

// TestRunInitDiesDuringSetup: Run sends its command before the sandbox is
// ready (the init reads it only once every restriction is in place); an
// init that dies before it is ready still gives the start-up refusal,
// exit 125 and nothing run, with or without a warm init.
func TestRunInitDiesDuringSetup(t *testing.T) {
	requireSandbox(t)
	dir := t.TempDir()
	p, err := policy.New(policy.Spec{FSWrite: []string{dir}, AllowDowngrade: []string{"max_memory", "max_pids", "max_cpu"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, exe := range []string{"/bin/true", "/bin/false"} {
		cmd := &sandbox.Cmd{Config: sandbox.Config{Policy: p, Executable: exe}, CommandIsGranted: true,
			Args: []string{"/bin/sh", "-c", "echo ran > " + dir + "/ran"}}
		rep, err := cmd.Run(context.Background())
		if err != nil || rep.ExitCode != 125 || !strings.Contains(rep.Error, "sandbox init died during setup") {
			t.Errorf("Run with %s as the init = %+v, %v; want exit 125 naming the init's death", exe, rep, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "ran")); err == nil {
		t.Error("the command ran although the init never was ready")
	}
}
