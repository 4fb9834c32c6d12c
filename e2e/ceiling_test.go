//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/airtest"
)

// TestServeCeiling attacks `airlock serve` as a tenant: a token holder who
// sends inline policies that reach for the host's files, network and
// environment. Without an operator ceiling none of that may be granted;
// with one (--ceiling, or per token in the token file) only what lies
// within it.
func TestServeCeiling(t *testing.T) {
	airtest.RequireRoot(t)
	airtest.RequireUserNS(t)
	airtest.RequireLandlockABI(t, 4)
	bin := mcpBinary(t)
	t.Run("NoCeiling", func(t *testing.T) { testCeilingNone(t, bin) })
	t.Run("NoCeilingWorkspace", func(t *testing.T) { testCeilingWorkspace(t, bin) })
	t.Run("KilledServerWorkspaces", func(t *testing.T) { testCeilingKilled(t, bin) })
	t.Run("Ceiling", func(t *testing.T) { testCeilingFile(t, bin) })
	t.Run("PerToken", func(t *testing.T) { testCeilingPerToken(t, bin) })
}

// ceilingSecret is the text of the host secrets the tests plant.
const ceilingSecret = "AKIA-e2e-ceiling-secret-7f3a"

// plantSecret writes a secret file in a fresh folder outside every grant
// and returns the file's path.
func plantSecret(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	f := filepath.Join(dir, "credentials")
	if err := os.WriteFile(f, []byte(ceilingSecret+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// excess is one entry of a 403 exceeds_ceiling answer.
type excess struct {
	Key    string `json:"key"`
	Entry  string `json:"entry"`
	Reason string `json:"reason"`
}

// rawError is an error answer as it is on the wire.
type rawError struct {
	Error struct {
		Code    string   `json:"code"`
		Message string   `json:"message"`
		Exceeds []excess `json:"exceeds"`
	} `json:"error"`
}

// createRaw sends POST /v1/sessions with a plain HTTP client and returns
// the status, the body and, on 201, the session id.
func createRaw(t *testing.T, ctx context.Context, p *serveProc, token, policyText string) (int, []byte, string) {
	t.Helper()
	b, _ := json.Marshal(map[string]string{"policy": policyText})
	req, err := http.NewRequestWithContext(ctx, "POST", p.url+"/v1/sessions", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST /v1/sessions: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		t.Fatalf("read answer: %v", err)
	}
	var s struct{ ID string }
	if resp.StatusCode == http.StatusCreated {
		_ = json.Unmarshal(body, &s) // an empty id fails the callers that need it
	}
	return resp.StatusCode, body, s.ID
}

// wantExceeds checks a 403 exceeds_ceiling answer that names exactly the
// grants in want ("key entry"), each with a reason, and returns them.
func wantExceeds(t *testing.T, what string, status int, body []byte, want ...string) []excess {
	t.Helper()
	var e rawError
	if err := json.Unmarshal(body, &e); err != nil || status != http.StatusForbidden || e.Error.Code != "exceeds_ceiling" {
		t.Errorf("%s: answer = %d %s, want 403 exceeds_ceiling", what, status, body)
		return nil
	}
	var got []string
	for _, x := range e.Error.Exceeds {
		got = append(got, x.Key+" "+x.Entry)
		if x.Reason == "" {
			t.Errorf("%s: excess %s %s has no reason", what, x.Key, x.Entry)
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("%s: exceeds = %q, want %q (body %s)", what, got, want, body)
	}
	return e.Error.Exceeds
}

// stealWith shows what a session that should not exist gives away: the
// file through the files API and through exec, and the variable.
func stealWith(t *testing.T, ctx context.Context, p *serveProc, id string, args []string, file string) {
	t.Helper()
	s := p.client(t).Session(id)
	if file != "" {
		if data, err := s.Download(ctx, file); err == nil && strings.Contains(string(data), ceilingSecret) {
			t.Errorf("files API served %s: %q", file, data)
		}
	}
	if rep, err := s.Exec(ctx, client.ExecRequest{Args: args}); err == nil && strings.Contains(rep.Stdout, ceilingSecret) {
		t.Errorf("exec %q printed the secret: %q", args, rep.Stdout)
	}
	_ = s.Destroy(ctx) // the session was the failure; it is reported above
}

// testCeilingNone: a server without a ceiling refuses inline policies that
// grant host paths, network or the server's own environment, and starts
// nothing for them.
func testCeilingNone(t *testing.T, bin string) {
	secret := plantSecret(t)
	t.Setenv("AIRLOCK_E2E_SECRET", ceilingSecret) // inherited by the server
	// No warm inits: the check below counts every process under the server.
	p := startServe(t, bin, "--warm-pool", "0")
	ctx := serveCtx(t)

	status, body, id := createRaw(t, ctx, p, p.token, fmt.Sprintf("version: 1\nfs_read: [%s, /etc/shadow]\nallowed_tools: [cat]\n", filepath.Dir(secret)))
	wantExceeds(t, "fs_read of host paths", status, body, "fs_read "+filepath.Dir(secret), "fs_read /etc/shadow")
	if id != "" {
		stealWith(t, ctx, p, id, []string{"cat", secret}, secret)
	}

	status, body, id = createRaw(t, ctx, p, p.token, "version: 1\nenv: [AIRLOCK_E2E_SECRET]\nallowed_tools: [sh]\n")
	wantExceeds(t, "env pass-through", status, body, "env AIRLOCK_E2E_SECRET")
	if id != "" {
		stealWith(t, ctx, p, id, []string{"sh", "-c", "echo $AIRLOCK_E2E_SECRET"}, "")
	}

	status, body, id = createRaw(t, ctx, p, p.token, fmt.Sprintf("version: 1\nfs_write: [%s]\nnet_hosts: [example.com]\nallowed_tools: [cat, /usr/bin/sh]\nallow_downgrade: [landlock]\nbudget:\n  max_wall: 1h\n  max_memory: 1GiB\n", filepath.Dir(secret)))
	wantExceeds(t, "every other grant", status, body, "fs_write "+filepath.Dir(secret), "net_hosts example.com",
		"allowed_tools /usr/bin/sh", "allow_downgrade landlock", "budget.max_wall 1h", "budget.max_memory 1GiB")
	if id != "" {
		stealWith(t, ctx, p, id, []string{"cat", secret}, secret)
	}

	if list, err := p.client(t).Sessions(ctx); err != nil || len(list) != 0 {
		t.Errorf("sessions after refusals = %+v, %v; want none", list, err)
	}
	if procs := serveDescendants(p.cmd.Process.Pid); len(procs) != 0 {
		t.Errorf("refused policies left %d processes under the server: %v", len(procs), procs)
	}

	// A session without grants cannot read the secret either way.
	s, err := p.client(t).CreateSession(ctx, client.CreateRequest{PolicyText: "version: 1\nallowed_tools: [cat, sh]\n"})
	if err != nil {
		t.Fatalf("CreateSession without grants: %v\n%s", err, p.logText())
	}
	rep, err := s.Exec(ctx, client.ExecRequest{Args: []string{"cat", secret, "/etc/shadow"}})
	if err != nil || rep.ExitCode == 0 || strings.Contains(rep.Stdout, ceilingSecret) || strings.Contains(rep.Stdout, "root:") {
		t.Errorf("cat of host files in a session without grants = %+v, %v; want a failure", rep, err)
	}
	rep, err = s.Exec(ctx, client.ExecRequest{Args: []string{"sh", "-c", "echo \"[$AIRLOCK_E2E_SECRET]\""}})
	if err != nil || rep.Stdout != "[]\n" {
		t.Errorf("the server's environment inside the session = %+v, %v; want it empty", rep, err)
	}
	for _, f := range []string{secret, "/etc/shadow"} {
		data, err := s.Download(ctx, f)
		wantAPIError(t, "download "+f, err, 403, "denied")
		if strings.Contains(string(data), ceilingSecret) {
			t.Errorf("download %s served the secret", f)
		}
	}
}

// testCeilingWorkspace: without a ceiling, an inline policy without grants
// gets a private workspace, created 0700 by the server, reported in the
// session JSON, the base of relative file paths, and removed when the
// session ends.
func testCeilingWorkspace(t *testing.T, bin string) {
	root := filepath.Join(t.TempDir(), "workspaces")
	p := startServe(t, bin, "--workspace-dir", root)
	ctx := serveCtx(t)
	c := p.client(t)
	st, err := os.Lstat(root)
	if err != nil || !st.IsDir() || st.Mode().Perm() != 0o700 {
		t.Fatalf("--workspace-dir %s = %v, %v; want a 0700 folder", root, st, err)
	}
	var spaces []string
	for i := range 2 {
		s, err := c.CreateSession(ctx, client.CreateRequest{PolicyText: "version: 1\nallowed_tools: [sh, cat]\n"})
		if err != nil {
			t.Fatalf("CreateSession: %v\n%s", err, p.logText())
		}
		info, err := s.Info(ctx)
		if err != nil || filepath.Dir(filepath.Dir(info.Workspace)) != root {
			t.Fatalf("Info = %+v, %v; want a workspace in %s", info, err, root)
		}
		if st, err := os.Lstat(info.Workspace); err != nil || !st.IsDir() || st.Mode().Perm() != 0o700 {
			t.Errorf("workspace %s = %v, %v; want a 0700 folder", info.Workspace, st, err)
		}
		if slices.Contains(spaces, info.Workspace) {
			t.Errorf("two sessions share workspace %s", info.Workspace)
		}
		spaces = append(spaces, info.Workspace)
		secret := fmt.Sprintf("session-%d-%s", i, ceilingSecret)
		if err := s.Upload(ctx, "note.txt", strings.NewReader(secret)); err != nil {
			t.Fatalf("Upload relative path: %v", err)
		}
		rep, err := s.Exec(ctx, client.ExecRequest{Args: []string{"sh", "-c", "cat note.txt; echo more > out.txt"}})
		if err != nil || rep.ExitCode != 0 || rep.Stdout != secret {
			t.Errorf("exec in the workspace = %+v, %v", rep, err)
		}
		if got, err := s.Download(ctx, "out.txt"); err != nil || string(got) != "more\n" {
			t.Errorf("Download out.txt = %q, %v", got, err)
		}
		if i == 1 {
			// The second session cannot reach the first one's workspace.
			rep, err := s.Exec(ctx, client.ExecRequest{Args: []string{"cat", filepath.Join(spaces[0], "note.txt")}})
			if err != nil || rep.ExitCode == 0 || strings.Contains(rep.Stdout, ceilingSecret) {
				t.Errorf("cat of another session's workspace = %+v, %v", rep, err)
			}
			_, err = s.Download(ctx, filepath.Join(spaces[0], "note.txt"))
			wantAPIError(t, "download from another workspace", err, 403, "denied")
		}
		if err := s.Destroy(ctx); err != nil {
			t.Fatalf("Destroy: %v", err)
		}
		if _, err := os.Lstat(info.Workspace); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("workspace %s after Destroy: %v; want it removed", info.Workspace, err)
		}
	}
}

// testCeilingKilled: the private workspaces of a SIGKILLed server are
// removed by the next server that starts with the same --workspace-dir.
// (Tenant files never reach them while a session runs: writes are staged
// and copied back when the session ends, which a killed server never does.)
func testCeilingKilled(t *testing.T, bin string) {
	root := filepath.Join(t.TempDir(), "workspaces")
	ctx := serveCtx(t)
	old := startServe(t, bin, "--workspace-dir", root)
	s, err := old.client(t).CreateSession(ctx, client.CreateRequest{PolicyText: "version: 1\nallowed_tools: [sh]\n"})
	if err != nil {
		t.Fatalf("CreateSession: %v\n%s", err, old.logText())
	}
	if err := s.Upload(ctx, "tenant-data", strings.NewReader(ceilingSecret)); err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := old.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-old.exited
	if _, err := os.Stat(info.Workspace); err != nil {
		t.Fatalf("the killed server's workspace is already gone (%v): the test proves nothing", err)
	}
	if _, err := os.Stat(filepath.Join(info.Workspace, "tenant-data")); err == nil {
		t.Errorf("a staged upload reached the disk of a server that was killed before the session ended")
	}
	next := startServe(t, bin, "--workspace-dir", root)
	if _, err := os.Lstat(filepath.Dir(info.Workspace)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the killed server's workspaces after the next server started: %v; want them removed\n%s", err, next.logText())
	}
}

// writeCeiling writes a ceiling policy file and returns its path.
func writeCeiling(t *testing.T, text string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "ceiling.yaml")
	if err := os.WriteFile(f, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// testCeilingFile: with --ceiling, policies within it work and each grant
// beyond it is named in the refusal; the ceiling's own entries are never
// shown to the tenant.
func testCeilingFile(t *testing.T, bin string) {
	allowed := t.TempDir()
	if err := os.MkdirAll(filepath.Join(allowed, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(allowed, "sub", "data.txt"), []byte("shared data\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	secret := plantSecret(t)
	ceiling := writeCeiling(t, fmt.Sprintf("version: 1\nfs_read: [%s]\nnet_hosts: [\"*.ceiling-only.example:443\"]\nallowed_tools: [cat, sh]\nbudget:\n  max_wall: 2m\n", allowed))
	p := startServe(t, bin, "--ceiling", ceiling)
	ctx := serveCtx(t)

	s, err := p.client(t).CreateSession(ctx, client.CreateRequest{PolicyText: fmt.Sprintf("version: 1\nfs_read: [%s/sub]\nnet_hosts: [\"api.ceiling-only.example:443\"]\nallowed_tools: [cat]\nbudget:\n  max_wall: 1m\n", allowed)})
	if err != nil {
		t.Fatalf("CreateSession within the ceiling: %v\n%s", err, p.logText())
	}
	rep, err := s.Exec(ctx, client.ExecRequest{Args: []string{"cat", filepath.Join(allowed, "sub", "data.txt")}})
	if err != nil || rep.ExitCode != 0 || rep.Stdout != "shared data\n" {
		t.Errorf("cat inside the ceiling = %+v, %v", rep, err)
	}
	info, err := s.Info(ctx)
	if err != nil || info.Workspace == "" || info.ExecWall != "1m0s" {
		t.Errorf("Info = %+v, %v; want a private workspace and a 1m exec deadline", info, err)
	}

	status, body, id := createRaw(t, ctx, p, p.token, fmt.Sprintf("version: 1\nfs_read: [%s]\nnet_hosts: [evil.test]\nallowed_tools: [python3]\nbudget:\n  max_wall: 5m\n", secret))
	wantExceeds(t, "outside the ceiling", status, body, "fs_read "+secret, "net_hosts evil.test", "allowed_tools python3", "budget.max_wall 5m")
	if id != "" {
		stealWith(t, ctx, p, id, []string{"cat", secret}, secret)
	}
	if strings.Contains(string(body), allowed) || strings.Contains(string(body), "ceiling-only") {
		t.Errorf("the refusal shows the ceiling's own entries: %s", body)
	}

	// A symlink inside the ceiling's folder does not carry a grant out of
	// it: the ceiling check is lexical, and the sandbox refuses a grant
	// whose path runs through a symlink.
	if err := os.Symlink(filepath.Dir(secret), filepath.Join(allowed, "escape")); err != nil {
		t.Fatal(err)
	}
	status, body, id = createRaw(t, ctx, p, p.token, fmt.Sprintf("version: 1\nfs_read: [%s/escape]\nallowed_tools: [cat]\n", allowed))
	t.Logf("a grant through a symlink inside the ceiling: %d %s", status, bytes.TrimSpace(body))
	if id != "" {
		stealWith(t, ctx, p, id, []string{"cat", filepath.Join(allowed, "escape", "credentials")}, filepath.Join(allowed, "escape", "credentials"))
	} else if status != http.StatusInternalServerError || strings.Contains(string(body), ceilingSecret) {
		t.Errorf("grant through a symlink = %d %s; want a refused start", status, body)
	}

	// A default the tenant left unset is lowered to the ceiling, not refused.
	s2, err := p.client(t).CreateSession(ctx, client.CreateRequest{PolicyText: "version: 1\nallowed_tools: [sh]\n"})
	if err != nil {
		t.Fatalf("CreateSession with default budgets under a lower ceiling: %v", err)
	}
	if info, err := s2.Info(ctx); err != nil || execWall(info.ExecWall) > 2*time.Minute {
		t.Errorf("Info = %+v, %v; want max_wall lowered to the ceiling's 2m", info, err)
	}
}

// testCeilingPerToken: each token's ceiling from the token file bounds its
// own sessions only; a token without one falls back to --ceiling.
func testCeilingPerToken(t *testing.T, bin string) {
	dirA, dirB, dirG := t.TempDir(), t.TempDir(), t.TempDir()
	for _, d := range []string{dirA, dirB, dirG} {
		if err := os.WriteFile(filepath.Join(d, "f"), []byte("in "+d+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ceilA := writeCeiling(t, fmt.Sprintf("version: 1\nfs_read: [%s]\nallowed_tools: [cat]\n", dirA))
	ceilB := writeCeiling(t, fmt.Sprintf("version: 1\nfs_read: [%s]\nallowed_tools: [cat]\n", dirB))
	global := writeCeiling(t, fmt.Sprintf("version: 1\nfs_read: [%s]\nallowed_tools: [cat]\n", dirG))
	tokA, tokB, tokG := "token-a-"+ceilingSecret, "token-b-"+ceilingSecret, "token-g-"+ceilingSecret
	tokens := filepath.Join(t.TempDir(), "tokens")
	text := fmt.Sprintf("# tenants\n%s ceiling=%s\n%s  ceiling=%s\n%s\n", tokA, ceilA, tokB, ceilB, tokG)
	if err := os.WriteFile(tokens, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startServe(t, bin, "--token-file", tokens, "--ceiling", global)
	ctx := serveCtx(t)
	for _, tc := range []struct {
		name, token, dir string
		ok               bool
	}{
		{"A-own", tokA, dirA, true}, {"A-B's", tokA, dirB, false}, {"A-global", tokA, dirG, false},
		{"B-own", tokB, dirB, true}, {"B-A's", tokB, dirA, false}, {"B-global", tokB, dirG, false},
		{"G-global", tokG, dirG, true}, {"G-A's", tokG, dirA, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body, id := createRaw(t, ctx, p, tc.token, fmt.Sprintf("version: 1\nfs_read: [%s]\nallowed_tools: [cat]\n", tc.dir))
			if !tc.ok {
				wantExceeds(t, tc.name, status, body, "fs_read "+tc.dir)
				return
			}
			if status != http.StatusCreated {
				t.Fatalf("create = %d %s", status, body)
			}
			c, err := client.New(p.url, tc.token, client.Options{})
			if err != nil {
				t.Fatal(err)
			}
			rep, err := c.Session(id).Exec(ctx, client.ExecRequest{Args: []string{"cat", filepath.Join(tc.dir, "f")}})
			if err != nil || rep.ExitCode != 0 {
				t.Errorf("cat inside the token's ceiling = %+v, %v", rep, err)
			}
			_ = c.Session(id).Destroy(ctx) // ends with the server otherwise
		})
	}
	if strings.Contains(p.logText(), ceilingSecret) {
		t.Errorf("the server log shows a token")
	}
}

// tempCeiling returns the --ceiling flag of the tests in server_test.go,
// whose policies write in their temporary folders and run sh, cat,
// python3 and sleep for up to 5 minutes.
func tempCeiling(t *testing.T) []string {
	t.Helper()
	return []string{"--ceiling", writeCeiling(t, fmt.Sprintf("version: 1\nfs_write: [%s]\nallowed_tools: [sh, cat, python3, sleep]\nbudget:\n  max_wall: 5m\n", os.TempDir()))}
}

// execWall parses a session's exec_wall; an unparsable one is longer than
// any bound.
func execWall(s string) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 1<<63 - 1
	}
	return d
}
