package sandbox

import (
	"context"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/internal/enforce/namespace"
	"github.com/airlock-sandbox/airlock/plan"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
)

// TestPoolMountsAhead: once a sandbox took a warm init, the pool's next
// inits mount the steps that plan began with (system base, /dev, /proc,
// /tmp, /etc) while they wait. A sandbox whose plan begins with the same
// steps goes on from there and has exactly its own root; one whose plan
// begins otherwise (another /tmp size) gets its own steps on that init,
// never the ones mounted ahead; a supervisor that says a plan begins with
// what was mounted ahead when it does not is refused by the init; no fd
// outlives the pool.
func TestPoolMountsAhead(t *testing.T) {
	airtest.RequireUserNS(t)
	airtest.RequireLandlockABI(t, 4)
	if !namespace.HostAdmin() {
		t.Skip("only a root supervisor's warm inits mount ahead (they need its clones of the bind sources); this test runs without CAP_SYS_ADMIN on the host")
	}
	before := openFDs(t)
	pool, err := NewPool(PoolConfig{Size: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ready := func(what string, cond func(PoolStats) bool) { t.Helper(); waitPool(t, pool, what, cond) }
	session := func(scratch int64) *Session {
		t.Helper()
		p, err := policy.New(policy.Spec{AllowedTools: []string{"sh"}, Budget: budget.Limits{Wall: time.Minute, Scratch: scratch}})
		if err != nil {
			t.Fatal(err)
		}
		s, err := NewSession(context.Background(), Config{Policy: p, Pool: pool})
		if err != nil {
			t.Fatalf("NewSession: %v", err)
		}
		return s
	}
	// What /tmp is inside (its tmpfs size, from mountinfo), whether the
	// system base and /etc are there, and which pid the shell has.
	const probe = `while read -r id parent dev root mp opts rest; do [ "$mp" = /tmp ] && echo "tmp: ${rest##* }"; done < /proc/self/mountinfo
test -d /usr/lib && echo base
read -r line < /etc/hosts && echo "hosts: $line"
read -r pid rest < /proc/self/stat && echo "proc: $pid"`
	run := func(s *Session) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		rep, err := s.Exec(ctx, ExecRequest{Args: []string{"sh", "-c", probe}})
		if err != nil {
			t.Fatal(err)
		}
		if rep.ExitCode != 0 {
			t.Fatalf("probe: %+v", rep)
		}
		return rep.Stdout
	}
	const small, large = 16 << 20, 32 << 20
	wantTmp := func(out string, size int64) {
		t.Helper()
		want := "size=" + itoa(size>>10) + "k"
		if !strings.Contains(out, "tmp: ") || !strings.Contains(out, want) {
			t.Errorf("/tmp inside is not the %d MiB tmpfs the plan asks for (want %s):\n%s", size>>20, want, out)
		}
		for _, part := range []string{"base\n", "hosts: 127.0.0.1", "proc: "} {
			if !strings.Contains(out, part) {
				t.Errorf("the sandbox's root lacks %q:\n%s", part, out)
			}
		}
		if strings.Contains(out, "proc: 1\n") {
			t.Errorf("the shell is pid 1: /proc is not the sandbox's own, under its init:\n%s", out)
		}
	}

	ready("1 ready", func(s PoolStats) bool { return s.Ready == 1 })
	if steps := premountedOfReady(pool); len(steps) != 0 {
		t.Fatalf("the first warm init mounted %d steps ahead before any plan was seen, want none", len(steps))
	}
	a := session(small)
	wantTmp(run(a), small)
	a.Close()

	ready("refilled after a take", func(s PoolStats) bool { return s.Taken == 1 && s.Ready == 1 })
	ahead := premountedOfReady(pool)
	var kinds []string
	for _, m := range ahead {
		kinds = append(kinds, string(m.Kind)+" "+m.Target)
	}
	for _, want := range []string{"bind /usr/lib", "bind /dev/null", "proc /proc", "tmpfs /tmp", "file /etc/hosts"} {
		if !strings.Contains(strings.Join(kinds, "\n")+"\n", want+"\n") {
			t.Errorf("the refilled warm init did not mount %q ahead; it mounted:\n%s", want, strings.Join(kinds, "\n"))
		}
	}
	for _, m := range ahead {
		if m.Origin != plan.OriginBase && m.Origin != plan.OriginSandbox {
			t.Errorf("mounted ahead: %s %s of %s; only the system base and the sandbox's own steps may be", m.Kind, m.Target, m.Origin)
		}
	}

	b := session(small) // begins as a did
	if s := pool.Stats(); s.Taken != 2 || s.MountedAhead != 1 {
		t.Fatalf("pool stats %+v, want session b on the warm init, going on from the steps it mounted ahead", s)
	}
	wantTmp(run(b), small)
	b.Close()

	ready("refilled after b", func(s PoolStats) bool { return s.Taken == 2 && s.Ready == 1 })
	c := session(large) // another /tmp: begins otherwise
	if s := pool.Stats(); s.Taken != 3 || s.MountedAhead != 1 {
		t.Fatalf("pool stats %+v, want session c on the warm init, not counted as mounted ahead", s)
	}
	out := run(c)
	wantTmp(out, large)
	if strings.Contains(out, "size="+itoa(small>>10)+"k") {
		t.Errorf("session c sees the %d MiB /tmp mounted ahead for another plan:\n%s", small>>20, out)
	}
	c.Close()

	// A supervisor whose record of what was mounted ahead is wrong (here:
	// the /tmp size of d's plan, while the init mounted c's) is refused by
	// the init, which compares the plan with what it mounted itself.
	ready("refilled after c", func(s PoolStats) bool { return s.Taken == 3 && s.Ready == 1 })
	pool.st.mu.Lock()
	in := pool.st.ready[0].in
	forged := slices.Clone(in.premounted.steps)
	i := slices.IndexFunc(forged, func(m plan.Mount) bool { return m.Kind == plan.KindTmpfs && m.Target == "/tmp" })
	if i < 0 {
		pool.st.mu.Unlock()
		t.Fatal("the warm init mounted no /tmp ahead")
	}
	forged[i].Size = small
	in.premounted.steps = forged
	pool.st.mu.Unlock()
	p, err := policy.New(policy.Spec{AllowedTools: []string{"sh"}, Budget: budget.Limits{Wall: time.Minute, Scratch: small}})
	if err != nil {
		t.Fatal(err)
	}
	if d, err := NewSession(context.Background(), Config{Policy: p, Pool: pool}); err == nil {
		d.Close()
		t.Error("a session started on an init whose steps mounted ahead differ from its plan's beginning; want the init to refuse it")
	} else if !strings.Contains(err.Error(), "mounted ahead") {
		t.Errorf("NewSession = %v; want the init's refusal of a plan that does not begin with what it mounted ahead", err)
	}
	pool.Close()
	checkFDs(t, before, "the pool and its sessions closed")
}

func itoa(n int64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}

// TestWarmInitPremountFails: a warm init that cannot mount the steps it
// is sent answers so, keeps nothing of them, and stays usable; the pool
// then starts its sandbox's plan from the beginning.
func TestWarmInitPremountFails(t *testing.T) {
	airtest.RequireUserNS(t)
	airtest.RequireLandlockABI(t, 4)
	if !namespace.HostAdmin() {
		t.Skip("only a root supervisor's warm inits mount ahead; this test runs without CAP_SYS_ADMIN on the host")
	}
	// The init's death signal is tied to the thread that started it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before := openFDs(t)
	bad := premountSet{steps: []plan.Mount{
		{Kind: plan.KindSymlink, Source: "no/such/folder", Target: "/x", Origin: plan.OriginSandbox},
		{Kind: plan.KindFile, Target: "/x/file", Data: "data", Origin: plan.OriginSandbox}, // below a dangling link: fails
		{Kind: plan.KindBind, Source: "/usr/lib", Target: "/usr/lib", Origin: plan.OriginBase, Recursive: true},
	}}
	in, err := startWarm("", nil, bad)
	if err != nil {
		t.Fatalf("startWarm with steps that cannot be mounted: %v; want an init that mounted none", err)
	}
	if len(in.premounted.steps) != 0 {
		t.Errorf("the init mounted %d steps ahead that could not all be mounted; want none", len(in.premounted.steps))
	}
	if in.premounted.begins(&plan.Plan{Mounts: bad.steps}) {
		t.Error("an init that mounted nothing ahead claims a plan begins with its steps")
	}
	select {
	case <-in.ctl.exited:
		t.Fatalf("the init exited after a failed premount; want it waiting for a plan (stderr: %s)", in.ctl.stderr)
	case <-time.After(50 * time.Millisecond):
	}
	in.discard()
	checkFDs(t, before, "the init was discarded")
}
