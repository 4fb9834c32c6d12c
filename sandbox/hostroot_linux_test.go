package sandbox

import (
	"os"
	"path/filepath"
	"testing"
)

// TestHostRoot: uid 0 is the host's root in the initial namespace and in
// a rootful container, not in a rootless one.
func TestHostRoot(t *testing.T) {
	for _, c := range []struct {
		uidMap string
		uid    int
		want   bool
	}{
		{"         0          0 4294967295\n", 0, true},
		{"0 0 65536\n", 0, true},
		{"0 1000 1\n1 100000 65536\n", 0, false},
		{"0 1000 1\n1 100000 65536\n", 1, false},
		{"0 0 4294967295\n", 1000, false},
		{"1000 0 1\n", 1000, true},
		{"", 0, false},
	} {
		p := filepath.Join(t.TempDir(), "uid_map")
		if err := os.WriteFile(p, []byte(c.uidMap), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := hostRoot(c.uid, p); got != c.want {
			t.Errorf("hostRoot(%d, %q) = %v, want %v", c.uid, c.uidMap, got, c.want)
		}
	}
}
