package policy

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/policy/budget"
)

// Upper bounds of the budgets. A policy may ask for less, never more: a
// budget above these is almost certainly a typo (an extra zero, ms for h),
// and a sandbox that may run for a week or hold a terabyte of memory is no
// longer bounded in any useful sense.
const (
	MaxWallBound        = 24 * time.Hour // max_wall
	MaxCPUBound         = 24 * time.Hour // max_cpu
	MaxMemoryBound      = 1 << 40        // max_memory: 1TiB
	MaxScratchBound     = 1 << 40        // max_scratch: 1TiB
	MaxWriteBound       = 1 << 40        // max_write: 1TiB
	MaxOutputBytesBound = 1 << 30        // max_output_bytes: 1GiB
	MaxOpsBound         = 1_000_000_000  // max_ops
	MaxPidsBound        = 1_000_000      // max_pids
)

// sizeUnits lists the size suffixes ParseSize accepts, largest first within
// each family so FormatSize can pick the largest exact one.
var sizeUnits = []struct {
	suffix string
	mult   int64
}{
	{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10},
	{"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3},
	{"B", 1},
}

// errOverflow is returned for numbers that do not fit in an int64.
var errOverflow = errors.New("number is too large")

// ParseSize parses a byte count: plain digits ("1048576") or digits followed
// by one of B, KB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers
// of 1024), written exactly so ("1MiB", "64KB"). Signs, spaces, fractions and
// other spellings ("1mb", "1M") are errors, as is a value that overflows
// int64. It does not check the budget bounds; CheckLimits does.
func ParseSize(s string) (int64, error) {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == 0 {
		return 0, fmt.Errorf("size %q does not start with a number: write bytes or a number with a unit, like 1048576 or 1MiB", s)
	}
	n, err := parseDigits(s[:i])
	if err != nil {
		return 0, fmt.Errorf("size %q: %w: the largest budget is %s", s, err, FormatSize(MaxMemoryBound))
	}
	unit := s[i:]
	if unit == "" {
		return n, nil
	}
	for _, u := range sizeUnits {
		if u.suffix != unit {
			continue
		}
		if n > (1<<63-1)/u.mult {
			return 0, fmt.Errorf("size %q: %w: the largest budget is %s", s, errOverflow, FormatSize(MaxMemoryBound))
		}
		return n * u.mult, nil
	}
	return 0, fmt.Errorf("size %q has unknown unit %q: use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB (case as written)", s, unit)
}

// parseDigits converts a string of ASCII digits, reporting overflow.
func parseDigits(s string) (int64, error) {
	var n int64
	for i := 0; i < len(s); i++ {
		d := int64(s[i] - '0')
		if n > (1<<63-1-d)/10 {
			return 0, errOverflow
		}
		n = n*10 + d
	}
	return n, nil
}

// FormatSize writes n with the largest unit that divides it exactly,
// preferring the 1024-based units: 1048576 is "1MiB", 1000000 is "1MB",
// 1234 is "1234B". ParseSize(FormatSize(n)) == n for every n >= 0.
func FormatSize(n int64) string {
	if n <= 0 {
		return strconv.FormatInt(n, 10) + "B"
	}
	best := sizeUnits[len(sizeUnits)-1]
	for _, u := range sizeUnits {
		if n%u.mult == 0 && u.mult > best.mult {
			best = u
		}
	}
	return strconv.FormatInt(n/best.mult, 10) + best.suffix
}

// durationUnits are the unit suffixes ParseDuration accepts, longest first
// so "ms" is not read as "m" followed by "s".
var durationUnits = []string{"ns", "us", "ms", "h", "m", "s"}

// ParseDuration parses a Go duration that names its units: "30s", "2m",
// "1h30m", "500ms", "1.5s". Units are ns, us, ms, s, m and h. A bare number
// ("30") is an error that says to add a unit, because seconds and
// milliseconds are both plausible readings. Signs and spaces are errors. It
// does not check the budget bounds; CheckLimits does.
func ParseDuration(s string) (time.Duration, error) {
	if s == "" {
		return 0, errors.New("empty duration: write a number with a unit, like 30s")
	}
	if bareNumber(s) {
		return 0, fmt.Errorf("duration %s has no unit: write %ss (or ms, m, h)", s, s)
	}
	if !durationSyntax(s) {
		return 0, fmt.Errorf("duration %q is not valid: write a number and a unit (ns, us, ms, s, m, h), like 30s, 1h30m or 500ms", s)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("duration %q is too large: the largest budget is %s", s, formatDuration(MaxWallBound))
	}
	return d, nil
}

// bareNumber reports whether s is digits with an optional fraction and no unit.
func bareNumber(s string) bool {
	digits, frac, hasFrac := strings.Cut(s, ".")
	return allDigits(digits) && (!hasFrac || allDigits(frac))
}

// allDigits reports whether s is one or more ASCII digits.
func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// durationSyntax reports whether s is one or more of digits, an optional
// fraction and a unit. It is the grammar of the schema's duration pattern,
// stricter than time.ParseDuration (no sign, no ".5s", no "5.s", no "µs").
func durationSyntax(s string) bool {
	for s != "" {
		i := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		if i == 0 {
			return false
		}
		s = s[i:]
		if s != "" && s[0] == '.' {
			i = 1
			for i < len(s) && s[i] >= '0' && s[i] <= '9' {
				i++
			}
			if i == 1 {
				return false
			}
			s = s[i:]
		}
		unit := ""
		for _, u := range durationUnits {
			if strings.HasPrefix(s, u) {
				unit = u
				break
			}
		}
		if unit == "" {
			return false
		}
		s = s[len(unit):]
	}
	return true
}

// formatDuration writes d as ParseDuration reads it, without the zero
// components time.Duration.String adds: "2m" rather than "2m0s", "1h"
// rather than "1h0m0s", and "us" rather than "µs".
func formatDuration(d time.Duration) string {
	s := d.String()
	s = strings.Replace(s, "µs", "us", 1)
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// Bounds returns the largest budget a policy may set, field by field.
func Bounds() budget.Limits {
	return budget.Limits{
		Wall:        MaxWallBound,
		OutputBytes: MaxOutputBytesBound,
		Ops:         MaxOpsBound,
		Memory:      MaxMemoryBound,
		CPU:         MaxCPUBound,
		Pids:        MaxPidsBound,
		Scratch:     MaxScratchBound,
		Write:       MaxWriteBound,
	}
}

// budgetKeys lists the budget keys in policy-file order.
var budgetKeys = []budget.Limit{
	budget.MaxWall, budget.MaxOutputBytes, budget.MaxOps, budget.MaxMemory,
	budget.MaxCPU, budget.MaxPids, budget.MaxScratch, budget.MaxWrite,
}

// limitValue returns field k of l as an int64 (nanoseconds for durations).
func limitValue(l budget.Limits, k budget.Limit) int64 {
	switch k {
	case budget.MaxWall:
		return int64(l.Wall)
	case budget.MaxOutputBytes:
		return l.OutputBytes
	case budget.MaxOps:
		return l.Ops
	case budget.MaxMemory:
		return l.Memory
	case budget.MaxCPU:
		return int64(l.CPU)
	case budget.MaxPids:
		return l.Pids
	case budget.MaxScratch:
		return l.Scratch
	case budget.MaxWrite:
		return l.Write
	}
	return 0
}

// setLimit returns l with field k set to v.
func setLimit(l budget.Limits, k budget.Limit, v int64) budget.Limits {
	switch k {
	case budget.MaxWall:
		l.Wall = time.Duration(v)
	case budget.MaxOutputBytes:
		l.OutputBytes = v
	case budget.MaxOps:
		l.Ops = v
	case budget.MaxMemory:
		l.Memory = v
	case budget.MaxCPU:
		l.CPU = time.Duration(v)
	case budget.MaxPids:
		l.Pids = v
	case budget.MaxScratch:
		l.Scratch = v
	case budget.MaxWrite:
		l.Write = v
	}
	return l
}

// formatLimit writes value v of budget k in policy-file syntax.
func formatLimit(k budget.Limit, v int64) string {
	switch k {
	case budget.MaxWall, budget.MaxCPU:
		return formatDuration(time.Duration(v))
	case budget.MaxOps, budget.MaxPids:
		return strconv.FormatInt(v, 10)
	}
	return FormatSize(v)
}

// checkLimit returns what is wrong with value v of budget k, or "".
func checkLimit(k budget.Limit, v int64) string {
	if v <= 0 {
		return "must be positive: remove it to use the default " + formatLimit(k, limitValue(budget.Limits{}.WithDefaults(), k))
	}
	if max := limitValue(Bounds(), k); v > max {
		return "is above the largest allowed " + string(k) + " " + formatLimit(k, max) + ": lower it"
	}
	return ""
}

// CheckLimits reports every field of l that is negative or above Bounds.
// Zero fields mean "use the default" and are accepted. CLI flags that set
// budgets use it with ParseSize and ParseDuration, so flags and policy files
// follow the same rules.
func CheckLimits(l budget.Limits) error {
	var errs []error
	for _, k := range budgetKeys {
		v := limitValue(l, k)
		if v == 0 {
			continue
		}
		if msg := checkLimit(k, v); msg != "" {
			errs = append(errs, fmt.Errorf("%s %s %s", k, formatLimit(k, v), msg))
		}
	}
	return errors.Join(errs...)
}
