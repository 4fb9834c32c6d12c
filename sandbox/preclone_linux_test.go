package sandbox

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/internal/enforce/namespace"
	"github.com/airlock-sandbox/airlock/plan"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
)

// openFDs counts this process's open fds.
func openFDs(t *testing.T) int {
	t.Helper()
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(es) - 1 // ReadDir's own
}

// waitPool waits up to 30 s for cond to hold for pool's stats.
func waitPool(t *testing.T, pool *Pool, what string, cond func(PoolStats) bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond(pool.Stats()) {
		if time.Now().After(deadline) {
			t.Fatalf("pool never reached %s: %+v", what, pool.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// checkFDs fails t if more fds than before are open once what is done.
// Teardown may still be closing fds on other goroutines for a moment, and
// the cgroup janitor holds its lock for a cooldown after a pass: it waits
// up to 10 s for the count to fall.
func checkFDs(t *testing.T, before int, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for openFDs(t) > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if after := openFDs(t); after > before {
		t.Errorf("%d fds open after %s, %d before: an fd leaked", after, what, before)
	}
}

// TestPoolClonesAhead: once a sandbox took a warm init, the pool's next
// inits hold clones of that plan's bind steps (those they did not mount
// ahead: its tools). A sandbox whose plan has some of the same steps takes
// those and clones the rest; it mounts only its own plan's binds, never
// the clones its plan does not name; and no clone outlives its init.
func TestPoolClonesAhead(t *testing.T) {
	airtest.RequireUserNS(t)
	airtest.RequireLandlockABI(t, 4)
	if !namespace.HostAdmin() {
		t.Skip("only a root supervisor clones bind sources (cloneBinds, precloneBinds); this test runs without CAP_SYS_ADMIN on the host")
	}
	before := openFDs(t)
	pool, err := NewPool(PoolConfig{Size: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ready := func(what string, cond func(PoolStats) bool) { t.Helper(); waitPool(t, pool, what, cond) }
	session := func(tools ...string) *Session {
		t.Helper()
		p, err := policy.New(policy.Spec{AllowedTools: tools, Budget: budget.Limits{Wall: time.Minute}})
		if err != nil {
			t.Fatal(err)
		}
		s, err := NewSession(context.Background(), Config{Policy: p, Pool: pool})
		if err != nil {
			t.Fatalf("NewSession: %v", err)
		}
		return s
	}
	ready("1 ready", func(s PoolStats) bool { return s.Ready == 1 })
	if n := clonesOfReady(pool); n != 0 {
		t.Fatalf("the first warm init holds %d clones before any plan was seen, want none", n)
	}
	a := session("sh", "cat")
	a.Close()
	ready("refilled after a take", func(s PoolStats) bool { return s.Taken == 1 && s.Ready == 1 })
	pool.st.mu.Lock()
	steps := len(pool.st.steps)
	pool.st.mu.Unlock()
	ahead := 0
	for _, m := range premountedOfReady(pool) {
		if m.Cloned() {
			ahead++
		}
	}
	if n := clonesOfReady(pool); n == 0 || ahead == 0 || n+ahead != steps {
		t.Fatalf("the refilled warm init holds %d clones and mounted %d binds ahead for the %d bind steps of the last plan, want one each", n, ahead, steps)
	}

	b := session("sh")
	defer b.Close()
	if s := pool.Stats(); s.Taken != 2 || s.Misses != 0 {
		t.Fatalf("pool stats %+v, want session b on the warm init", s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := b.Exec(ctx, ExecRequest{Args: []string{"sh", "-c", "test -e /usr/bin/cat && echo cat is here; echo done"}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.ExitCode != 0 || rep.Stdout != "done\n" {
		t.Fatalf("session b (tool sh only), on an init holding a clone of session a's cat: %+v; want only \"done\"", rep)
	}
	b.Close()
	pool.Close()
	checkFDs(t, before, "the pool and its sessions closed")
}

// premountedOfReady returns the steps the pool's first ready init
// mounted ahead.
func premountedOfReady(p *Pool) []plan.Mount {
	p.st.mu.Lock()
	defer p.st.mu.Unlock()
	if len(p.st.ready) == 0 {
		return nil
	}
	return p.st.ready[0].in.premounted.steps
}

// clonesOfReady counts the clones the pool's ready inits hold.
func clonesOfReady(p *Pool) int {
	p.st.mu.Lock()
	defer p.st.mu.Unlock()
	n := 0
	for _, w := range p.st.ready {
		for _, fds := range w.in.cloned {
			n += len(fds)
		}
	}
	return n
}
