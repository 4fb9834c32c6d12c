package nsinit

import (
	"os"
	"testing"
)

// TestBundleInitRefusesBadArguments: wrong process.args, a bad deadline,
// or not being pid 1 (where kill(-1) would reach the host) start nothing.
func TestBundleInitRefusesBadArguments(t *testing.T) {
	marker := t.TempDir() + "/ran"
	for _, args := range [][]string{
		{},
		{"30s"},
		{"30s", "/bin/sh", "-c", "touch " + marker},
		{"soon", "--", "/bin/sh", "-c", "touch " + marker},
		{"-1s", "--", "/bin/sh", "-c", "touch " + marker},
		{"30s", "--", "/bin/sh", "-c", "touch " + marker}, // valid, but the test is not pid 1
	} {
		if code := bundleInit(args); code != 125 {
			t.Errorf("bundleInit(%q) = %d, want 125", args, code)
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a refused bundle init started the command")
	}
}
