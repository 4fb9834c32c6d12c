package sandbox

import (
	"runtime"
	"testing"
	"time"
)

// TestNextWatch: the pause between two reads of a run's counters never
// lets the tree reach max_cpu unseen (it is at most what is left divided
// by the CPUs that could spend it), is never shorter than watchMin (the
// old fixed period) nor longer than watchMax.
func TestNextWatch(t *testing.T) {
	tests := []struct {
		name string
		left time.Duration
		ncpu int
		want time.Duration
	}{
		{"far-from-the-budget", 30 * time.Second, 2, watchMax},
		{"one-cpu-second-on-two-cpus", time.Second, 4, 250 * time.Millisecond},
		{"close-to-the-budget", 60 * time.Millisecond, 2, watchMin},
		{"budget-spent", 0, 2, watchMin},
		{"past-the-budget", -time.Second, 2, watchMin},
		{"many-cpus", 30 * time.Second, 1024, watchMin},
		{"zero-cpus-means-one", 300 * time.Millisecond, 0, 300 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := nextWatch(tt.left, tt.ncpu)
			if got != tt.want {
				t.Errorf("nextWatch(%v, %d) = %v, want %v", tt.left, tt.ncpu, got, tt.want)
			}
			if tt.left > 0 && tt.ncpu > 0 && got > watchMin && time.Duration(tt.ncpu)*got > tt.left {
				t.Errorf("nextWatch(%v, %d) = %v: %d CPUs could spend more than what is left meanwhile", tt.left, tt.ncpu, got, tt.ncpu)
			}
		})
	}
}

// TestPossibleCPUs: the bound is at least the CPUs this process may use.
func TestPossibleCPUs(t *testing.T) {
	if n := possibleCPUs(); n < runtime.NumCPU() || n < 1 {
		t.Fatalf("possibleCPUs() = %d, want at least runtime.NumCPU() = %d", n, runtime.NumCPU())
	}
}

func TestCountCPUList(t *testing.T) {
	for _, tt := range []struct {
		list string
		n    int
		ok   bool
	}{
		{"0-1\n", 2, true},
		{"0", 1, true},
		{"0-3,8-11", 8, true},
		{"0,2,4-5", 4, true},
		{"", 0, false},
		{"3-1", 0, false},
		{"a-b", 0, false},
		{"-1", 0, false},
		{"0-9999999999", 0, false},
	} {
		if n, ok := countCPUList(tt.list); n != tt.n || ok != tt.ok {
			t.Errorf("countCPUList(%q) = %d, %v; want %d, %v", tt.list, n, ok, tt.n, tt.ok)
		}
	}
}
