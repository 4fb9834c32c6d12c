package sandbox

import (
	"fmt"
	"maps"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/internal/writeback"
	"github.com/airlock-sandbox/airlock/plan"
	"github.com/airlock-sandbox/airlock/policy/budget"
	"github.com/airlock-sandbox/airlock/policy/pathspec"
)

// staging is the supervisor's side of the staged fs_write grants (see
// plan/stage.go): the host folders opened when the run starts,
// the stage the init hands over, and the copy back when the init is gone.
type staging struct {
	pl     *plan.Plan
	grants []writeback.Grant // host fds opened before the init starts

	mu      sync.Mutex
	stageFD int            // guarded by mu; -1 until the init sends it
	roots   map[string]int // guarded by mu; grant target -> fd of its root inside the sandbox
	base    int64          // guarded by mu; stage bytes in use before the command ran (staged file copies)
	done    bool           // guarded by mu; the copy back ran
}

// openStaging opens the host side of every staged grant of pl, before
// anything is started: a grant whose path holds a symlink, or is missing,
// refuses the run here.
func openStaging(pl *plan.Plan) (*staging, error) {
	st := &staging{pl: pl, stageFD: -1, roots: map[string]int{}}
	for _, m := range pl.Mounts {
		if m.Kind != plan.KindOverlay && m.Kind != plan.KindStagedFile {
			continue
		}
		fd, err := writeback.OpenHost(m.Source)
		if err != nil {
			st.close()
			return nil, fmt.Errorf("%w (grant the real path: airlock never follows a symlink in a grant)", err)
		}
		st.grants = append(st.grants, writeback.Grant{Host: m.Source, Stage: fmt.Sprint(m.Stage), File: m.Kind == plan.KindStagedFile, HostFD: fd})
	}
	return st, nil
}

// receive takes the fds of the init's "mounts" message: the stage first
// (when the message says so), then the grant roots in plan order.
func (st *staging) receive(staged bool, fds []int) error {
	var targets []string
	for _, m := range st.pl.Mounts {
		if m.Grant() {
			targets = append(targets, m.Target)
		}
	}
	want := len(targets)
	if staged {
		want++
	}
	if len(fds) != want {
		closeFDs(fds)
		return fmt.Errorf("airlock bug: the init sent %d mount fds, want %d", len(fds), want)
	}
	if staged {
		st.setStage(fds[0])
		fds = fds[1:]
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	for i, t := range targets {
		st.roots[t] = fds[i]
	}
	return nil
}

// setStage takes fd as the stage; what is on it already (staged files'
// copies) is not the run's writing.
func (st *staging) setStage(fd int) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.stageFD = fd
	if used, _, err := writeback.Usage(fd); err == nil {
		st.base = used
	}
}

// usage returns the bytes the run added to its staged grants so far, and
// whether the stage is full.
func (st *staging) usage() (int64, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.stageFD < 0 {
		return 0, false
	}
	used, full, err := writeback.Usage(st.stageFD)
	if err != nil {
		return 0, false
	}
	return max(used-st.base, 0), full
}

// watch halts the run when the stage is full: a write past max_write has
// failed with ENOSPC inside, and a blown budget is a hard halt. It looks
// every watchMax (the tmpfs refuses the write at once; shutdown looks
// again), not every 50 ms: that cost every idle run 3.3 ms of CPU a second.
func (st *staging) watch(stop <-chan struct{}, full func()) {
	t := time.NewTicker(watchMax)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		if _, f := st.usage(); f {
			full()
			return
		}
	}
}

// writeBack copies the stage to the host. It runs once, after every
// process of the sandbox is dead.
func (st *staging) writeBack(b *box) *writeback.Result {
	st.mu.Lock()
	if st.done || st.stageFD < 0 {
		st.mu.Unlock()
		return nil
	}
	st.done = true
	stageFD := st.stageFD
	st.mu.Unlock()
	// The copy back walks host paths; the plan's protections and mount
	// targets are the sandbox's paths (placed grants at their places).
	p, view := b.cfg.Policy, b.view
	protected := map[string]string{}
	for _, pr := range st.pl.Protected {
		protected[pr] = "protected (the target of a protected path's symlink)"
	}
	var pins []string
	for _, m := range st.pl.Mounts {
		if m.Grant() || m.Kind == plan.KindReadonly || m.Kind == plan.KindHide {
			pin := m.Target
			if host, ok := p.HostOf(pin); ok {
				pin = host
			}
			pins = append(pins, pin)
		}
	}
	res, rules := writeback.WriteBack(writeback.Config{
		StageFD:  stageFD,
		MaxBytes: p.Budget().Write,
		Grants:   st.grants,
		Refuse: func(path string) string {
			inside := p.Inside(path)
			if why := view.WriteBackRefusal(inside); why != "" {
				return why
			}
			for pr, why := range protected {
				if pathspec.Within(pr, inside) {
					return why
				}
			}
			return ""
		},
		Pinned: pins,
	})
	for i, e := range res.Refused {
		// The operator may unprotect a path (fs_unprotect), never the
		// sandbox: the suggestion is theirs, and never fs_write.
		b.sink.Emit(audit.Event{Time: time.Now(), Kind: audit.Deny, Layer: audit.LayerFS, Op: "write back", Target: e.Path, Rule: rules[i],
			Message: "kept off the host: " + e.Reason, Suggestion: p.SuggestWriteBack(e.Path).String()})
	}
	for _, e := range res.Failed {
		b.log.Error("write back", "path", e.Path, "err", e.Reason)
	}
	for _, g := range st.grants {
		if writeback.Moved(g) {
			b.sink.Emit(audit.Event{Time: time.Now(), Kind: audit.Info, Layer: audit.LayerFS, Op: "write back", Target: g.Host, Rule: "fs_write",
				Message: "the grant's host path no longer leads to the folder granted at the start (it was renamed or replaced on the host); the writes went to the folder granted"})
			res.Moved = append(res.Moved, g.Host)
		}
	}
	return &res
}

// rootFDs returns the grant roots as the sandbox sees them, by grant path.
// The fds stay the staging's; callers dup what they keep.
func (st *staging) rootFDs() map[string]int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return maps.Clone(st.roots)
}

// close releases every fd. The copy back must have run (or been given up).
func (st *staging) close() {
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, g := range st.grants {
		unix.Close(g.HostFD)
	}
	st.grants = nil
	if st.stageFD >= 0 {
		unix.Close(st.stageFD)
		st.stageFD = -1
	}
	for t, fd := range st.roots {
		unix.Close(fd)
		delete(st.roots, t)
	}
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// haltFull is the halt for a full stage.
func haltFull(b *box) func() {
	return func() {
		b.halt(budget.MaxWrite, "the sandbox wrote max_write bytes to its fs_write grants; the write past it failed (no space left), and it was stopped")
		b.kill()
	}
}
