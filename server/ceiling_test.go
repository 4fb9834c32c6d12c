package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/server"
)

// mustPolicy parses a policy text for a ceiling.
func mustPolicy(t *testing.T, text string) *policy.Policy {
	t.Helper()
	p, err := policy.Parse([]byte(text), policy.ParseOptions{File: "ceiling.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// createAnswer sends POST /v1/sessions with an inline policy.
func (e *env) createAnswer(token, policyText string) (*http.Response, []byte) {
	e.t.Helper()
	b, _ := json.Marshal(map[string]string{"policy": policyText})
	return e.do("POST", "/v1/sessions", token, b)
}

// wantExceeds checks a 403 exceeds_ceiling naming exactly want ("key
// entry", in order), each with a reason.
func (e *env) wantExceeds(resp *http.Response, body []byte, want ...string) apiErr {
	e.t.Helper()
	ae := e.wantError(resp, body, http.StatusForbidden, "exceeds_ceiling")
	var got []string
	for _, x := range ae.Error.Exceeds {
		got = append(got, x.Key+" "+x.Entry)
		if x.Reason == "" {
			e.t.Errorf("excess %s %s has no reason", x.Key, x.Entry)
		}
	}
	if !slices.Equal(got, want) {
		e.t.Errorf("exceeds = %q, want %q (body %s)", got, want, body)
	}
	return ae
}

// sessionCount is how many sessions the fake sandbox has started.
func (e *env) sessionCount() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.fakes)
}

// TestNoCeilingRefuses: without a ceiling, an inline policy may not grant
// host paths, network, the server's environment, tool paths, downgrades or
// budgets above the defaults; each is named, and nothing starts.
func TestNoCeilingRefuses(t *testing.T) {
	root := filepath.Join(t.TempDir(), "ws")
	e := newEnvNoCeiling(t, server.Config{WorkspaceDir: root})
	tests := []struct {
		name, text string
		want       []string
	}{
		{"fs_read", "version: 1\nfs_read: [/root/.aws, /etc/shadow]\n", []string{"fs_read /etc/shadow", "fs_read /root/.aws"}},
		{"fs_write", "version: 1\nfs_write: [/etc]\n", []string{"fs_write /etc"}},
		{"net_hosts", "version: 1\nnet_hosts: [example.com, 10.0.0.0/8]\n", []string{"net_hosts 10.0.0.0/8", "net_hosts example.com"}},
		{"env-pass-through", "version: 1\nenv: [AWS_SECRET_ACCESS_KEY, LANG=C]\n", []string{"env AWS_SECRET_ACCESS_KEY"}},
		{"tool-path", "version: 1\nallowed_tools: [sh, /root/bin/deploy]\n", []string{"allowed_tools /root/bin/deploy"}},
		{"downgrade", "version: 1\nallow_downgrade: [landlock]\n", []string{"allow_downgrade landlock"}},
		{"budget", "version: 1\nbudget:\n  max_wall: 31s\n  max_memory: 512MiB\n", []string{"budget.max_wall 31s"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := e.createAnswer(tokA, tt.text)
			ae := e.wantExceeds(resp, body, tt.want...)
			if !strings.Contains(ae.Error.Message, "no ceiling") {
				t.Errorf("message %q does not say the token has no ceiling", ae.Error.Message)
			}
		})
	}
	if n := e.sessionCount(); n != 0 {
		t.Errorf("%d sandboxes started for refused policies", n)
	}
	if ws := workspacesIn(t, root); len(ws) != 0 {
		t.Errorf("workspaces after refusals = %q; want none", ws)
	}
	resp, body := e.do("GET", "/v1/sessions", tokA, nil)
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"sessions":[]`) {
		t.Errorf("sessions after refusals = %d %s", resp.StatusCode, body)
	}
}

// TestNoCeilingWorkspace: an inline policy without grants gets a private
// workspace, 0700, as its fs_write grant, reported in the session JSON,
// the base of relative paths, removed when the session ends.
func TestNoCeilingWorkspace(t *testing.T) {
	root := filepath.Join(t.TempDir(), "ws")
	var got []*policy.Policy
	e := newEnvNoCeiling(t, server.Config{WorkspaceDir: root})
	inner := e.newSession
	e.srvNewSession(func(ctx context.Context, p *policy.Policy) (server.Session, error) {
		got = append(got, p)
		return inner(ctx, p)
	})
	if st, err := os.Lstat(root); err != nil || st.Mode().Perm() != 0o700 || !st.IsDir() {
		t.Fatalf("WorkspaceDir = %v, %v; want a 0700 folder created by New", st, err)
	}
	var spaces []string
	for range 2 {
		id := e.create(tokA, "version: 1\nallowed_tools: [sh]\n")
		resp, body := e.do("GET", "/v1/sessions/"+id, tokA, nil)
		var s struct{ Workspace string }
		if err := json.Unmarshal(body, &s); err != nil || resp.StatusCode != 200 || filepath.Dir(filepath.Dir(s.Workspace)) != root {
			t.Fatalf("session = %d %s; want a workspace in %s", resp.StatusCode, body, root)
		}
		if st, err := os.Lstat(s.Workspace); err != nil || st.Mode().Perm() != 0o700 || !st.IsDir() {
			t.Errorf("workspace = %v, %v; want a 0700 folder", st, err)
		}
		if p := got[len(got)-1]; !slices.Equal(p.FSWrite(), []string{s.Workspace}) || len(p.FSRead()) != 0 {
			t.Errorf("session policy fs_write = %q, fs_read = %q; want only the workspace", p.FSWrite(), p.FSRead())
		}
		if slices.Contains(spaces, s.Workspace) {
			t.Errorf("workspace %s reused", s.Workspace)
		}
		spaces = append(spaces, s.Workspace)
		if resp, body := e.do("PUT", "/v1/sessions/"+id+"/files/sub/../note.txt", tokA, "hello"); resp.StatusCode != 200 {
			t.Fatalf("upload a relative path = %d %s", resp.StatusCode, body)
		}
		if data, err := os.ReadFile(filepath.Join(s.Workspace, "note.txt")); err != nil || string(data) != "hello" {
			t.Errorf("uploaded file = %q, %v", data, err)
		}
		if err := os.MkdirAll(filepath.Join(s.Workspace, "ro", "deep"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(s.Workspace, "ro"), 0o500); err != nil {
			t.Fatal(err)
		}
		// A link the sandbox left must not lead the removal outside.
		target := t.TempDir()
		if err := os.WriteFile(filepath.Join(target, "keep"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(s.Workspace, "out")); err != nil {
			t.Fatal(err)
		}
		if resp, body := e.do("DELETE", "/v1/sessions/"+id, tokA, nil); resp.StatusCode != 204 {
			t.Fatalf("destroy = %d %s", resp.StatusCode, body)
		}
		if _, err := os.Lstat(s.Workspace); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("workspace after the session ended: %v; want it removed", err)
		}
		if _, err := os.Stat(filepath.Join(target, "keep")); err != nil {
			t.Errorf("removing the workspace followed a symlink out of it: %v", err)
		}
	}
}

// workspacesIn lists the workspaces in the servers' folders in parent.
func workspacesIn(t *testing.T, parent string) []string {
	t.Helper()
	ws, err := filepath.Glob(filepath.Join(parent, "airlock-serve-*", "ws-*"))
	if err != nil {
		t.Fatal(err)
	}
	return ws
}

// srvNewSession replaces the fake sandbox's start function.
func (e *env) srvNewSession(f server.NewSessionFunc) {
	e.mu.Lock()
	e.start = f
	e.mu.Unlock()
}

// TestWorkspaceRemovedWhenStartFails: a sandbox that does not start leaves
// no workspace.
func TestWorkspaceRemovedWhenStartFails(t *testing.T) {
	root := filepath.Join(t.TempDir(), "ws")
	e := newEnvNoCeiling(t, server.Config{WorkspaceDir: root})
	var seen string
	e.srvNewSession(func(ctx context.Context, p *policy.Policy) (server.Session, error) {
		seen = p.FSWrite()[0]
		return nil, errors.New("no sandbox today")
	})
	resp, body := e.createAnswer(tokA, "version: 1\nallowed_tools: [sh]\n")
	e.wantError(resp, body, 500, "sandbox_failed")
	if seen == "" {
		t.Fatal("NewSession was not given a workspace")
	}
	if _, err := os.Lstat(seen); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("workspace %s after a failed start: %v; want it removed", seen, err)
	}
}

// TestDefaultWorkspaceDir: without WorkspaceDir, the workspaces live in a
// fresh 0700 folder under TMPDIR that Shutdown removes.
func TestDefaultWorkspaceDir(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	e := newEnvNoCeiling(t, server.Config{})
	id := e.create(tokA, "version: 1\nallowed_tools: [sh]\n")
	_, body := e.do("GET", "/v1/sessions/"+id, tokA, nil)
	var s struct{ Workspace string }
	_ = json.Unmarshal(body, &s) // checked below
	dir := filepath.Dir(s.Workspace)
	if filepath.Dir(dir) != tmp || !strings.HasPrefix(filepath.Base(dir), "airlock-serve-") {
		t.Fatalf("workspace %q, want one in a new folder of %s", s.Workspace, tmp)
	}
	if st, err := os.Lstat(dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("folder of workspaces = %v, %v; want 0700", st, err)
	}
	if err := e.srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("folder of workspaces after Shutdown: %v; want it removed", err)
	}
}

// TestCeiling: with a ceiling, inline and named policies within it start;
// each grant beyond it is named, without showing the ceiling's own grants;
// defaults the policy does not set are lowered to the ceiling's.
func TestCeiling(t *testing.T) {
	allowed, outside := t.TempDir(), t.TempDir()
	ceiling := mustPolicy(t, "version: 1\nfs_read: ["+allowed+"]\nfs_write: ["+allowed+"/out]\nnet_hosts: [\"*.ceiling-only.test:443\"]\nallowed_tools: [sh, cat]\nenv: [LANG]\nbudget:\n  max_wall: 10s\n")
	dir := t.TempDir()
	for name, text := range map[string]string{
		"inside":  "version: 1\nfs_read: [" + allowed + "]\n",
		"outside": "version: 1\nfs_read: [" + outside + "]\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name+".yaml"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var got []*policy.Policy
	e := newEnv(t, server.Config{Ceiling: ceiling, PolicyDir: dir, WorkspaceDir: filepath.Join(t.TempDir(), "ws")})
	inner := e.newSession
	e.srvNewSession(func(ctx context.Context, p *policy.Policy) (server.Session, error) {
		got = append(got, p)
		return inner(ctx, p)
	})

	for _, d := range []string{allowed + "/sub", allowed + "/out/x"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	e.create(tokA, "version: 1\nfs_read: ["+allowed+"/sub]\nfs_write: ["+allowed+"/out/x]\nnet_hosts: [\"api.ceiling-only.test:443\"]\nallowed_tools: [cat]\nenv: [LANG, HOME=/tmp]\n")
	if p := got[0]; p.Budget().Wall != 10*time.Second || !slices.Equal(p.FSWrite(), []string{allowed + "/out/x"}) {
		t.Errorf("session policy: max_wall %v, fs_write %q; want 10s and the policy's own grant", p.Budget().Wall, p.FSWrite())
	}

	resp, body := e.createAnswer(tokA, "version: 1\nfs_read: ["+outside+"]\nfs_write: ["+allowed+"]\nnet_hosts: [evil.test]\nallowed_tools: [python3]\nenv: [AWS_SECRET_ACCESS_KEY]\nbudget:\n  max_wall: 11s\nallow_downgrade: [landlock]\n")
	ae := e.wantExceeds(resp, body, "fs_read "+outside, "fs_write "+allowed, "net_hosts evil.test", "allowed_tools python3",
		"env AWS_SECRET_ACCESS_KEY", "budget.max_wall 11s", "allow_downgrade landlock")
	if strings.Contains(string(body), "ceiling-only") || strings.Contains(string(body), allowed+"/out") || strings.Contains(string(body), "LANG") {
		t.Errorf("the refusal shows the ceiling's own grants: %s", body)
	}
	if !strings.Contains(ae.Error.Message, "ceiling") {
		t.Errorf("message %q does not name the ceiling", ae.Error.Message)
	}

	b, _ := json.Marshal(map[string]string{"policy_name": "inside"})
	if resp, body := e.do("POST", "/v1/sessions", tokA, b); resp.StatusCode != 201 {
		t.Errorf("named policy within the ceiling = %d %s", resp.StatusCode, body)
	}
	b, _ = json.Marshal(map[string]string{"policy_name": "outside"})
	resp, body = e.do("POST", "/v1/sessions", tokA, b)
	e.wantExceeds(resp, body, "fs_read "+outside)
	if n := len(got); n != 2 {
		t.Errorf("%d sandboxes started, want 2", n)
	}
}

// TestNamedPolicyWithoutCeiling: the operator's named policies keep their
// host grants when there is no ceiling, and get no private workspace.
func TestNamedPolicyWithoutCeiling(t *testing.T) {
	dir, data := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ops.yaml"), []byte("version: 1\nfs_read: ["+data+"]\nnet_hosts: [example.com]\nallowed_tools: [/usr/bin/env]\nbudget:\n  max_wall: 1h\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e := newEnvNoCeiling(t, server.Config{PolicyDir: dir})
	b, _ := json.Marshal(map[string]string{"policy_name": "ops"})
	resp, body := e.do("POST", "/v1/sessions", tokA, b)
	if resp.StatusCode != 201 || !strings.Contains(string(body), `"workspace":""`) {
		t.Errorf("named policy without a ceiling = %d %s; want 201 without a workspace", resp.StatusCode, body)
	}
}

// TestTokenCeilings: a token's own ceiling replaces Ceiling for it and for
// no other token.
func TestTokenCeilings(t *testing.T) {
	dirA, dirG := t.TempDir(), t.TempDir()
	cA := mustPolicy(t, "version: 1\nfs_read: ["+dirA+"]\n")
	cG := mustPolicy(t, "version: 1\nfs_read: ["+dirG+"]\n")
	e := newEnv(t, server.Config{Ceiling: cG, TokenCeilings: []*policy.Policy{cA}})
	e.create(tokA, "version: 1\nfs_read: ["+dirA+"]\n")
	resp, body := e.createAnswer(tokA, "version: 1\nfs_read: ["+dirG+"]\n")
	e.wantExceeds(resp, body, "fs_read "+dirG)
	e.create(tokB, "version: 1\nfs_read: ["+dirG+"]\n")
	resp, body = e.createAnswer(tokB, "version: 1\nfs_read: ["+dirA+"]\n")
	e.wantExceeds(resp, body, "fs_read "+dirA)
}

func TestNewRefusesCeilingAndWorkspace(t *testing.T) {
	ns := func(context.Context, *policy.Policy) (server.Session, error) { return nil, nil }
	c := policy.Default()
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(t.TempDir(), link); err != nil {
		t.Fatal(err)
	}
	open := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		cfg  server.Config
	}{
		{"more-ceilings-than-tokens", server.Config{NewSession: ns, Tokens: []string{tokA}, TokenCeilings: []*policy.Policy{c, c}}},
		{"ceilings-without-tokens", server.Config{NewSession: ns, InsecureNoAuth: true, TokenCeilings: []*policy.Policy{c}}},
		{"relative-workspace-dir", server.Config{NewSession: ns, Tokens: []string{tokA}, WorkspaceDir: "ws"}},
		{"symlink-workspace-dir", server.Config{NewSession: ns, Tokens: []string{tokA}, WorkspaceDir: link}},
		{"open-workspace-dir", server.Config{NewSession: ns, Tokens: []string{tokA}, WorkspaceDir: open}},
		{"file-workspace-dir", server.Config{NewSession: ns, Tokens: []string{tokA}, WorkspaceDir: file}},
		{"no-parent-workspace-dir", server.Config{NewSession: ns, Tokens: []string{tokA}, WorkspaceDir: filepath.Join(file, "x")}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if srv, err := server.New(tt.cfg); err == nil {
				_ = srv.Shutdown(context.Background()) // the test has failed already
				t.Errorf("New(%+v) = nil error", tt.cfg)
			}
		})
	}
}

// TestCeilingCredentials: a tenant may name only the ceiling's own
// credentials; one that names another of the server's variables (a way to
// read AWS_SECRET_ACCESS_KEY off a host the tenant may reach) is refused,
// and the refusal does not show the ceiling's credentials.
func TestCeilingCredentials(t *testing.T) {
	ceiling := mustPolicy(t, "version: 1\nnet_hosts: [\"*.ceiling-only.test:443\"]\ncredentials:\n  - {host: api.ceiling-only.test, header: Authorization, env: CEILING_TOKEN}\n")
	e := newEnv(t, server.Config{Ceiling: ceiling, WorkspaceDir: filepath.Join(t.TempDir(), "ws")})
	e.create(tokA, "version: 1\nnet_hosts: [\"api.ceiling-only.test:443\"]\ncredentials: [\"api.ceiling-only.test:Authorization=CEILING_TOKEN\"]\n")
	resp, body := e.createAnswer(tokA, "version: 1\nnet_hosts: [\"x.ceiling-only.test:443\"]\ncredentials: [\"x.ceiling-only.test:Authorization=AWS_SECRET_ACCESS_KEY\"]\n")
	e.wantExceeds(resp, body, "credentials x.ceiling-only.test:Authorization=AWS_SECRET_ACCESS_KEY")
	if strings.Contains(string(body), "CEILING_TOKEN") {
		t.Errorf("the refusal shows the ceiling's credential: %s", body)
	}
}
