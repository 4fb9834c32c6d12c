package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/airtest"
)

// TestRunStartsInCurrentFolder runs what a user types first: a script
// named relative to the folder they stand in, that folder granted. The
// command starts there; --cwd resolves against it like every path; and
// when the folder is not granted, the failure says where the command
// started and why.
func TestRunStartsInCurrentFolder(t *testing.T) {
	airtest.RequireUserNS(t)
	airtest.RequireLandlockABI(t, 4)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "job.sh", "pwd\n")
	for _, d := range []string{"sub", "data"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sub := filepath.Join(dir, "sub")
	tests := []struct {
		name string
		at   string // where the user stands; "" for dir
		args []string
		pwd  string
	}{
		{"fs-read-dot", "", []string{"run", "--fs-read", ".", "--", "sh", "job.sh"}, dir},
		{"fs-write-dot", "", []string{"run", "--fs-write", ".", "--", "sh", "job.sh"}, dir},
		{"fs-read-dot-and-fs-write-sub", "", []string{"run", "--fs-read", ".", "--fs-write", "./sub", "--", "sh", "job.sh"}, dir},
		{"cwd-dot", "", []string{"run", "--fs-read", ".", "--cwd", ".", "--", "sh", "-c", "pwd"}, dir},
		{"cwd-relative", "", []string{"run", "--fs-read", ".", "--cwd", "sub", "--", "sh", "-c", "pwd"}, sub},
		{"granted-parent", sub, []string{"run", "--fs-read", "..", "--", "sh", "-c", "pwd"}, sub},
		{"placed", sub, []string{"run", "--fs-read", ".:/workspace", "--", "sh", "-c", "pwd"}, "/workspace"},
		{"placed-cwd-relative", "", []string{"run", "--fs-read", ".:/workspace", "--cwd", "sub", "--", "sh", "-c", "pwd"}, "/workspace/sub"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			at := tt.at
			if at == "" {
				at = dir
			}
			r := airlock(t, at, tt.args...)
			if r.code != 0 || strings.TrimSpace(r.stdout) != tt.pwd {
				t.Errorf("airlock %q in %s: exit %d, stdout %q; want 0 and %q\nstderr:\n%s", tt.args, at, r.code, r.stdout, tt.pwd, r.stderr)
			}
		})
	}
	t.Run("not-granted", func(t *testing.T) {
		args := []string{"run", "--fs-read", "./data", "--", "sh", "job.sh"}
		r := airlock(t, dir, args...)
		if r.code == 0 {
			t.Fatalf("airlock %q: exit 0, want the script not found\nstdout:\n%s", args, r.stdout)
		}
		for _, want := range []string{"started in /tmp", "not in the current folder " + dir, `"job.sh"`, "--fs-read .", "--cwd DIR"} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("airlock %q: stderr lacks %q:\n%s", args, want, r.stderr)
			}
		}
	})
	t.Run("not-granted-fs-write", func(t *testing.T) {
		args := []string{"run", "--fs-write", "./sub", "--", "sh", "job.sh"}
		r := airlock(t, dir, args...)
		if r.code == 0 {
			t.Fatalf("airlock %q: exit 0, want the script not found\nstdout:\n%s", args, r.stdout)
		}
		for _, want := range []string{"started in " + sub, "the first fs_write grant", `"job.sh"`} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("airlock %q: stderr lacks %q:\n%s", args, want, r.stderr)
			}
		}
	})
	t.Run("no-hint-on-success", func(t *testing.T) {
		args := []string{"run", "--fs-read", "./data", "--", "sh", "-c", "true", "job.sh"}
		if r := airlock(t, dir, args...); r.code != 0 || strings.Contains(r.stderr, "started in") {
			t.Errorf("airlock %q: exit %d, stderr %q; want 0 and no hint", args, r.code, r.stderr)
		}
	})
}
