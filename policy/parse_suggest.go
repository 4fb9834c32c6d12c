// Suggestions for misspelled keys and values, so an error says what to write.

package policy

import (
	"strconv"
	"strings"
)

// suggest returns `: did you mean "x"` for the candidate nearest to s (by
// edit distance, or one that s abbreviates), or "" when none is close.
func suggest(s string, candidates []string) string {
	best, bestDist := "", 3
	if len(s) <= 4 {
		bestDist = 2
	}
	norm := strings.ToLower(strings.ReplaceAll(s, "-", "_"))
	for _, c := range candidates {
		d := editDistance(norm, c)
		if len(norm) >= 3 && strings.HasPrefix(c, norm) {
			d = 1 // an abbreviation: "max_mem" for "max_memory"
		}
		if d < bestDist {
			best, bestDist = c, d
		}
	}
	if best == "" {
		return ""
	}
	return ": did you mean " + strconv.Quote(best)
}

// editDistance is the Levenshtein distance between a and b, in bytes. It
// gives up early (returning a large value) for long inputs.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 1 << 30
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
