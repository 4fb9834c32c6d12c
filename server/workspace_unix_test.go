//go:build unix

package server_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/server"
)

// TestSweepKilledServers: a new server removes the folders of servers
// that are gone (their lock is free), and nothing else: not a live
// server's, not one without a lock, not one others may enter, not a
// symlink, not another name.
func TestSweepKilledServers(t *testing.T) {
	parent := t.TempDir()
	if err := os.Chmod(parent, 0o700); err != nil {
		t.Fatal(err)
	}
	mk := func(name string, mode os.FileMode, lock bool) string {
		d := filepath.Join(parent, name)
		if err := os.MkdirAll(filepath.Join(d, "ws-1"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "ws-1", "tenant-data"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if lock {
			if err := os.WriteFile(filepath.Join(d, ".lock"), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
		return d
	}
	dead := mk("airlock-serve-dead", 0o700, true)
	live := mk("airlock-serve-live", 0o700, true)
	keep := []string{
		live,
		mk("airlock-serve-nolock", 0o700, false),
		mk("airlock-serve-open", 0o755, true),
		mk("other-name", 0o700, true),
	}
	elsewhere := mk("../elsewhere-serve", 0o700, true)
	if err := os.Symlink(elsewhere, filepath.Join(parent, "airlock-serve-link")); err != nil {
		t.Fatal(err)
	}
	linked := mk("airlock-serve-lock-link", 0o700, false)
	if err := os.Symlink(filepath.Join(elsewhere, ".lock"), filepath.Join(linked, ".lock")); err != nil {
		t.Fatal(err)
	}
	keep = append(keep, linked, elsewhere)

	// The live server holds its lock.
	f, err := os.Open(filepath.Join(live, ".lock"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}

	ns := func(context.Context, *policy.Policy) (server.Session, error) { return nil, nil }
	srv, err := server.New(server.Config{NewSession: ns, InsecureNoAuth: true, WorkspaceDir: parent})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(dead); !os.IsNotExist(err) {
		t.Errorf("the killed server's folder is still there: %v", err)
	}
	for _, d := range keep {
		if _, err := os.Stat(filepath.Join(d, "ws-1", "tenant-data")); err != nil {
			t.Errorf("sweep removed %s: %v", d, err)
		}
	}
	// A second server leaves the first one's folder alone.
	before, _ := filepath.Glob(filepath.Join(parent, "airlock-serve-*"))
	srv2, err := server.New(server.Config{NewSession: ns, InsecureNoAuth: true, WorkspaceDir: parent})
	if err != nil {
		t.Fatal(err)
	}
	if after, _ := filepath.Glob(filepath.Join(parent, "airlock-serve-*")); len(after) != len(before)+1 {
		t.Errorf("folders before the second server %q, after %q; want one more", before, after)
	}
	for _, s := range []*server.Server{srv, srv2} {
		if err := s.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	final, _ := filepath.Glob(filepath.Join(parent, "airlock-serve-*"))
	want := []string{filepath.Join(parent, "airlock-serve-link"), linked, live, keep[1], keep[2]}
	slices.Sort(want)
	if !slices.Equal(final, want) {
		t.Errorf("folders after Shutdown = %q, want %q (the servers' own removed)", final, want)
	}
}
