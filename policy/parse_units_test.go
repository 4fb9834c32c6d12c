package policy_test

import (
	"errors"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
)

func TestParseSize(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want int64
		ok   bool
	}{
		{"bytes", "1048576", 1 << 20, true},
		{"zero", "0", 0, true}, // bounds are CheckLimits' job
		{"B", "512B", 512, true},
		{"KB", "2KB", 2000, true},
		{"MB", "3MB", 3e6, true},
		{"GB", "1GB", 1e9, true},
		{"TB", "1TB", 1e12, true},
		{"KiB", "2KiB", 2048, true},
		{"MiB", "1MiB", 1 << 20, true},
		{"GiB", "4GiB", 4 << 30, true},
		{"TiB", "1TiB", 1 << 40, true},
		{"max-int64", "9223372036854775807", 1<<63 - 1, true},
		{"leading-zero", "010MiB", 10 << 20, true},
		{"empty", "", 0, false},
		{"unit-only", "MiB", 0, false},
		{"lowercase", "1mib", 0, false},
		{"short-unit", "1K", 0, false},
		{"bits", "1Mb", 0, false},
		{"space", "1 MiB", 0, false},
		{"negative", "-1", 0, false},
		{"plus", "+1", 0, false},
		{"fraction", "1.5MiB", 0, false},
		{"exponent", "1e6", 0, false},
		{"trailing", "1MiBx", 0, false},
		{"overflow-digits", "9223372036854775808", 0, false},
		{"overflow-unit", "8388608TiB", 0, false},
		{"just-fits-unit", "8388607TiB", 8388607 << 40, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := policy.ParseSize(tt.in)
			if (err == nil) != tt.ok || got != tt.want {
				t.Errorf("ParseSize(%q) = %d, %v, want %d, ok=%v", tt.in, got, err, tt.want, tt.ok)
			}
		})
	}
}

func TestFormatSize(t *testing.T) {
	tests := []struct {
		name string
		in   int64
		want string
	}{
		{"zero", 0, "0B"},
		{"bytes", 1234, "1234B"},
		{"KiB", 1024, "1KiB"},
		{"MiB", 1 << 20, "1MiB"},
		{"512MiB", 512 << 20, "512MiB"},
		{"TiB", 1 << 40, "1TiB"},
		{"MB", 1e6, "1MB"},
		{"prefer-binary", 1024000, "1000KiB"},
		{"GB", 3e9, "3GB"},
		{"odd", 1<<20 + 1, "1048577B"},
		{"max", 1<<63 - 1, "9223372036854775807B"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := policy.FormatSize(tt.in)
			if got != tt.want {
				t.Errorf("FormatSize(%d) = %q, want %q", tt.in, got, tt.want)
			}
			if back, err := policy.ParseSize(got); err != nil || back != tt.in {
				t.Errorf("ParseSize(FormatSize(%d)) = %d, %v, want %d", tt.in, back, err, tt.in)
			}
		})
	}
}

func TestParseDuration(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want time.Duration
		ok   bool
	}{
		{"seconds", "30s", 30 * time.Second, true},
		{"minutes", "2m", 2 * time.Minute, true},
		{"compound", "1h30m", 90 * time.Minute, true},
		{"millis", "500ms", 500 * time.Millisecond, true},
		{"fraction", "1.5s", 1500 * time.Millisecond, true},
		{"micros", "20us", 20 * time.Microsecond, true},
		{"nanos", "7ns", 7, true},
		{"zero", "0s", 0, true}, // bounds are CheckLimits' job
		{"bare", "30", 0, false},
		{"bare-zero", "0", 0, false},
		{"bare-fraction", "1.5", 0, false},
		{"empty", "", 0, false},
		{"negative", "-5s", 0, false},
		{"plus", "+5s", 0, false},
		{"space", "5 s", 0, false},
		{"leading-dot", ".5s", 0, false},
		{"trailing-dot", "5.s", 0, false},
		{"micro-sign", "5µs", 0, false},
		{"days", "1d", 0, false},
		{"upper", "5S", 0, false},
		{"overflow", "9999999999h", 0, false},
		{"inf", "inf", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := policy.ParseDuration(tt.in)
			if (err == nil) != tt.ok || got != tt.want {
				t.Errorf("ParseDuration(%q) = %v, %v, want %v, ok=%v", tt.in, got, err, tt.want, tt.ok)
			}
		})
	}
}

func TestCheckLimits(t *testing.T) {
	tests := []struct {
		name string
		in   budget.Limits
		ok   bool
	}{
		{"zero-means-default", budget.Limits{}, true},
		{"defaults", budget.Limits{}.WithDefaults(), true},
		{"bounds", policy.Bounds(), true},
		{"negative-wall", budget.Limits{Wall: -time.Second}, false},
		{"wall-over", budget.Limits{Wall: 24*time.Hour + 1}, false},
		{"cpu-over", budget.Limits{CPU: 25 * time.Hour}, false},
		{"memory-over", budget.Limits{Memory: 1<<40 + 1}, false},
		{"scratch-over", budget.Limits{Scratch: 1<<40 + 1}, false},
		{"output-over", budget.Limits{OutputBytes: 1<<30 + 1}, false},
		{"ops-over", budget.Limits{Ops: 1e9 + 1}, false},
		{"pids-over", budget.Limits{Pids: 1e6 + 1}, false},
		{"pids-negative", budget.Limits{Pids: -1}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := policy.CheckLimits(tt.in); (err == nil) != tt.ok {
				t.Errorf("CheckLimits(%+v) = %v, want ok=%v", tt.in, err, tt.ok)
			}
		})
	}
}

// TestCheckLimitsAll checks that every bad field is reported.
func TestCheckLimitsAll(t *testing.T) {
	err := policy.CheckLimits(budget.Limits{Wall: -1, Ops: -1, Scratch: -1})
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok || len(joined.Unwrap()) != 3 {
		t.Errorf("CheckLimits(three bad fields) = %v, want three errors", err)
	}
	if errors.Is(err, policy.ErrDenied) {
		t.Errorf("CheckLimits error matches ErrDenied")
	}
}
