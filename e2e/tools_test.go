//go:build e2e

package e2e

import (
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/airtest"
)

// TestToolTableGitClone runs the README's git row: a clone over HTTP (a
// dumb-HTTP repository served from the host's loopback) with the three
// tools the table names; the files arrive, and the clone's .git/config is
// kept off the host as the table says.
func TestToolTableGitClone(t *testing.T) {
	airtest.RequireBinary(t, "/usr/bin/git")
	airtest.RequireUserNS(t)
	bin := mcpBinary(t)
	srv := gitRepo(t, "cloned through airlock\n")
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = http.Serve(ln, http.FileServer(http.Dir(srv))) }()
	defer ln.Close()
	host := "host.airlock.internal:" + strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	out := t.TempDir()
	if err := os.Chmod(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := []string{"run", "--net-host", host, "--tool", "git", "--tool", "/usr/lib/git-core/git", "--tool", "/usr/lib/git-core/git-remote-http", "--fs-write", out}
	if os.Geteuid() != 0 {
		args = append(args, "--allow-downgrade", "max_memory", "--allow-downgrade", "max_pids")
	}
	cmd := exec.CommandContext(ctx, bin, append(args, "--", "git", "clone", "http://"+host+"/repo.git", filepath.Join(out, "r"))...)
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("airlock run git clone: %v\n%s", err, b)
	}
	if got, err := os.ReadFile(filepath.Join(out, "r", "a.txt")); err != nil || string(got) != "cloned through airlock\n" {
		t.Fatalf("a.txt on the host = %q, %v\n%s", got, err, b)
	}
	if _, err := os.Stat(filepath.Join(out, "r", ".git", "config")); err == nil || !strings.Contains(string(b), ".git/config") {
		t.Fatalf("the clone's .git/config reached the host, or the run did not say it was kept off:\n%s", b)
	}
}

// gitRepo makes a bare repository repo.git, served as dumb HTTP from the
// returned folder, whose one commit holds a.txt with content.
func gitRepo(t *testing.T, content string) string {
	t.Helper()
	srv, src := t.TempDir(), t.TempDir()
	gitCmd := func(dir string, args ...string) {
		t.Helper()
		c := exec.Command("git", args...)
		c.Dir = dir
		c.Env = append(os.Environ(), "GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@b", "GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@b")
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("git %q: %v\n%s", args, err, out)
		}
	}
	gitCmd(srv, "init", "-q", "--bare", "repo.git")
	gitCmd(src, "init", "-q")
	if err := os.WriteFile(filepath.Join(src, "a.txt"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	gitCmd(src, "add", "a.txt")
	gitCmd(src, "commit", "-qm", "init")
	gitCmd(src, "push", "-q", filepath.Join(srv, "repo.git"), "HEAD:master")
	gitCmd(filepath.Join(srv, "repo.git"), "update-server-info")
	return srv
}
