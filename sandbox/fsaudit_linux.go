package sandbox

import (
	"context"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/internal/enforce/fsaudit"
	"github.com/airlock-sandbox/airlock/policy"
)

// One audit collector serves every run of the process; it is started by
// the first run that asks for filesystem denials and closed (restoring the
// host's audit switch) when the last one ends.
var fsAudit struct {
	mu    sync.Mutex
	col   *fsaudit.Collector // guarded by mu
	users int                // guarded by mu
}

// acquireFSAudit returns the shared collector, or an error saying why
// filesystem denials cannot be reported on this host.
func acquireFSAudit() (*fsaudit.Collector, error) {
	fsAudit.mu.Lock()
	defer fsAudit.mu.Unlock()
	if fsAudit.col == nil {
		if err := fsaudit.Available(); err != nil {
			return nil, err
		}
		col, err := fsaudit.Start(fsaudit.Options{SelfTestPath: "/"})
		if err != nil {
			return nil, err
		}
		fsAudit.col = col
	}
	fsAudit.users++
	return fsAudit.col, nil
}

func releaseFSAudit() {
	fsAudit.mu.Lock()
	defer fsAudit.mu.Unlock()
	fsAudit.users--
	if fsAudit.users == 0 && fsAudit.col != nil {
		_ = fsAudit.col.Close() // restores the audit switch if we turned it on
		fsAudit.col = nil
	}
}

// fsReported explains what a report's filesystem denials cover.
const fsReported = "reported from Landlock audit records for paths that exist inside the sandbox but are not granted; " +
	"paths outside every grant do not exist inside at all, so opening them fails with ENOENT and leaves no record"

// fsDenials is the filesystem-denial side of one run or session.
type fsDenials struct {
	col *fsaudit.Collector
	run *fsaudit.Run

	mu   sync.Mutex
	seen []int // guarded by mu: the Count of each denial (by index) when last emitted; sessions emit per exec
}

// startFSAudit prepares denial collection when the config asks for it and
// records in the report whether it works here.
func startFSAudit(b *box) *fsDenials {
	if !b.cfg.FSAudit {
		b.enf.FSDenials = "off: filesystem denials are enforced but not itemized (airlock run --fs-audit, or Config.FSAudit, turns it on)"
		return nil
	}
	col, err := acquireFSAudit()
	if err != nil {
		b.enf.FSDenials = "unavailable: " + err.Error()
		return nil
	}
	b.enf.FSDenials = fsReported
	return &fsDenials{col: col}
}

// track attributes the records of the init's Landlock domain to this run.
//
// Preconditions:
//   - the init has not restricted itself yet (it waits for "go")
func (f *fsDenials) track(pid int) {
	if f != nil {
		f.run = f.col.Track(pid)
	}
}

// emit sends the denials not yet emitted to the run's sink. With settle,
// it first waits (bounded) until the kernel has released the domain;
// without, until the kernel's records so far are read (Collector.Sync).
func (f *fsDenials) emit(b *box, settle bool) {
	if f == nil || f.run == nil {
		return
	}
	if !settle {
		// The sandbox lives on (a session between execs): wait until the
		// records of what has exited are read, not for the domain's end.
		ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
		if err := f.col.Sync(ctx); err != nil {
			b.log.Debug("fs-audit sync", "err", err) // the late records reach the next report
		}
		cancel()
	}
	ds := f.run.Denials()
	if settle {
		ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
		if got, err := f.run.Settle(ctx); err == nil || len(got) > len(ds) {
			ds = got
		}
		cancel()
	}
	// A denial is emitted once for each emit that saw it happen again: a
	// session exec that repeats an earlier exec's denial has it in its own
	// report too.
	var fresh []fsaudit.Denial
	f.mu.Lock()
	for i, d := range ds {
		if i == len(f.seen) {
			f.seen = append(f.seen, 0)
		}
		if d.Count > f.seen[i] {
			f.seen[i] = d.Count
			fresh = append(fresh, d)
		}
	}
	f.mu.Unlock()
	for _, d := range fresh {
		e := audit.Event{Time: time.Now(), Kind: audit.Deny, Layer: d.Layer, Op: d.Op, Target: d.Target, Rule: d.Rule, Message: d.Message, Hint: d.Hint}
		if c, ok := d.Grant(); ok {
			e.Suggestion = b.cfg.Policy.Suggest(&policy.DenyError{Cap: c, Op: d.Op, Subject: d.Target}).String()
		}
		b.sink.Emit(e)
	}
	if f.run.Stats().Incomplete() {
		b.enf.FSDenials = fsReported + "; some records were lost, so the list may be incomplete"
	}
}

// close ends collection for the run.
func (f *fsDenials) close() {
	if f == nil {
		return
	}
	if f.run != nil {
		f.run.Close()
	}
	releaseFSAudit()
}
