package cgroup

import (
	"fmt"
	"strconv"
	"strings"
)

// namePrefix marks every directory this package creates. Janitor touches
// nothing else.
const namePrefix = "airlock-"

// formatName builds "airlock-<pid>-<starttime>-<random hex>".
func formatName(pid int, start uint64, random [8]byte) string {
	return fmt.Sprintf("%s%d-%d-%x", namePrefix, pid, start, random[:])
}

// ParseName splits a name made by NewName into the owner's pid and start
// time (clock ticks after boot, proc(5) field 22). It reports false for any
// other string, so that Janitor never mistakes a foreign directory for ours.
func ParseName(name string) (pid int, start uint64, ok bool) {
	rest, found := strings.CutPrefix(name, namePrefix)
	if !found {
		return 0, 0, false
	}
	f := strings.Split(rest, "-")
	if len(f) != 3 || !decimal(f[0]) || !decimal(f[1]) || len(f[2]) != 16 {
		return 0, 0, false
	}
	for _, c := range f[2] {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return 0, 0, false
		}
	}
	p, err := strconv.ParseInt(f[0], 10, 32)
	if err != nil || p <= 0 {
		return 0, 0, false
	}
	st, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		return 0, 0, false
	}
	return int(p), st, true
}

// decimal reports whether s is a canonical unsigned decimal number.
func decimal(s string) bool {
	if s == "" || len(s) > 20 || (len(s) > 1 && s[0] == '0') {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// parseStartTime returns field 22 (starttime) of a /proc/<pid>/stat line.
// The command name (field 2) may contain spaces and parentheses, so the
// fields are counted after its last ')'.
func parseStartTime(stat string) (uint64, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("cgroup: /proc/<pid>/stat: no ')' after the command name: %q", stat)
	}
	f := strings.Fields(stat[i+1:])
	// f[0] is field 3 (state), so field 22 is f[19].
	if len(f) < 20 {
		return 0, fmt.Errorf("cgroup: /proc/<pid>/stat: %d fields after the command name, want at least 20", len(f))
	}
	v, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("cgroup: /proc/<pid>/stat: starttime %q: %w", f[19], err)
	}
	return v, nil
}

// procState returns field 3 (state) of a /proc/<pid>/stat line, or 0.
func procState(stat string) byte {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) {
		return 0
	}
	return stat[i+2]
}
