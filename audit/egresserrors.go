package audit

import "sync"

// MaxEgressErrors is how many distinct upstream failures (op and target)
// an EgressErrorLog itemizes between two Takes; further ones are counted.
const MaxEgressErrors = 16

// EgressFailure is one distinct upstream failure of the egress proxy: the
// first event of its op and target (message cut with Truncate), and how
// many there were.
type EgressFailure struct {
	Op      string // OpResolveFailed, OpDialFailed or OpUpstreamFailed
	Target  string // host:port, as granted
	Message string // the first failure's reason
	Count   int64
}

// EgressErrors is the upstream failures of one stretch of a run or
// session: the distinct ones in the order they first happened, and the
// count of all of them (Total ≥ the sum of the Counts; the rest are
// past MaxEgressErrors).
type EgressErrors struct {
	Failures []EgressFailure
	Total    int64
}

// EgressErrorLog is a Sink that keeps a bounded summary of the egress
// proxy's upstream failures (Info events with OpResolveFailed,
// OpDialFailed or OpUpstreamFailed) and ignores every other event. The
// sandbox chooses which granted names it asks for and how often, so what
// it keeps is bounded: at most MaxEgressErrors failures with their target
// and message cut as in DenialLog. The zero EgressErrorLog is ready to
// use; it is safe for concurrent use.
type EgressErrorLog struct {
	mu       sync.Mutex
	index    map[[2]string]int // guarded by mu; op and target -> position
	failures []EgressFailure   // guarded by mu; since the last Take
	total    int64             // guarded by mu; since the last Take
}

// IsEgressFailure reports whether e is an upstream failure of the egress
// proxy.
func IsEgressFailure(e Event) bool {
	if e.Kind != Info {
		return false
	}
	switch e.Op {
	case OpResolveFailed, OpDialFailed, OpUpstreamFailed:
		return true
	}
	return false
}

// Emit keeps e when it is an upstream failure.
func (l *EgressErrorLog) Emit(e Event) {
	if !IsEgressFailure(e) {
		return
	}
	target := Truncate(e.Target, MaxTargetBytes)
	k := [2]string{e.Op, target}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total++
	if i, ok := l.index[k]; ok {
		l.failures[i].Count++
		return
	}
	if len(l.failures) >= MaxEgressErrors {
		return
	}
	if l.index == nil {
		l.index = map[[2]string]int{}
	}
	l.index[k] = len(l.failures)
	l.failures = append(l.failures, EgressFailure{Op: e.Op, Target: target, Message: Truncate(e.Message, MaxMessageBytes), Count: 1})
}

// Take returns the failures since the last Take (or the start) and starts
// a new stretch.
func (l *EgressErrorLog) Take() EgressErrors {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := EgressErrors{Failures: l.failures, Total: l.total}
	l.index, l.failures, l.total = nil, nil, 0
	return s
}
