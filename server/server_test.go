package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/server"
)

func TestAuth(t *testing.T) {
	e := newEnv(t, server.Config{})
	tests := []struct {
		name   string
		header string // Authorization; "" sends none
		want   int
	}{
		{"missing", "", 401},
		{"empty-bearer", "Bearer ", 401},
		{"wrong-same-length", "Bearer token-a-0123456789abcdeX", 401},
		{"wrong-shorter", "Bearer token-a", 401},
		{"wrong-longer", "Bearer " + tokA + "0", 401},
		{"wrong-case", "Bearer " + strings.ToUpper(tokA), 401},
		{"basic-scheme", "Basic " + tokA, 401},
		{"no-scheme", tokA, 401},
		{"right", "Bearer " + tokA, 200},
		{"scheme-case-insensitive", "bearer " + tokA, 200},
		{"second-token", "Bearer " + tokB, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", e.ts.URL+"/v1/sessions", nil)
			if tt.header != "" {
				req.Header.Set("Authorization", tt.header)
			}
			resp, err := e.ts.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var body bytes.Buffer
			_, _ = body.ReadFrom(resp.Body)
			if tt.want == 401 {
				e.wantError(resp, body.Bytes(), 401, "unauthorized")
				if resp.Header.Get("WWW-Authenticate") == "" {
					t.Errorf("401 without WWW-Authenticate")
				}
			} else if resp.StatusCode != tt.want {
				t.Errorf("GET /v1/sessions with %q = %d, want %d", tt.header, resp.StatusCode, tt.want)
			}
		})
	}
}

// TestAuthOpenEndpoints: health and the API document need no token.
func TestAuthOpenEndpoints(t *testing.T) {
	e := newEnv(t, server.Config{})
	resp, body := e.do("GET", "/v1/health", "", nil)
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"ok"`) {
		t.Errorf("GET /v1/health = %d %s, want 200 ok", resp.StatusCode, body)
	}
	resp, body = e.do("GET", "/v1/openapi.yaml", "", nil)
	want, err := os.ReadFile("../api/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || !bytes.Equal(body, want) || resp.Header.Get("Content-Type") != "application/yaml" {
		t.Errorf("GET /v1/openapi.yaml = %d %s, %d bytes; want 200 application/yaml and api/openapi.yaml (%d bytes)", resp.StatusCode, resp.Header.Get("Content-Type"), len(body), len(want))
	}
}

// TestSessionsArePerToken: another token cannot see, use or destroy a
// session; it is reported as unknown, not forbidden.
func TestSessionsArePerToken(t *testing.T) {
	e := newEnv(t, server.Config{})
	id := e.create(tokA, wsPolicy(t.TempDir()))
	for _, tt := range []struct{ name, method, path string }{
		{"info", "GET", "/v1/sessions/" + id},
		{"destroy", "DELETE", "/v1/sessions/" + id},
		{"exec", "POST", "/v1/sessions/" + id + "/exec"},
		{"list", "GET", "/v1/sessions/" + id + "/files"},
		{"download", "GET", "/v1/sessions/" + id + "/files/x"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := e.do(tt.method, tt.path, tokB, `{"args":["sh"]}`)
			e.wantError(resp, body, 404, "unknown_session")
		})
	}
	_, body := e.do("GET", "/v1/sessions", tokB, nil)
	if strings.Contains(string(body), id) {
		t.Errorf("token B lists token A's session: %s", body)
	}
	if e.fake(id).closed() {
		t.Errorf("token B closed token A's session")
	}
}

func TestBodyTooLarge(t *testing.T) {
	ws := t.TempDir()
	e := newEnv(t, server.Config{MaxJSON: 256, MaxUpload: 1024})
	id := e.create(tokA, wsPolicy(ws))
	big := strings.Repeat("x", 2048)
	tests := []struct {
		name, method, path string
		body               any
	}{
		{"create-json", "POST", "/v1/sessions", `{"policy":"` + big + `"}`},
		{"exec-json", "POST", "/v1/sessions/" + id + "/exec", `{"args":["sh","-c","` + big + `"]}`},
		{"upload", "PUT", "/v1/sessions/" + id + "/files/big", big},
		// No Content-Length: the limit holds while reading.
		{"upload-chunked", "PUT", "/v1/sessions/" + id + "/files/big", strings.NewReader(big)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := e.do(tt.method, tt.path, tokA, tt.body)
			e.wantError(resp, body, 413, "body_too_large")
		})
	}
	if _, err := os.Stat(filepath.Join(ws, "big")); !os.IsNotExist(err) {
		t.Errorf("oversized upload left a file: stat = %v", err)
	}
}

func TestMalformedJSON(t *testing.T) {
	e := newEnv(t, server.Config{})
	id := e.create(tokA, wsPolicy(t.TempDir()))
	tests := []struct{ name, path, body, code string }{
		{"empty", "/v1/sessions", "", "bad_json"},
		{"truncated", "/v1/sessions", `{"policy":`, "bad_json"},
		{"syntax", "/v1/sessions", `{policy: 1}`, "bad_json"},
		{"array", "/v1/sessions", `[]`, "bad_json"},
		{"wrong-type", "/v1/sessions", `{"policy":1}`, "bad_json"},
		{"unknown-field", "/v1/sessions", `{"polcy":"version: 1"}`, "bad_json"},
		{"two-objects", "/v1/sessions", `{"policy":"version: 1"} {}`, "bad_json"},
		{"no-policy", "/v1/sessions", `{}`, "bad_request"},
		{"both-policies", "/v1/sessions", `{"policy":"version: 1","policy_name":"x"}`, "bad_request"},
		{"exec-syntax", "/v1/sessions/" + id + "/exec", `{"args":`, "bad_json"},
		{"exec-no-args", "/v1/sessions/" + id + "/exec", `{"args":[]}`, "bad_request"},
		{"exec-bad-timeout", "/v1/sessions/" + id + "/exec", `{"args":["sh"],"timeout":"soon"}`, "bad_request"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := e.do("POST", tt.path, tokA, tt.body)
			e.wantError(resp, body, 400, tt.code)
		})
	}
}

func TestUnknownSession(t *testing.T) {
	e := newEnv(t, server.Config{})
	for _, tt := range []struct{ name, method, path string }{
		{"info", "GET", "/v1/sessions/nope"},
		{"destroy", "DELETE", "/v1/sessions/nope"},
		{"exec", "POST", "/v1/sessions/nope/exec"},
		{"list", "GET", "/v1/sessions/nope/files"},
		{"upload", "PUT", "/v1/sessions/nope/files/a"},
		{"upload-dotdot", "PUT", "/v1/sessions/nope/files/../a"},
		{"delete", "DELETE", "/v1/sessions/nope/files/a"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := e.do(tt.method, tt.path, tokA, `{"args":["sh"]}`)
			e.wantError(resp, body, 404, "unknown_session")
		})
	}
}

func TestBadPolicy(t *testing.T) {
	e := newEnv(t, server.Config{})
	tests := []struct {
		name, text string
		line, col  int
	}{
		{"unknown-key", "version: 1\nfs_read: [/data]\nallowed_tool: [sh]\n", 3, 1},
		{"relative-path", "version: 1\nfs_write: [./out]\n", 2, 12},
		{"bad-duration", "version: 1\nbudget:\n  max_wall: forever\n", 3, 13},
		{"yaml-syntax", "version: 1\nfs_read: [/a\n", 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, _ := json.Marshal(map[string]string{"policy": tt.text})
			resp, body := e.do("POST", "/v1/sessions", tokA, b)
			ae := e.wantError(resp, body, 400, "bad_policy")
			if len(ae.Error.Problems) == 0 {
				t.Fatalf("no problems in %s", body)
			}
			if tt.line == 0 {
				return
			}
			p := ae.Error.Problems[0]
			if p.Line != tt.line || p.Col != tt.col {
				t.Errorf("problem at %d:%d, want %d:%d (%s)", p.Line, p.Col, tt.line, tt.col, body)
			}
			if want := "policy:" + strconv.Itoa(tt.line) + ":" + strconv.Itoa(tt.col) + ":"; !strings.Contains(ae.Error.Message, want) {
				t.Errorf("message %q does not contain %q", ae.Error.Message, want)
			}
		})
	}
}

func TestNamedPolicy(t *testing.T) {
	dir := t.TempDir()
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "good-1.yaml"), []byte(wsPolicy(ws)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte("version: 1\nfs_reed: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "secret.yaml")
	if err := os.WriteFile(outside, []byte(wsPolicy(ws)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "link.yaml")); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, server.Config{PolicyDir: dir})
	tests := []struct {
		name, policyName string
		status           int
		code             string
	}{
		{"good", "good-1", 201, ""},
		{"invalid", "bad", 400, "bad_policy"},
		{"missing", "nope", 404, "unknown_policy"},
		{"symlink-out-of-dir", "link", 404, "unknown_policy"},
		{"dotdot", "../x", 400, "bad_policy_name"},
		{"slash", "a/b", 400, "bad_policy_name"},
		{"upper", "Good", 400, "bad_policy_name"},
		{"with-ext", "good-1.yaml", 400, "bad_policy_name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, _ := json.Marshal(map[string]string{"policy_name": tt.policyName})
			resp, body := e.do("POST", "/v1/sessions", tokA, b)
			if tt.code == "" {
				if resp.StatusCode != tt.status {
					t.Errorf("create %q = %d %s, want %d", tt.policyName, resp.StatusCode, body, tt.status)
				}
				return
			}
			ae := e.wantError(resp, body, tt.status, tt.code)
			if strings.Contains(ae.Error.Message, dir) {
				t.Errorf("error message reveals the policy folder: %q", ae.Error.Message)
			}
		})
	}
}

func TestQuota(t *testing.T) {
	e := newEnv(t, server.Config{MaxSessions: 2})
	ids := []string{e.create(tokA, wsPolicy(t.TempDir())), e.create(tokA, wsPolicy(t.TempDir()))}
	b, _ := json.Marshal(map[string]string{"policy": wsPolicy(t.TempDir())})
	resp, body := e.do("POST", "/v1/sessions", tokA, b)
	e.wantError(resp, body, 429, "quota_exceeded")

	e.create(tokB, wsPolicy(t.TempDir())) // the quota is per token

	if resp, body := e.do("DELETE", "/v1/sessions/"+ids[0], tokA, nil); resp.StatusCode != 204 {
		t.Fatalf("destroy = %d %s", resp.StatusCode, body)
	}
	e.create(tokA, wsPolicy(t.TempDir()))
}

func TestDestroy(t *testing.T) {
	e := newEnv(t, server.Config{})
	id := e.create(tokA, wsPolicy(t.TempDir()))
	if resp, body := e.do("DELETE", "/v1/sessions/"+id, tokA, nil); resp.StatusCode != 204 {
		t.Fatalf("destroy = %d %s", resp.StatusCode, body)
	}
	if !e.fake(id).closed() {
		t.Errorf("destroyed session not closed")
	}
	resp, body := e.do("GET", "/v1/sessions/"+id, tokA, nil)
	ae := e.wantError(resp, body, 410, "session_ended")
	if !strings.Contains(ae.Error.Message, "destroyed") {
		t.Errorf("message %q does not say why", ae.Error.Message)
	}
	resp, body = e.do("POST", "/v1/sessions/"+id+"/exec", tokA, `{"args":["sh"]}`)
	e.wantError(resp, body, 410, "session_ended")
}

func TestShutdownClosesSessions(t *testing.T) {
	e := newEnv(t, server.Config{})
	var ids []string
	for range 3 {
		ids = append(ids, e.create(tokA, wsPolicy(t.TempDir())))
	}
	if err := e.srv.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	for _, id := range ids {
		if !e.fake(id).closed() {
			t.Errorf("session %s still open after Shutdown", id)
		}
	}
	b, _ := json.Marshal(map[string]string{"policy": wsPolicy(t.TempDir())})
	resp, body := e.do("POST", "/v1/sessions", tokA, b)
	e.wantError(resp, body, 503, "shutting_down")
}

func TestIdleExpiry(t *testing.T) {
	const idle = 10 * time.Minute
	e := newEnv(t, server.Config{Idle: idle})
	id := e.create(tokA, wsPolicy(t.TempDir()))

	e.clock.Advance(idle - time.Second)
	e.srv.ExpireIdle()
	if e.fake(id).closed() {
		t.Fatalf("session closed before its idle timeout")
	}
	// A request resets the idle time.
	if resp, body := e.do("GET", "/v1/sessions/"+id, tokA, nil); resp.StatusCode != 200 {
		t.Fatalf("info = %d %s", resp.StatusCode, body)
	}
	e.clock.Advance(idle - time.Second)
	e.srv.ExpireIdle()
	if e.fake(id).closed() {
		t.Fatalf("session closed although a request used it %v ago", idle-time.Second)
	}
	e.clock.Advance(time.Second)
	e.srv.ExpireIdle()
	if !e.fake(id).closed() {
		t.Fatalf("session still open after %v idle", idle)
	}
	resp, body := e.do("GET", "/v1/sessions/"+id, tokA, nil)
	ae := e.wantError(resp, body, 410, "session_ended")
	if !strings.Contains(ae.Error.Message, "idle") {
		t.Errorf("message %q does not say idle", ae.Error.Message)
	}
}

// TestIdleExpirySparesBusy: a session running a long exec is not idle.
func TestIdleExpirySparesBusy(t *testing.T) {
	const idle = time.Minute
	e := newEnv(t, server.Config{Idle: idle})
	started, release := make(chan struct{}), make(chan struct{})
	e.exec = func(ctx context.Context, req api.ExecRequest) (*api.Report, error) {
		close(started)
		<-release
		return &api.Report{}, nil
	}
	id := e.create(tokA, wsPolicy(t.TempDir()))
	done := make(chan int)
	go func() {
		resp, _ := e.do("POST", "/v1/sessions/"+id+"/exec", tokA, `{"args":["sh"]}`)
		done <- resp.StatusCode
	}()
	<-started
	e.clock.Advance(2 * idle)
	e.srv.ExpireIdle()
	if e.fake(id).closed() {
		t.Errorf("session closed while an exec was running")
	}
	close(release)
	if got := <-done; got != 200 {
		t.Errorf("exec = %d, want 200", got)
	}
	e.clock.Advance(idle)
	e.srv.ExpireIdle()
	if !e.fake(id).closed() {
		t.Errorf("session still open %v after its exec ended", idle)
	}
}

// TestSessionEndsOnItsOwn: when the sandbox ends (its deadline), the id
// answers 410.
func TestSessionEndsOnItsOwn(t *testing.T) {
	e := newEnv(t, server.Config{})
	id := e.create(tokA, wsPolicy(t.TempDir()))
	e.fake(id).Close() // as the sandbox does at its deadline
	// The server notices through Done; exec also reports the end at once.
	resp, body := e.do("POST", "/v1/sessions/"+id+"/exec", tokA, `{"args":["sh"]}`)
	e.wantError(resp, body, 410, "session_ended")
	resp, body = e.do("GET", "/v1/sessions/"+id, tokA, nil)
	e.wantError(resp, body, 410, "session_ended")
}

func TestRouting(t *testing.T) {
	e := newEnv(t, server.Config{})
	id := e.create(tokA, wsPolicy(t.TempDir()))
	tests := []struct {
		name, method, path string
		status             int
		code               string
	}{
		{"unknown-path", "GET", "/v2/things", 404, "not_found"},
		{"root", "GET", "/", 404, "not_found"},
		{"unclean-path", "GET", "/v1/./sessions", 404, "not_found"},
		{"method-sessions", "PATCH", "/v1/sessions", 405, "method_not_allowed"},
		{"method-session", "POST", "/v1/sessions/" + id, 405, "method_not_allowed"},
		{"method-exec", "GET", "/v1/sessions/" + id + "/exec", 405, "method_not_allowed"},
		{"method-file", "POST", "/v1/sessions/" + id + "/files/a", 405, "method_not_allowed"},
		{"method-file-unclean", "POST", "/v1/sessions/" + id + "/files/../a", 405, "method_not_allowed"},
		{"method-health", "POST", "/v1/health", 405, "method_not_allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := e.do(tt.method, tt.path, tokA, nil)
			e.wantError(resp, body, tt.status, tt.code)
			if tt.status == 405 && resp.Header.Get("Allow") == "" {
				t.Errorf("405 without Allow")
			}
		})
	}
}

func TestNewRefuses(t *testing.T) {
	ns := func(context.Context, *policy.Policy) (server.Session, error) { return nil, nil }
	tests := []struct {
		name string
		cfg  server.Config
	}{
		{"no-new-session", server.Config{Tokens: []string{tokA}}},
		{"no-token", server.Config{NewSession: ns}},
		{"short-token", server.Config{NewSession: ns, Tokens: []string{"short"}}},
		{"token-with-space", server.Config{NewSession: ns, Tokens: []string{"token with spaces inside"}}},
		{"negative-limit", server.Config{NewSession: ns, Tokens: []string{tokA}, MaxSessions: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := server.New(tt.cfg); err == nil {
				t.Errorf("New(%+v) = nil error", tt.cfg)
			}
		})
	}
}

// TestServeNoAuthNeedsLoopback: without a token the server serves only
// loopback listeners.
func TestServeNoAuthNeedsLoopback(t *testing.T) {
	ns := func(context.Context, *policy.Policy) (server.Session, error) { return nil, nil }
	srv, err := server.New(server.Config{NewSession: ns, InsecureNoAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	l, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Skipf("cannot listen on 0.0.0.0: %v", err)
	}
	defer l.Close()
	if err := srv.Serve(l); err == nil || err == http.ErrServerClosed {
		t.Errorf("Serve(%s) without a token = %v, want a refusal", l.Addr(), err)
	}
}

// TestExtendSession: POST /v1/sessions/{id}/extend moves the session's end
// and answers with the session; a bad duration is a 400 that changes
// nothing; an unknown session a 404; an extension counts as a use for the
// idle timeout.
func TestExtendSession(t *testing.T) {
	const idle = 10 * time.Minute
	e := newEnv(t, server.Config{Idle: idle})
	id := e.create(tokA, wsPolicy(t.TempDir()))
	var before, after api.SessionInfo
	_, body := e.do("GET", "/v1/sessions/"+id, tokA, nil)
	if err := json.Unmarshal(body, &before); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(idle - time.Second)
	resp, body := e.do("POST", "/v1/sessions/"+id+"/extend", tokA, []byte(`{"by":"3h"}`))
	if resp.StatusCode != 200 {
		t.Fatalf("extend = %d %s", resp.StatusCode, body)
	}
	if err := json.Unmarshal(body, &after); err != nil || !after.Deadline.After(before.Deadline) {
		t.Fatalf("deadline %v -> %v (%v), want later", before.Deadline, after.Deadline, err)
	}
	e.clock.Advance(2 * time.Second)
	e.srv.ExpireIdle()
	if e.fake(id).closed() {
		t.Fatal("an extension did not count as a use of the session")
	}
	// by is how much later the session ends, past its current end: on a
	// session with an hour to live, 30m gives it an hour and a half, and
	// two extensions add up.
	var more, evenMore api.SessionInfo
	for _, step := range []struct {
		into *api.SessionInfo
		want time.Time
	}{{&more, after.Deadline.Add(30 * time.Minute)}, {&evenMore, after.Deadline.Add(time.Hour)}} {
		resp, body := e.do("POST", "/v1/sessions/"+id+"/extend", tokA, []byte(`{"by":"30m"}`))
		if err := json.Unmarshal(body, step.into); err != nil || resp.StatusCode != 200 || !step.into.Deadline.Equal(step.want) {
			t.Fatalf("extend by 30m = %d, deadline %v (%v); want %v, 30 minutes past the end before", resp.StatusCode, step.into.Deadline, err, step.want)
		}
	}
	for bad, code := range map[string]string{`{"by":"soon"}`: "bad_request", `{"by":"-1m"}`: "bad_request", `{}`: "bad_request", `{"by":"1h","x":1}`: "bad_json"} {
		resp, body := e.do("POST", "/v1/sessions/"+id+"/extend", tokA, []byte(bad))
		e.wantError(resp, body, 400, code)
	}
	resp, body = e.do("POST", "/v1/sessions/nope/extend", tokA, []byte(`{"by":"1h"}`))
	e.wantError(resp, body, 404, "unknown_session")
}

// TestMissingGrantIs422: a policy whose grant names a path the server does
// not have is refused with 422 naming it, and nothing starts (before: an
// opaque 500 sandbox_failed).
func TestMissingGrantIs422(t *testing.T) {
	e := newEnv(t, server.Config{})
	missing := filepath.Join(t.TempDir(), "not-there")
	b, _ := json.Marshal(map[string]string{"policy": wsPolicy(missing)})
	resp, body := e.do("POST", "/v1/sessions", tokA, b)
	ae := e.wantError(resp, body, http.StatusUnprocessableEntity, "grant_not_found")
	if !strings.Contains(ae.Error.Message, missing) {
		t.Errorf("message %q does not name %s", ae.Error.Message, missing)
	}
	if n := len(e.fakes); n != 0 {
		t.Errorf("%d sessions started for a refused policy", n)
	}
}
