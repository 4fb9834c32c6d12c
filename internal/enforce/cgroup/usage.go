package cgroup

import (
	"fmt"
	"strconv"
	"strings"
)

// keyed returns the value of key in a flat keyed file such as cpu.stat,
// memory.events or memory.oom_control ("key value" lines).
func keyed(data, key string) (int64, bool) {
	for _, line := range strings.Split(data, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if ok && k == key {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// single parses a control file holding one integer, such as pids.current.
func single(name, data string) (int64, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(data), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("cgroup: read %s: not an integer: %w", name, err)
	}
	return n, nil
}

// pidList parses cgroup.procs: one pid a line.
func pidList(name, data string) ([]int, error) {
	var out []int
	for _, f := range strings.Fields(data) {
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("cgroup: read %s: bad pid %q", name, f)
		}
		out = append(out, n)
	}
	return out, nil
}
