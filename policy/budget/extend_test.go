package budget_test

import (
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/policy/budget"
)

type stepClock struct{ t time.Time }

func (c *stepClock) Now() time.Time { return c.t }

// TestExtendBy: an extension is added to the end in force, so two of 30
// minutes add an hour; an end that has passed counts from now; the limit
// caps it.
func TestExtendBy(t *testing.T) {
	c := &stepClock{t: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)}
	m := budget.NewSessionMeter(budget.Limits{}, 10*time.Minute, c)
	limit := c.t.Add(2 * time.Hour)
	for i, want := range []time.Duration{40 * time.Minute, 70 * time.Minute, 100 * time.Minute, 2 * time.Hour} {
		end, err := m.ExtendBy(30*time.Minute, limit)
		if err != nil {
			t.Fatal(err)
		}
		if got := end.Sub(c.t); got != want {
			t.Errorf("extension %d: the end is %v after the start, want %v", i+1, got, want)
		}
	}
	m2 := budget.NewSessionMeter(budget.Limits{}, time.Minute, c)
	c.t = c.t.Add(30 * time.Second) // not yet passed: counted from the end
	if end, _ := m2.ExtendBy(time.Minute, limit); !end.Equal(c.t.Add(90 * time.Second)) {
		t.Errorf("extend by a minute 30 s before the end: %v, want 90 s from now", end.Sub(c.t))
	}
}
