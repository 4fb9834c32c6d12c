package guard_test

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/guard"
	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
)

// newGuard builds a guard for spec; cfg.Policy is replaced.
func newGuard(t testing.TB, spec policy.Spec, cfg guard.Config) *guard.Guard {
	t.Helper()
	p, err := policy.New(spec)
	if err != nil {
		t.Fatalf("policy.New(%+v): %v", spec, err)
	}
	cfg.Policy = p
	g, err := guard.New(cfg)
	if err != nil {
		t.Fatalf("guard.New: %v", err)
	}
	return g
}

// op is one capability exercised with fixed arguments.
type op struct {
	name string
	do   func(g *guard.Guard) error
}

// everyOp lists one call of each capability. Nothing it names is granted by
// the policies it is used with.
func everyOp(t testing.TB) []op {
	return []op{
		{"Read", func(g *guard.Guard) error { _, err := g.Read("/etc/passwd"); return err }},
		{"Write", func(g *guard.Guard) error { return g.Write("/etc/airlock-guard-test", []byte("x")) }},
		{"List", func(g *guard.Guard) error { _, err := g.List("/etc"); return err }},
		{"Remove", func(g *guard.Guard) error { return g.Remove("/etc/airlock-guard-test") }},
	}
}

// grantedDir returns an empty directory for an fs_read grant: listing it
// is an operation that succeeds and charges one op (and no output bytes).
// File operations need Linux (openat2), so elsewhere the test is skipped.
func grantedDir(t testing.TB) string {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("guard file operations need linux openat2; the budget tests spend ops on them")
	}
	return t.TempDir()
}

// listOK lists dir through g and fails t if that is refused.
func listOK(t testing.TB, g *guard.Guard, dir, what string) {
	t.Helper()
	if _, err := g.List(dir); err != nil {
		t.Fatalf("%s: List(%s) = %v, want nil", what, dir, err)
	}
}

func TestNew(t *testing.T) {
	p, err := policy.New(policy.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		cfg     guard.Config
		wantErr bool
	}{
		{"no-policy", guard.Config{}, true},
		{"relative-cwd", guard.Config{Policy: p, Cwd: "work"}, true},
		{"minimal", guard.Config{Policy: p}, false},
		{"absolute-cwd", guard.Config{Policy: p, Cwd: "/work/../data"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := guard.New(tt.cfg)
			if (err != nil) != tt.wantErr {
				t.Fatalf("New(%+v) error = %v, want error %v", tt.cfg, err, tt.wantErr)
			}
			if err == nil && g.Meter() == nil {
				t.Errorf("New(%+v).Meter() = nil, want a meter", tt.cfg)
			}
		})
	}
}

func TestZeroGuardRefuses(t *testing.T) {
	var g guard.Guard
	for _, o := range everyOp(t) {
		t.Run(o.name, func(t *testing.T) {
			if err := o.do(&g); err == nil {
				t.Errorf("zero Guard %s = nil error, want a refusal", o.name)
			}
		})
	}
}

func TestDefaultDeny(t *testing.T) {
	rec := &audit.Recorder{}
	g := newGuard(t, policy.Spec{}, guard.Config{Audit: rec})
	for _, o := range everyOp(t) {
		t.Run(o.name, func(t *testing.T) {
			err := o.do(g)
			if !errors.Is(err, policy.ErrDenied) {
				t.Fatalf("%s with no grants = %v, want policy.ErrDenied", o.name, err)
			}
			var de *policy.DenyError
			if !errors.As(err, &de) {
				t.Fatalf("%s with no grants = %T, want *policy.DenyError", o.name, err)
			}
		})
	}
	if got, want := len(rec.Denials()), len(everyOp(t)); got != want {
		t.Errorf("audit recorded %d denials, want %d: %+v", got, want, rec.Events())
	}
	for _, e := range rec.Events() {
		if e.Kind != audit.Deny || e.Rule == "" || e.Target == "" || (e.Suggestion == "" && e.Hint == "") {
			t.Errorf("audit event %+v: want a Deny with Rule, Target and a Suggestion or Hint", e)
		}
	}
}

// requireEvent fails t unless rec holds an event whose Kind, Layer, Op,
// Target, Rule and (when set in want) Suggestion equal want's.
func requireEvent(t testing.TB, rec *audit.Recorder, want audit.Event) {
	t.Helper()
	for _, e := range rec.Events() {
		if e.Kind == want.Kind && e.Layer == want.Layer && e.Op == want.Op && e.Target == want.Target &&
			e.Rule == want.Rule && (want.Suggestion == "" || e.Suggestion == want.Suggestion) {
			if e.Message == "" || e.Time.IsZero() {
				t.Errorf("event %+v has no Message or Time", e)
			}
			return
		}
	}
	t.Errorf("no audit event matching %+v in %+v", want, rec.Events())
}

// requireExhausted fails t unless err is a *budget.ExhaustedError for limit.
func requireExhausted(t testing.TB, what string, err error, limit budget.Limit) {
	t.Helper()
	var ee *budget.ExhaustedError
	if !errors.As(err, &ee) || !errors.Is(err, budget.ErrExhausted) {
		t.Fatalf("%s = %v (%T), want *budget.ExhaustedError", what, err, err)
	}
	if ee.Limit != limit {
		t.Errorf("%s halted by %s, want %s", what, ee.Limit, limit)
	}
}

func TestMaxOpsHaltsEveryCapability(t *testing.T) {
	const maxOps = 3
	dir := grantedDir(t)
	rec := &audit.Recorder{}
	g := newGuard(t, policy.Spec{FSRead: []string{dir}, Budget: budget.Limits{Ops: maxOps}}, guard.Config{Audit: rec})
	for i := range maxOps {
		listOK(t, g, dir, fmt.Sprintf("op #%d within max_ops", i+1))
	}
	for _, o := range everyOp(t) {
		t.Run(o.name, func(t *testing.T) {
			requireExhausted(t, o.name+" after max_ops", o.do(g), budget.MaxOps)
		})
	}
	if _, err := g.List(dir); err == nil {
		t.Errorf("List of a granted directory after the halt = nil, want the budget refusal")
	}
	var halts, denials int
	for _, e := range rec.Events() {
		switch e.Kind {
		case audit.Halt:
			halts++
		case audit.Deny:
			denials++
		default:
			continue
		}
		if e.Layer != audit.LayerBudget || e.Rule != string(budget.MaxOps) {
			t.Errorf("budget event %+v: want Layer budget, Rule max_ops", e)
		}
	}
	if halts != 1 || denials != len(everyOp(t)) {
		t.Errorf("audit has %d halts and %d denials, want 1 and %d", halts, denials, len(everyOp(t)))
	}
	if ops, _ := g.Meter().Usage(); ops != maxOps {
		t.Errorf("Meter().Usage() ops = %d, want %d", ops, maxOps)
	}
}

func TestMaxWallHaltsEveryCapability(t *testing.T) {
	clock := airtest.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	dir := grantedDir(t)
	g := newGuard(t, policy.Spec{FSRead: []string{dir}, Budget: budget.Limits{Wall: 10 * time.Second}}, guard.Config{Clock: clock})
	clock.Advance(9 * time.Second)
	listOK(t, g, dir, "before the deadline")
	clock.Advance(time.Second)
	for _, o := range everyOp(t) {
		t.Run(o.name, func(t *testing.T) {
			requireExhausted(t, o.name+" after max_wall", o.do(g), budget.MaxWall)
		})
	}
	if _, err := g.List(dir); err == nil {
		t.Errorf("List of a granted directory after the deadline = nil, want the budget refusal")
	}
}

func TestSharedMeter(t *testing.T) {
	dir := grantedDir(t)
	p, err := policy.New(policy.Spec{FSRead: []string{dir}, Budget: budget.Limits{Ops: 2}})
	if err != nil {
		t.Fatal(err)
	}
	m := budget.NewMeter(p.Budget(), nil)
	var gs []*guard.Guard
	for range 2 {
		g, err := guard.New(guard.Config{Policy: p, Meter: m})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { g.Close() })
		gs = append(gs, g)
	}
	for i, g := range gs {
		listOK(t, g, dir, fmt.Sprintf("guard %d", i))
	}
	for i, g := range gs {
		_, err := g.List(dir)
		requireExhausted(t, fmt.Sprintf("List on guard %d", i), err, budget.MaxOps)
	}
}

func TestConcurrentOpsRespectMaxOps(t *testing.T) {
	const maxOps, workers, each = 100, 8, 50
	dir := grantedDir(t)
	g := newGuard(t, policy.Spec{FSRead: []string{dir}, Budget: budget.Limits{Ops: maxOps}}, guard.Config{Audit: &audit.Recorder{}})
	var wg sync.WaitGroup
	var ok atomic.Int64
	for range workers {
		wg.Go(func() {
			for range each {
				if _, err := g.List(dir); err == nil {
					ok.Add(1)
				}
			}
		})
	}
	wg.Wait()
	// The op that halts the meter also fails lists still in flight (a
	// halted meter refuses their output), so fewer than maxOps may succeed;
	// never more, and the meter counts exactly maxOps.
	if n := ok.Load(); n == 0 || n > maxOps {
		t.Errorf("%d concurrent lists: %d succeeded, want 1 to %d", workers*each, n, maxOps)
	}
	if ops, _ := g.Meter().Usage(); ops != maxOps {
		t.Errorf("Meter().Usage() ops = %d, want %d", ops, maxOps)
	}
}

func BenchmarkCheckDenied(b *testing.B) {
	g := newGuard(b, policy.Spec{FSRead: []string{"/work"},
		Budget: budget.Limits{Ops: 1e9, Wall: 24 * time.Hour}}, guard.Config{})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := g.Read("/workshop/secret"); !errors.Is(err, policy.ErrDenied) {
			b.Fatalf("Read = %v, want denied", err)
		}
	}
}
