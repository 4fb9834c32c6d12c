//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/airtest"
)

// mctsDir holds the TypeScript SDK driver: package.json and the committed
// package-lock.json pin @modelcontextprotocol/sdk, drive.mjs runs the checks.
const mctsDir = "mcpts"

// TestMCPTypeScriptSDK is issue 18's acceptance: the official TypeScript MCP
// SDK client drives airlock mcp over stdio and streamable HTTP (drive.mjs
// starts the servers): tools listed with annotations, a 70 s command that
// completes under the SDK's 60 s request timeout thanks to progress
// notifications, denials as structured content, and a session that survives
// 2 minutes of idle and ends at its lifetime. The scenarios run
// concurrently, so it takes about 2 minutes 40 seconds.
func TestMCPTypeScriptSDK(t *testing.T) {
	airtest.RequireUserNS(t)
	airtest.RequireLandlockABI(t, 4)
	node, err := exec.LookPath("node")
	if err != nil {
		airtest.SkipOrFail(t, "node is not installed (%v): install nodejs (20 or later)", err)
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		airtest.SkipOrFail(t, "npm is not installed (%v): install npm", err)
	}
	t.Parallel()
	bin := mcpBinary(t)
	modules := mctsModules(t, npm)

	// drive.mjs resolves its imports from its own directory: a copy of it
	// next to a link to the cached node_modules.
	run := t.TempDir()
	src, err := os.ReadFile(filepath.Join(mctsDir, "drive.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(run, "drive.mjs"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(modules, filepath.Join(run, "node_modules")); err != nil {
		t.Fatal(err)
	}

	// drive.mjs bounds itself (MCPTS_TIMEOUT_SECONDS, 330 s by default) and
	// kills its servers; this outer bound kills its whole process group.
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "drive.mjs")
	cmd.Dir = run
	cmd.Env = append(os.Environ(), "AIRLOCK_BIN="+bin)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	out := &lineLogger{t: t}
	cmd.Stdout, cmd.Stderr = out, out
	start := time.Now()
	err = cmd.Run()
	out.flush()
	// Whatever happened, nothing drive.mjs started may outlive it.
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	t.Logf("drive.mjs took %v", time.Since(start).Round(time.Second))
	if ctx.Err() != nil {
		t.Fatalf("drive.mjs did not finish within 6 minutes (killed): %v\noutput:\n%s", err, out.String())
	}
	if err != nil {
		t.Fatalf("drive.mjs: %v\noutput:\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "PASS every check") {
		t.Fatalf("drive.mjs exited 0 without its PASS line\noutput:\n%s", out.String())
	}
}

// mctsModules returns the node_modules of the pinned SDK, installed with npm
// ci into a cache directory keyed by the hash of package.json and
// package-lock.json, so that reruns do not download again. The install goes
// to a temporary directory renamed into place: concurrent runs never see a
// half-installed tree.
func mctsModules(t *testing.T, npm string) string {
	t.Helper()
	var files [][]byte
	h := sha256.New()
	for _, name := range []string{"package.json", "package-lock.json"} {
		b, err := os.ReadFile(filepath.Join(mctsDir, name))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, b)
		h.Write(b)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		airtest.SkipOrFail(t, "no cache directory for the npm packages (%v): set XDG_CACHE_HOME or HOME", err)
	}
	parent := filepath.Join(cache, "airlock-ci")
	dir := filepath.Join(parent, "mcpts-"+hex.EncodeToString(h.Sum(nil))[:16])
	modules := filepath.Join(dir, "node_modules")
	installed := func() bool {
		_, err := os.Stat(filepath.Join(modules, "@modelcontextprotocol", "sdk", "package.json"))
		return err == nil
	}
	if installed() {
		t.Logf("npm packages: cached in %s", dir)
		return modules
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	tmp, err := os.MkdirTemp(parent, filepath.Base(dir)+".tmp-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp) // gone after the rename; a leftover after a failure
	for i, name := range []string{"package.json", "package-lock.json"} {
		if err := os.WriteFile(filepath.Join(tmp, name), files[i], 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ci := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts", "--no-update-notifier")
	ci.Dir = tmp
	start := time.Now()
	if b, err := ci.CombinedOutput(); err != nil {
		airtest.SkipOrFail(t, "npm ci of the TypeScript MCP SDK (e2e/mcpts/package-lock.json) in %s: %v (is the npm registry reachable?)\n%s", tmp, err, b)
	}
	if err := os.Rename(tmp, dir); err != nil && !installed() {
		t.Fatalf("npm packages: move %s into place: %v", tmp, err)
	}
	t.Logf("npm packages: installed into %s in %v", dir, time.Since(start).Round(time.Second))
	return modules
}

// lineLogger streams the driver's output into the test log a line at a
// time and keeps all of it for the failure message.
type lineLogger struct {
	t       *testing.T
	mu      sync.Mutex
	all     bytes.Buffer // guarded by mu
	partial []byte       // guarded by mu: the unfinished last line
}

func (l *lineLogger) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.all.Write(p)
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		l.t.Log(string(l.partial[:i]))
		l.partial = l.partial[i+1:]
	}
	return len(p), nil
}

// flush logs an unfinished last line.
func (l *lineLogger) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.partial) > 0 {
		l.t.Log(string(l.partial))
		l.partial = nil
	}
}

func (l *lineLogger) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.all.String()
}
