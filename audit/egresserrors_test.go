package audit

import (
	"fmt"
	"strings"
	"testing"
)

func TestEgressErrorLog(t *testing.T) {
	var l EgressErrorLog
	l.Emit(Event{Kind: Deny, Op: OpDialFailed, Target: "a:1"})            // not Info: ignored
	l.Emit(Event{Kind: Info, Op: OpDial, Target: "a:1"})                  // success: ignored
	l.Emit(Event{Kind: Info, Op: "connect", Target: "a:1", Message: "x"}) // other ops: ignored
	l.Emit(Event{Kind: Info, Op: OpDialFailed, Target: "a:1", Message: "refused"})
	l.Emit(Event{Kind: Info, Op: OpDialFailed, Target: "a:1", Message: "refused again"})
	l.Emit(Event{Kind: Info, Op: OpResolveFailed, Target: "b:443", Message: "no such host"})
	l.Emit(Event{Kind: Info, Op: OpUpstreamFailed, Target: "c:443", Message: strings.Repeat("x", 5000)})
	s := l.Take()
	if s.Total != 4 || len(s.Failures) != 3 {
		t.Fatalf("Take = %+v, want 3 distinct failures of 4", s)
	}
	if f := s.Failures[0]; f.Op != OpDialFailed || f.Target != "a:1" || f.Message != "refused" || f.Count != 2 {
		t.Errorf("first failure = %+v, want the first dial failure of a:1 counted twice", f)
	}
	if m := s.Failures[2].Message; len(m) > MaxMessageBytes+32 || !strings.Contains(m, "…[+") {
		t.Errorf("a 5000-byte message is kept as %d bytes, want it cut with a marker", len(m))
	}
	if s := l.Take(); s.Total != 0 || s.Failures != nil {
		t.Errorf("second Take = %+v, want nothing", s)
	}
	// Bounded: a sandbox asking for many granted names that fail.
	for i := 0; i < 10000; i++ {
		l.Emit(Event{Kind: Info, Op: OpDialFailed, Target: fmt.Sprintf("h%d:1", i), Message: "refused"})
	}
	if s := l.Take(); len(s.Failures) != MaxEgressErrors || s.Total != 10000 {
		t.Errorf("after 10000 distinct failures: %d kept of %d, want %d of 10000", len(s.Failures), s.Total, MaxEgressErrors)
	}
}
