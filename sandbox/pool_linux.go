package sandbox

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/internal/enforce/cgroup"
	"github.com/airlock-sandbox/airlock/internal/enforce/namespace"
	"github.com/airlock-sandbox/airlock/internal/enforce/nsinit"
	"github.com/airlock-sandbox/airlock/plan"
)

// poolState is a Pool's warm inits and counters.
//
// Each warm init has a goroutine of its own, locked to the thread that
// started it: the init's death signal (Pdeathsig) is tied to that thread,
// so the thread must live as long as the init. When a sandbox takes the
// init, that goroutine runs the sandbox's supervisor (box.supervise) and
// ends with it, as the goroutine startBox starts does on the cold path.
type poolState struct {
	p    *Pool
	done chan struct{} // closed by close
	wg   sync.WaitGroup

	mu       sync.Mutex
	changed  *sync.Cond  // on mu: an init became ready or a start ended
	ready    []*warmInit // guarded by mu: oldest first
	starting int         // guarded by mu
	closed   bool        // guarded by mu
	refilled bool        // guarded by mu: NoRefill pools fill once
	failures int         // guarded by mu: consecutive failed starts
	retryAt  time.Time   // guarded by mu: no start before, after a failure
	retry    *time.Timer // guarded by mu: the fill after retryAt
	counts   PoolStats   // guarded by mu: Taken, Misses, Failed, Expired
	// steps are the bind steps of the last plan a warm init was given:
	// what the next warm inits clone ahead (precloneBinds); ahead is the
	// beginning of that plan they mount ahead (initProc.premount).
	steps []plan.Mount // guarded by mu
	ahead premountSet  // guarded by mu
}

// warmInit is an init waiting in the pool, and the channel on which the
// sandbox that takes it hands its goroutine the supervisor to run.
type warmInit struct {
	in  *initProc
	run chan func() // buffered: take never blocks on it
}

func (st *poolState) start(p *Pool) error {
	st.p = p
	st.done = make(chan struct{})
	st.changed = sync.NewCond(&st.mu)
	st.fill()
	return nil
}

// refillDelay is how long after a sandbox on a warm init is ready the
// pool starts its replacement. Starting it at once, the replacement's
// cgroup, clone and Go start-up competed for the CPU with the taker's
// last steps (the session's file guard, the API's reply): on 2 cores a
// new session from airlock serve took 5.9 ms instead of 5.0 (median).
// A sandbox asked for meanwhile finds none ready and none starting, and
// starts cold, as it would during a start anyway.
const refillDelay = 2 * time.Millisecond

// fill starts inits until Size are ready or starting, unless the pool is
// closed, does not refill, or waits out a failure.
func (st *poolState) fill() {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed || (st.p.cfg.NoRefill && st.refilled) {
		return
	}
	if wait := time.Until(st.retryAt); wait > 0 {
		if st.retry == nil {
			st.retry = time.AfterFunc(wait, func() {
				st.mu.Lock()
				st.retry = nil
				st.mu.Unlock()
				st.fill()
			})
		}
		return
	}
	st.refilled = true
	for len(st.ready)+st.starting < st.p.cfg.Size {
		st.starting++
		st.wg.Add(1)
		go st.keep()
	}
}

// keep starts one init and keeps it until a sandbox takes it (then runs
// that sandbox's supervisor), it expires, it dies, or the pool closes.
func (st *poolState) keep() {
	// A taken init's goroutine leaves the pool's count before it runs the
	// sandbox: Close waits for the pool's inits, not for the sandboxes.
	counted := true
	defer func() {
		if counted {
			st.wg.Done()
		}
	}()
	supervise := func(f func()) {
		counted = false
		st.wg.Done()
		f()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	st.mu.Lock()
	steps, ahead := st.steps, st.ahead
	st.mu.Unlock()
	in, err := startWarm(st.p.cfg.Executable, steps, ahead)
	st.mu.Lock()
	st.starting--
	if err != nil {
		st.counts.Failed++
		st.failures++
		backoff := min(time.Second<<min(st.failures-1, 6), time.Minute)
		st.retryAt = time.Now().Add(backoff)
		st.changed.Broadcast()
		closed := st.closed
		st.mu.Unlock()
		if !closed {
			st.p.cfg.Logger.Warn("sandbox pool: a warm init failed to start; retrying later", "err", err, "retry_in", backoff)
			st.fill()
		}
		return
	}
	st.failures = 0
	if st.closed {
		st.changed.Broadcast()
		st.mu.Unlock()
		in.discard()
		return
	}
	w := &warmInit{in: in, run: make(chan func(), 1)}
	st.ready = append(st.ready, w)
	st.changed.Broadcast()
	st.mu.Unlock()

	expiry := time.NewTimer(st.p.cfg.MaxAge)
	defer expiry.Stop()
	expired := false
	select {
	case f := <-w.run:
		supervise(f) // this goroutine, on this thread, supervises the sandbox
		return
	case <-expiry.C:
		expired = true
	case <-st.done:
	case <-in.ctl.exited:
	}
	if !st.remove(w, expired) {
		supervise(<-w.run) // taken meanwhile: its sandbox hands over its supervisor now
		return
	}
	in.discard()
	st.fill()
}

// startWarm starts an init for any sandbox of the namespaces isolation:
// every namespace, the host uid a root supervisor maps to, and an empty
// cgroup (none when the host has none for it: groupErr says why). A root
// supervisor also clones the bind steps in steps ahead (precloneBinds)
// and has the init mount the steps of ahead while it waits (premount).
func startWarm(exe string, steps []plan.Mount, ahead premountSet) (*initProc, error) {
	if err := checkInit(exe); err != nil {
		return nil, err
	}
	flags, err := namespace.CloneFlags(plan.DefaultNamespaces())
	if err != nil {
		return nil, err
	}
	g, h, gerr := newGroup(cgroup.Config{})
	if gerr != nil {
		g = nil
	}
	in, err := startInit(exe, flags, g, len(ahead.steps) > 0)
	if err != nil {
		if g != nil {
			_ = g.Destroy() // empty: the init never started in it
		}
		return nil, err
	}
	in.group, in.groupErr, in.host = g, gerr, h
	if in.premountArg {
		if err := in.premount(ahead); err != nil {
			in.discard()
			return nil, fmt.Errorf("warm init: mount ahead: %w", err)
		}
	}
	if in.root {
		// The binds mounted ahead need no clone at hand-over.
		in.cloned = precloneBinds(slices.DeleteFunc(slices.Clone(steps), func(m plan.Mount) bool {
			return slices.Contains(in.premounted.steps, m)
		}))
	}
	return in, nil
}

// learn keeps pl's bind steps, and the steps it begins with that can be
// mounted ahead, for the inits started from now on. The trust bundle of a
// policy with credentials is the run's own (its CA), so the steps mounted
// ahead end before it.
func (st *poolState) learn(pl *plan.Plan) {
	var steps []plan.Mount
	for _, m := range pl.Mounts {
		if clonedAhead(m) && len(steps) < maxPreclones {
			steps = append(steps, m)
		}
	}
	ahead := premountSet{procFallback: pl.ProcFallback}
	for _, m := range pl.Mounts {
		if !nsinit.Premountable(m) || len(ahead.steps) == maxPremount || m.Target == plan.CABundlePath {
			break
		}
		ahead.steps = append(ahead.steps, m)
	}
	st.mu.Lock()
	st.steps, st.ahead = steps, ahead
	st.mu.Unlock()
}

// remove takes w out of the ready list, counting it as expired when it
// did; false when a sandbox took it first.
func (st *poolState) remove(w *warmInit, expired bool) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	i := slices.Index(st.ready, w)
	if i < 0 {
		return false
	}
	st.ready = slices.Delete(st.ready, i, i+1)
	if expired {
		st.counts.Expired++
	}
	return true
}

// take returns a warm init fit for a sandbox of cfg compiled to pl, or
// nil. When none is ready but one is starting, it waits for that start to
// end: an init half started is sooner ready than a cold one.
func (st *poolState) take(cfg Config, pl *plan.Plan) *warmInit {
	flags, err := namespace.CloneFlags(pl.Namespaces)
	st.mu.Lock()
	defer st.mu.Unlock()
	if err != nil || cfg.Executable != st.p.cfg.Executable || pl.NoNamespaces {
		st.counts.Misses++
		return nil
	}
	for !st.closed {
		if len(st.ready) > 0 {
			w := st.ready[0]
			st.ready = st.ready[1:]
			if w.in.flags != flags {
				// Another set of namespaces than the pool's: a plan of
				// another build. Leave the init to expire.
				st.ready = append(st.ready, w)
				break
			}
			// Replaced once its sandbox is ready (pooledBackend): a start
			// now would compete for the CPU with that sandbox's set-up.
			st.counts.Taken++
			return w
		}
		if st.starting == 0 {
			break
		}
		st.changed.Wait()
	}
	st.counts.Misses++
	return nil
}

func (st *poolState) close() {
	st.mu.Lock()
	if st.closed {
		st.mu.Unlock()
		return
	}
	st.closed = true
	if st.retry != nil {
		st.retry.Stop()
	}
	close(st.done)
	st.changed.Broadcast()
	st.mu.Unlock()
	st.wg.Wait()
}

func (st *poolState) stats() PoolStats {
	st.mu.Lock()
	defer st.mu.Unlock()
	s := st.counts
	s.Ready, s.Starting = len(st.ready), st.starting
	return s
}

// pooledBackend runs a sandbox of the namespaces isolation on a warm init.
type pooledBackend struct {
	w  *warmInit
	st *poolState // the pool it came from, refilled once the sandbox is ready
}

// launch gives the warm init b's limits and plan. A warm init whose
// cgroup cannot take b's limits is discarded and b starts cold, so that
// the refusal or the downgrade is the cold path's.
//
// Preconditions:
//   - runs on the warm init's own goroutine (startBox sends it there)
func (pb pooledBackend) launch(b *box) (*control, error) {
	in := pb.w.in
	// The pool replaces the init refillDelay after b is ready or has failed.
	b.onReady(func() { time.AfterFunc(refillDelay, pb.st.fill) })
	pb.st.learn(b.pl)
	var unfit bool
	err := b.openStageAndLimits("namespaces", func() (*limits, error) {
		l, err := warmLimits(in, b.pl.Limits, b.sink)
		unfit = err != nil && in.group != nil
		return l, err
	})
	if unfit {
		in.discard()
		b.enf = Enforcement{FSDenials: b.enf.FSDenials}
		return nsBackend{}.launch(b)
	}
	if err != nil {
		in.discard()
		return nil, err
	}
	if in.premounted.begins(b.pl) {
		pb.st.mu.Lock()
		pb.st.counts.MountedAhead++
		pb.st.mu.Unlock()
	}
	return b.adopt(in)
}

// warmLimits writes lim to the warm init's cgroup and gives the group to
// the run, or decides without one as the cold path does (newLimits) when
// the host had none for the init.
func warmLimits(in *initProc, lim plan.Limits, sink audit.Sink) (*limits, error) {
	if in.group == nil {
		return decideLimits(lim, sink, nil, in.host, in.groupErr)
	}
	if err := in.group.Limit(cgroup.Config{MemoryBytes: lim.Memory, Pids: lim.Pids}); err != nil {
		return nil, err
	}
	l := &limits{host: in.host, maxCPU: lim.CPU, group: in.group}
	in.group = nil // the run's now: its teardown destroys it
	return l, nil
}
