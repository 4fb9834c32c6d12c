package fsaudit

import (
	"context"
	"sync"
)

// Bounds on what a Collector keeps, so that a busy host or a program that
// is denied in a loop cannot grow the supervisor's memory without limit.
const (
	// maxDomains is how many domains nobody tracks (yet) are remembered,
	// oldest forgotten first. Track can claim one after the fact.
	maxDomains = 1024
	// maxPending is how many records are kept per domain whose
	// allocation record has not been seen or whose run is not tracked.
	maxPending = 64
	// maxDenials is how many distinct denials a Run keeps.
	maxDenials = 1000
)

// tracker attributes records to runs. It is the portable, OS-free core of a
// Collector: records go in (access, domain), runs come out (track).
type tracker struct {
	// tgid maps the thread id of a domain record to its thread group
	// (process) id; it returns tid itself when it cannot tell.
	tgid func(tid int) int
	// selfTest is the path the sandbox init's self-test opens.
	selfTest string

	mu      sync.Mutex
	domains map[uint64]*domain // guarded by mu
	order   []uint64           // guarded by mu; unclaimed domains, oldest first
	runs    map[int]*Run       // guarded by mu; by the pid given to Track
	lost    int                // guarded by mu; receive overflows
	changed chan struct{}      // guarded by mu; closed and replaced on every change
}

// domain is what is known about one Landlock domain.
type domain struct {
	id      uint64
	owner   int            // process that created it; 0 until its allocation record
	run     *Run           // nil while unclaimed
	pending []accessRecord // records seen while unclaimed, at most maxPending
	first   bool           // the next record is the domain's first
	freed   bool           // its release record was seen
	denials uint64         // the kernel's count from the release record
}

func newTracker(selfTest string, tgid func(int) int) *tracker {
	return &tracker{
		tgid:     tgid,
		selfTest: selfTest,
		domains:  make(map[uint64]*domain),
		runs:     make(map[int]*Run),
		changed:  make(chan struct{}),
	}
}

// notify wakes every waiter. Callers hold mu.
func (t *tracker) notify() {
	close(t.changed)
	t.changed = make(chan struct{})
}

// lookup returns the domain with id, creating it unclaimed. Callers hold mu.
func (t *tracker) lookup(id uint64) *domain {
	if d, ok := t.domains[id]; ok {
		return d
	}
	d := &domain{id: id, first: true}
	t.domains[id] = d
	t.order = append(t.order, id)
	for len(t.order) > maxDomains {
		old := t.order[0]
		t.order = t.order[1:]
		if od := t.domains[old]; od != nil && od.run == nil {
			delete(t.domains, old)
		}
	}
	return d
}

// access handles one AUDIT_LANDLOCK_ACCESS record.
func (t *tracker) access(r accessRecord) {
	t.mu.Lock()
	defer t.mu.Unlock()
	d := t.lookup(r.domain)
	if d.run != nil {
		d.run.add(d, r)
		t.notify()
		return
	}
	if len(d.pending) < maxPending {
		d.pending = append(d.pending, r)
	} else {
		d.pending[len(d.pending)-1] = r // keep the first ones; they hold the self-test
	}
}

// domainEvent handles one AUDIT_LANDLOCK_DOMAIN record.
func (t *tracker) domainEvent(r domainRecord) {
	var owner int
	if r.allocated {
		owner = t.tgid(r.pid) // outside mu: it reads /proc
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	d := t.lookup(r.domain)
	if !r.allocated {
		d.freed, d.denials = true, r.denials
		if d.run != nil {
			d.run.domains[d.id] = &domainStat{freed: true, denials: r.denials}
			delete(t.domains, d.id) // no record can follow a release
			t.notify()
		}
		return
	}
	if d.owner == 0 {
		d.owner = owner
	}
	if run := t.runs[d.owner]; run != nil && d.run == nil {
		t.claim(d, run)
		t.notify()
	}
}

// claim gives d and its pending records to run. Callers hold mu.
func (t *tracker) claim(d *domain, run *Run) {
	d.run = run
	run.domains[d.id] = &domainStat{freed: d.freed, denials: d.denials}
	for _, r := range d.pending {
		run.add(d, r)
	}
	d.pending = nil
}

// track starts attributing the domains created by process pid (and so
// every record of its descendants) to a new Run, including domains already
// seen.
func (t *tracker) track(pid int) *Run {
	run := &Run{t: t, pid: pid, index: make(map[key]int), domains: make(map[uint64]*domainStat)}
	t.mu.Lock()
	defer t.mu.Unlock()
	run.lost = t.lost
	t.runs[pid] = run
	for _, d := range t.domains {
		if d.run == nil && d.owner == pid {
			t.claim(d, run)
			if d.freed {
				delete(t.domains, d.id)
			}
		}
	}
	t.notify()
	return run
}

// overflow records that records were lost before they could be read.
func (t *tracker) overflow() {
	t.mu.Lock()
	t.lost++
	t.notify()
	t.mu.Unlock()
}

// Run collects the denials of one sandbox: every Landlock domain that its
// init process created, which its descendants inherit. It is safe for
// concurrent use.
type Run struct {
	t   *tracker
	pid int

	// The fields below are guarded by t.mu.
	denials []Denial
	index   map[key]int            // position in denials
	domains map[uint64]*domainStat // claimed domains
	records int                    // access records attributed, self-tests included
	dropped int                    // distinct denials beyond maxDenials
	lost    int                    // t.lost when the run was tracked
	closed  bool
}

// domainStat is what a Run knows of one of its domains.
type domainStat struct {
	freed   bool
	denials uint64 // the kernel's count, known once freed
}

// add records one access record of d. Callers hold t.mu.
func (r *Run) add(d *domain, rec accessRecord) {
	first := d.first
	d.first = false
	r.records++
	if r.closed {
		return
	}
	den := denialOf(rec)
	// landlock.SelfTest opens its path right after restricting, so it is
	// the first denial of the domain the init created; it is not the
	// command's.
	if first && r.t.selfTest != "" && den.Target == r.t.selfTest {
		return
	}
	k := key{den.Op, den.Target, den.Rule}
	if i, ok := r.index[k]; ok {
		r.denials[i].Count++
		return
	}
	if len(r.denials) >= maxDenials {
		r.dropped++
		return
	}
	r.index[k] = len(r.denials)
	r.denials = append(r.denials, den)
}

// Denials returns the distinct denials seen so far, oldest first. The
// kernel delivers records asynchronously: call Settle once the sandbox has
// exited to wait for the last ones.
func (r *Run) Denials() []Denial {
	r.t.mu.Lock()
	defer r.t.mu.Unlock()
	out := make([]Denial, len(r.denials))
	for i, d := range r.denials {
		d.Blockers = append([]string(nil), d.Blockers...)
		out[i] = d
	}
	return out
}

// Wait blocks until done reports true for the denials seen so far, or ctx
// ends; it returns the denials either way, with ctx's error in the second
// case. done is called with no lock held.
func (r *Run) Wait(ctx context.Context, done func([]Denial) bool) ([]Denial, error) {
	for {
		r.t.mu.Lock()
		changed := r.t.changed
		r.t.mu.Unlock()
		ds := r.Denials()
		if done(ds) {
			return ds, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return r.Denials(), ctx.Err()
		}
	}
}

// Settle waits until the kernel has released every domain of the run,
// after which no record of the run can follow, and returns the denials. It
// needs at least one domain, which the init's self-test guarantees; call
// it once every process of the sandbox has exited, with a deadline (a few
// hundred milliseconds are plenty: the release follows the last process's
// exit through an RCU grace period and a work queue). When ctx ends first
// it returns the denials so far and ctx's error.
func (r *Run) Settle(ctx context.Context) ([]Denial, error) {
	_, err := r.Wait(ctx, func([]Denial) bool {
		r.t.mu.Lock()
		defer r.t.mu.Unlock()
		settled := len(r.domains) > 0
		for _, st := range r.domains {
			settled = settled && st.freed
		}
		return settled
	})
	return r.Denials(), err
}

// Stats says how complete a Run's denials are.
type Stats struct {
	// Records is the number of access records attributed to the run,
	// self-test included.
	Records int
	// KernelDenials is the sum of the denials the kernel counted in the
	// run's released domains, logged or not. When it exceeds Records, the
	// kernel dropped records (audit backlog or rate limit) and Denials is
	// incomplete. It covers released domains only: compare after Settle
	// returned nil.
	KernelDenials uint64
	// Dropped is the number of distinct denials beyond the 1000 a Run keeps.
	Dropped int
	// Lost is the number of times the collector's socket overflowed since
	// the run was tracked; records of any run may be missing.
	Lost int
}

// Incomplete reports whether denials are known to be missing.
func (s Stats) Incomplete() bool {
	return s.Dropped > 0 || s.Lost > 0 || s.KernelDenials > uint64(s.Records)
}

// Stats returns the run's completeness counters.
func (r *Run) Stats() Stats {
	r.t.mu.Lock()
	defer r.t.mu.Unlock()
	s := Stats{Records: r.records, Dropped: r.dropped, Lost: r.t.lost - r.lost}
	for _, st := range r.domains {
		s.KernelDenials += st.denials
	}
	return s
}

// Close stops tracking: the run's denials stay readable, and its pid may
// be tracked again by a later run.
func (r *Run) Close() {
	r.t.mu.Lock()
	defer r.t.mu.Unlock()
	r.closed = true
	if r.t.runs[r.pid] == r {
		delete(r.t.runs, r.pid)
	}
	for id, d := range r.t.domains {
		if d.run == r {
			delete(r.t.domains, id)
		}
	}
}
