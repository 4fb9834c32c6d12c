package cgroup

import (
	"os"
	"path/filepath"
	"testing"
)

// TestEventsIn sums an OCI container's counters over its hierarchies:
// v1's memory.oom_control, v2's memory.events and pids.events; absent
// directories and files count nothing.
func TestEventsIn(t *testing.T) {
	v1mem, v1pids, v2 := t.TempDir(), t.TempDir(), t.TempDir()
	files := map[string]string{
		filepath.Join(v1mem, "memory.oom_control"): "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
		filepath.Join(v1pids, "pids.events"):       "max 0\n",
		filepath.Join(v2, "memory.events"):         "low 0\nhigh 0\nmax 7\noom 1\noom_kill 1\n",
		filepath.Join(v2, "pids.events"):           "max 3\n",
	}
	for p, c := range files {
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got := EventsIn([]string{v1mem, v1pids, v2, filepath.Join(v2, "gone")})
	if got.OOMKills != 3 || got.PidsMaxHits != 3 {
		t.Errorf("EventsIn = %+v, want 3 OOM kills (memory.events' max is not one) and 3 refused forks", got)
	}
}
