package budget_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/policy/budget"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// exhausted reports whether err is an *ExhaustedError for limit l that
// also matches ErrExhausted.
func exhausted(err error, l budget.Limit) bool {
	var ee *budget.ExhaustedError
	return errors.As(err, &ee) && ee.Limit == l && errors.Is(err, budget.ErrExhausted)
}

func TestWithDefaults(t *testing.T) {
	got := budget.Limits{Ops: 5}.WithDefaults()
	want := budget.Limits{
		Wall: budget.DefaultWall, OutputBytes: budget.DefaultOutputBytes, Ops: 5,
		Memory: budget.DefaultMemory, CPU: budget.DefaultCPU, Pids: budget.DefaultPids, Scratch: budget.DefaultScratch,
		Write: budget.DefaultWrite,
	}
	if got != want {
		t.Errorf("Limits{Ops: 5}.WithDefaults() = %+v, want %+v", got, want)
	}
	// max_write follows a small max_memory: staged writes live in memory.
	if got := (budget.Limits{Memory: 64 << 20}).WithDefaults().Write; got != 32<<20 {
		t.Errorf("Limits{Memory: 64MiB}.WithDefaults().Write = %d, want 32MiB", got)
	}
}

func TestChargeOpHaltsAtMaxOps(t *testing.T) {
	m := budget.NewMeter(budget.Limits{Ops: 3}, airtest.NewFakeClock(epoch))
	for i := 1; i <= 3; i++ {
		if err := m.ChargeOp(); err != nil {
			t.Fatalf("ChargeOp() #%d = %v, want nil", i, err)
		}
	}
	if err := m.ChargeOp(); !exhausted(err, budget.MaxOps) {
		t.Errorf("ChargeOp() #4 = %v, want max_ops exhausted", err)
	}
	if ops, _ := m.Usage(); ops != 3 {
		t.Errorf("Usage() ops = %d, want 3", ops)
	}
	if got := m.HaltedBy(); got != budget.MaxOps {
		t.Errorf("HaltedBy() = %q, want max_ops", got)
	}
}

func TestChargeOutput(t *testing.T) {
	tests := []struct {
		name    string
		charges []int64
		wantN   []int64
		wantErr []bool
	}{
		{"fits", []int64{4, 6}, []int64{4, 6}, []bool{false, false}},
		{"exactly-full-then-more", []int64{10, 1}, []int64{10, 0}, []bool{false, true}},
		{"partial", []int64{7, 5}, []int64{7, 3}, []bool{false, true}},
		{"zero-when-full", []int64{10, 0}, []int64{10, 0}, []bool{false, false}},
		{"halted-refuses-zero", []int64{11, 0}, []int64{10, 0}, []bool{true, true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := budget.NewMeter(budget.Limits{OutputBytes: 10}, airtest.NewFakeClock(epoch))
			for i, n := range tt.charges {
				got, err := m.ChargeOutput(n)
				if got != tt.wantN[i] || (err != nil) != tt.wantErr[i] {
					t.Fatalf("ChargeOutput(%d) #%d = %d, %v, want %d, err=%v", n, i, got, err, tt.wantN[i], tt.wantErr[i])
				}
				if err != nil && !exhausted(err, budget.MaxOutputBytes) {
					t.Fatalf("ChargeOutput(%d) #%d error = %v, want max_output_bytes exhausted", n, i, err)
				}
			}
		})
	}
}

func TestChargeOutputNegative(t *testing.T) {
	m := budget.NewMeter(budget.Limits{OutputBytes: 10}, airtest.NewFakeClock(epoch))
	if _, err := m.ChargeOutput(8); err != nil {
		t.Fatal(err)
	}
	if n, err := m.ChargeOutput(-5); n != 0 || err == nil || errors.Is(err, budget.ErrExhausted) {
		t.Errorf("ChargeOutput(-5) = %d, %v, want 0 and a non-budget error", n, err)
	}
	if n, err := m.ChargeOutput(5); n != 2 || !exhausted(err, budget.MaxOutputBytes) {
		t.Errorf("ChargeOutput(5) after a negative charge = %d, %v, want 2, max_output_bytes exhausted", n, err)
	}
}

// TestNegativeLimits checks that a hand-built negative limit fails closed.
func TestNegativeLimits(t *testing.T) {
	m := budget.NewMeter(budget.Limits{OutputBytes: -1, Ops: -1}, airtest.NewFakeClock(epoch))
	if n, err := m.ChargeOutput(1); n != 0 || !exhausted(err, budget.MaxOutputBytes) {
		t.Errorf("ChargeOutput(1) with max_output_bytes -1 = %d, %v, want 0, exhausted", n, err)
	}
	m = budget.NewMeter(budget.Limits{Ops: -1}, airtest.NewFakeClock(epoch))
	if err := m.ChargeOp(); !exhausted(err, budget.MaxOps) {
		t.Errorf("ChargeOp() with max_ops -1 = %v, want max_ops exhausted", err)
	}
}

func TestDeadline(t *testing.T) {
	clock := airtest.NewFakeClock(epoch)
	m := budget.NewMeter(budget.Limits{Wall: 30 * time.Second}, clock)
	if got, want := m.Deadline(), epoch.Add(30*time.Second); !got.Equal(want) {
		t.Errorf("Deadline() = %v, want %v", got, want)
	}
	clock.Advance(30*time.Second - time.Nanosecond)
	if err := m.Check(); err != nil {
		t.Fatalf("Check() 1ns before max_wall = %v, want nil", err)
	}
	if err := m.ChargeOp(); err != nil {
		t.Fatalf("ChargeOp() 1ns before max_wall = %v, want nil", err)
	}
	clock.Advance(time.Nanosecond)
	if err := m.Check(); !exhausted(err, budget.MaxWall) {
		t.Errorf("Check() at exactly max_wall = %v, want max_wall exhausted", err)
	}
	if got := m.HaltedBy(); got != budget.MaxWall {
		t.Errorf("HaltedBy() = %q, want max_wall", got)
	}
}

// TestDeadlineNoticedByHaltedBy checks that HaltedBy records a passed
// deadline even when nothing was charged.
func TestDeadlineNoticedByHaltedBy(t *testing.T) {
	clock := airtest.NewFakeClock(epoch)
	m := budget.NewMeter(budget.Limits{Wall: time.Second}, clock)
	if got := m.HaltedBy(); got != "" {
		t.Fatalf("HaltedBy() = %q, want running", got)
	}
	clock.Advance(time.Hour)
	if got := m.HaltedBy(); got != budget.MaxWall {
		t.Errorf("HaltedBy() after the deadline = %q, want max_wall", got)
	}
}

// TestFirstHaltWins halts the meter one way, then makes every other limit
// blow too, and checks that every call still names the first limit.
func TestFirstHaltWins(t *testing.T) {
	halts := []struct {
		name  string
		limit budget.Limit
		halt  func(m *budget.Meter, c *airtest.FakeClock)
	}{
		{"ops", budget.MaxOps, func(m *budget.Meter, c *airtest.FakeClock) { _ = m.ChargeOp(); _ = m.ChargeOp() }},
		{"output", budget.MaxOutputBytes, func(m *budget.Meter, c *airtest.FakeClock) { _, _ = m.ChargeOutput(100) }},
		{"deadline", budget.MaxWall, func(m *budget.Meter, c *airtest.FakeClock) { c.Advance(time.Minute); _ = m.Check() }},
		{"halt-memory", budget.MaxMemory, func(m *budget.Meter, c *airtest.FakeClock) { m.Halt(budget.MaxMemory) }},
		{"halt-pids", budget.MaxPids, func(m *budget.Meter, c *airtest.FakeClock) { m.Halt(budget.MaxPids) }},
	}
	for _, tt := range halts {
		t.Run(tt.name, func(t *testing.T) {
			clock := airtest.NewFakeClock(epoch)
			m := budget.NewMeter(budget.Limits{Ops: 1, OutputBytes: 10, Wall: time.Second}, clock)
			tt.halt(m, clock)
			// Blow everything else.
			clock.Advance(time.Hour)
			m.Halt(budget.MaxCPU)
			_, _ = m.ChargeOutput(1000)
			_ = m.ChargeOp()
			if err := m.ChargeOp(); !exhausted(err, tt.limit) {
				t.Errorf("ChargeOp() = %v, want %s exhausted", err, tt.limit)
			}
			if n, err := m.ChargeOutput(1); n != 0 || !exhausted(err, tt.limit) {
				t.Errorf("ChargeOutput(1) = %d, %v, want 0, %s exhausted", n, err, tt.limit)
			}
			if n, err := m.ChargeOutput(0); n != 0 || !exhausted(err, tt.limit) {
				t.Errorf("ChargeOutput(0) = %d, %v, want 0, %s exhausted", n, err, tt.limit)
			}
			if err := m.Check(); !exhausted(err, tt.limit) {
				t.Errorf("Check() = %v, want %s exhausted", err, tt.limit)
			}
			if got := m.HaltedBy(); got != tt.limit {
				t.Errorf("HaltedBy() = %q, want %q", got, tt.limit)
			}
		})
	}
}

func TestHaltSticky(t *testing.T) {
	m := budget.NewMeter(budget.Limits{}, airtest.NewFakeClock(epoch))
	m.Halt(budget.MaxScratch)
	m.Halt(budget.MaxMemory)
	if err := m.Check(); !exhausted(err, budget.MaxScratch) {
		t.Errorf("Check() after Halt(max_scratch), Halt(max_memory) = %v, want max_scratch exhausted", err)
	}
}

func TestHaltEmptyPanics(t *testing.T) {
	m := budget.NewMeter(budget.Limits{}, airtest.NewFakeClock(epoch))
	defer func() {
		if recover() == nil {
			t.Errorf("Halt(\"\") did not panic")
		}
		if err := m.Check(); err != nil {
			t.Errorf("Check() after a refused Halt(\"\") = %v, want nil", err)
		}
	}()
	m.Halt("")
}

// TestChargeOpConcurrent charges from many goroutines; run with -race.
func TestChargeOpConcurrent(t *testing.T) {
	const limit, workers, each = 500, 16, 100
	m := budget.NewMeter(budget.Limits{Ops: limit}, airtest.NewFakeClock(epoch))
	var (
		wg sync.WaitGroup
		mu sync.Mutex
		ok int
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0
			for range each {
				if err := m.ChargeOp(); err == nil {
					n++
				} else if !exhausted(err, budget.MaxOps) {
					t.Errorf("ChargeOp() = %v, want nil or max_ops exhausted", err)
				}
			}
			mu.Lock()
			ok += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	if ok != limit {
		t.Errorf("%d ChargeOp calls succeeded, want exactly %d", ok, limit)
	}
	if ops, _ := m.Usage(); ops != limit {
		t.Errorf("Usage() ops = %d, want %d", ops, limit)
	}
}

// TestChargeOutputConcurrent checks that concurrent writers never get more
// than max_output_bytes in total.
func TestChargeOutputConcurrent(t *testing.T) {
	const limit = 1000
	m := budget.NewMeter(budget.Limits{OutputBytes: limit}, airtest.NewFakeClock(epoch))
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		total int64
	)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				n, _ := m.ChargeOutput(7) // the count is what matters here
				mu.Lock()
				total += n
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if total != limit {
		t.Errorf("ChargeOutput granted %d bytes in total, want %d", total, limit)
	}
}

func TestNilClock(t *testing.T) {
	m := budget.NewMeter(budget.Limits{}, nil) // must not panic
	if m.Limits() != (budget.Limits{}).WithDefaults() {
		t.Errorf("Limits() = %+v, want the defaults", m.Limits())
	}
}

func TestExhaustedErrorMessage(t *testing.T) {
	err := &budget.ExhaustedError{Limit: budget.MaxOps}
	want := "budget: max_ops exhausted; the run is halted"
	if got := err.Error(); got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

// TestDoneClosesOnFirstHalt: every way of halting closes Done exactly once
// (a second close would panic), and nothing else closes it.
func TestDoneClosesOnFirstHalt(t *testing.T) {
	tests := []struct {
		name string
		halt func(m *budget.Meter, c *airtest.FakeClock)
		want budget.Limit
	}{
		{"ops", func(m *budget.Meter, _ *airtest.FakeClock) {
			for m.ChargeOp() == nil {
			}
		}, budget.MaxOps},
		{"output", func(m *budget.Meter, _ *airtest.FakeClock) { _, _ = m.ChargeOutput(11) }, budget.MaxOutputBytes},
		{"halt", func(m *budget.Meter, _ *airtest.FakeClock) { m.Halt(budget.MaxMemory) }, budget.MaxMemory},
		{"deadline-check", func(m *budget.Meter, c *airtest.FakeClock) { c.Advance(time.Minute); _ = m.Check() }, budget.MaxWall},
		{"deadline-charge", func(m *budget.Meter, c *airtest.FakeClock) { c.Advance(time.Minute); _ = m.ChargeOp() }, budget.MaxWall},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := airtest.NewFakeClock(epoch)
			m := budget.NewMeter(budget.Limits{Ops: 2, OutputBytes: 10, Wall: time.Second}, c)
			// Charges within the budget leave Done open.
			if err := m.ChargeOp(); err != nil {
				t.Fatal(err)
			}
			if _, err := m.ChargeOutput(5); err != nil {
				t.Fatal(err)
			}
			select {
			case <-m.Done():
				t.Fatal("Done is closed before any halt")
			default:
			}
			tt.halt(m, c)
			select {
			case <-m.Done():
			default:
				t.Fatalf("Done is open after %s halted the meter", tt.name)
			}
			// Later halts of every kind do not close it again (that would panic).
			m.Halt(budget.MaxCPU)
			_ = m.ChargeOp()
			_, _ = m.ChargeOutput(100)
			c.Advance(time.Hour)
			_ = m.Check()
			if got := m.HaltedBy(); got != tt.want {
				t.Errorf("HaltedBy() = %q, want %q (the first halt wins)", got, tt.want)
			}
		})
	}
}

// TestDoneConcurrentHalts: many goroutines blowing the budget at once close
// Done once.
func TestDoneConcurrentHalts(t *testing.T) {
	m := budget.NewMeter(budget.Limits{Ops: 10}, airtest.NewFakeClock(epoch))
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			for range 10 {
				_ = m.ChargeOp()
				if i%4 == 0 {
					m.Halt(budget.MaxPids)
				}
			}
		})
	}
	wg.Wait()
	<-m.Done()
	if m.HaltedBy() == "" {
		t.Error("Done is closed but HaltedBy is empty")
	}
}

// TestChargeCapturedAfterHalt: output the sandbox wrote before a halt is
// still counted and kept, up to max_output_bytes, when its reader reaches
// it after the halt (before: ChargeOutput refused every byte once the
// meter was halted, and an interrupted run's report lost what it printed).
func TestChargeCapturedAfterHalt(t *testing.T) {
	m := budget.NewMeter(budget.Limits{OutputBytes: 10, Wall: time.Hour}.WithDefaults(), nil)
	m.Halt(budget.Interrupted)
	if n, err := m.ChargeCaptured(6); n != 6 || err != nil {
		t.Errorf("ChargeCaptured(6) after a halt = %d, %v; want 6, nil", n, err)
	}
	if n, err := m.ChargeCaptured(6); n != 4 || !errors.Is(err, budget.ErrExhausted) {
		t.Errorf("ChargeCaptured(6) at the cap = %d, %v; want 4 and exhausted", n, err)
	}
	if m.HaltedBy() != budget.Interrupted {
		t.Errorf("halted by %q, want the first halt, interrupted", m.HaltedBy())
	}
	if n, _ := m.ChargeOutput(1); n != 0 {
		t.Errorf("ChargeOutput after a halt = %d: new output (downloads) stays refused", n)
	}
	if _, err := m.ChargeCaptured(-1); err == nil || errors.Is(err, budget.ErrExhausted) {
		t.Errorf("ChargeCaptured(-1) = %v, want a bug error", err)
	}
}
