package main

import (
	"math"
	"slices"
	"time"
)

// Summary describes one sample of durations or sizes. Times are in
// milliseconds unless the field's table says otherwise.
type Summary struct {
	N      int     `json:"n"`
	Median float64 `json:"median"`
	P99    float64 `json:"p99"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	Mean   float64 `json:"mean"`
}

// summarize computes the order statistics of xs. p99 is the nearest-rank
// percentile, so with 200 runs it is the second-largest value.
func summarize(xs []float64) Summary {
	if len(xs) == 0 {
		return Summary{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	var sum float64
	for _, x := range s {
		sum += x
	}
	return Summary{
		N:      len(s),
		Median: quantile(s, 0.5),
		P99:    s[rank(len(s), 0.99)],
		Min:    s[0],
		Max:    s[len(s)-1],
		Mean:   sum / float64(len(s)),
	}
}

// rank is the nearest-rank index of percentile q in a sorted sample of n.
func rank(n int, q float64) int {
	i := int(math.Ceil(q*float64(n))) - 1
	return min(max(i, 0), n-1)
}

// quantile interpolates linearly between the two nearest ranks of sorted s.
func quantile(s []float64, q float64) float64 {
	pos := q * float64(len(s)-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, len(s)-1)
	return s[lo] + (pos-float64(lo))*(s[hi]-s[lo])
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

// ratio returns a/b, or 0 when b is zero, so a missing baseline shows as 0
// in the tables instead of Inf.
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}
