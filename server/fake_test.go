package server_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/guard"
	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/server"
)

// The HTTP tests below stand in a fake for the sandbox: they test request
// handling (auth, limits, errors, routing, streaming), not isolation. File
// operations still go through a real guard on real directories. The
// isolation claims are tested against the real sandbox in e2e/.

const (
	tokA = "token-a-0123456789abcdef"
	tokB = "token-b-0123456789abcdef"
)

// fakeSession is a Session whose Exec runs the test's function.
type fakeSession struct {
	id        string
	g         *guard.Guard
	workspace string
	created   time.Time
	exec      func(ctx context.Context, req api.ExecRequest) (*api.Report, error)

	done      chan struct{}
	closeOnce sync.Once

	mu       sync.Mutex
	deadline time.Time        // guarded by mu; zero: created + 1h
	now      func() time.Time // the env's clock
}

// Extend moves the fake's deadline later, as sandbox.Session does.
func (f *fakeSession) Extend(d time.Duration) (time.Time, error) {
	select {
	case <-f.done:
		return time.Time{}, api.ErrSessionClosed
	default:
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	from := f.deadlineLocked()
	if now := f.now(); from.Before(now) {
		from = now
	}
	f.deadline = from.Add(d)
	return f.deadline, nil
}

func (f *fakeSession) deadlineLocked() time.Time {
	if f.deadline.IsZero() {
		return f.created.Add(time.Hour)
	}
	return f.deadline
}

func (f *fakeSession) ID() string          { return f.id }
func (f *fakeSession) Guard() *guard.Guard { return f.g }
func (f *fakeSession) Done() <-chan struct{} {
	return f.done
}

func (f *fakeSession) Info() api.SessionInfo {
	f.mu.Lock()
	defer f.mu.Unlock()
	return api.SessionInfo{ID: f.id, Created: f.created, Deadline: f.deadlineLocked(), Workspace: f.workspace}
}

func (f *fakeSession) Exec(ctx context.Context, req api.ExecRequest) (*api.Report, error) {
	select {
	case <-f.done:
		return nil, api.ErrSessionClosed
	default:
	}
	if f.exec == nil {
		return &api.Report{}, nil
	}
	return f.exec(ctx, req)
}

func (f *fakeSession) Close() error {
	f.closeOnce.Do(func() { close(f.done) })
	return nil
}

// closed reports whether Close was called (or the session ended itself).
func (f *fakeSession) closed() bool {
	select {
	case <-f.done:
		return true
	default:
		return false
	}
}

// env is one server under test behind an httptest.Server.
type env struct {
	t     *testing.T
	srv   *server.Server
	ts    *httptest.Server
	reads *airtest.ReadCounter // counts the bytes the server read from each connection
	clock *airtest.FakeClock

	mu    sync.Mutex
	fakes map[string]*fakeSession
	exec  func(ctx context.Context, req api.ExecRequest) (*api.Report, error)
	start server.NewSessionFunc // replaces newSession when set
}

// startSession is the server's NewSession: start, else newSession.
func (e *env) startSession(ctx context.Context, p *policy.Policy) (server.Session, error) {
	e.mu.Lock()
	start := e.start
	e.mu.Unlock()
	if start != nil {
		return start(ctx, p)
	}
	return e.newSession(ctx, p)
}

// newEnv starts a server with cfg; zero NewSession, Tokens and Clock are
// filled in with fakes and the two test tokens, and without any ceiling the
// server gets testCeiling, which lets the tests' policies write in their
// temporary folders.
func newEnv(t *testing.T, cfg server.Config) *env {
	t.Helper()
	if cfg.Ceiling == nil && cfg.TokenCeilings == nil {
		cfg.Ceiling = testCeiling(t)
	}
	return newEnvNoCeiling(t, cfg)
}

// testCeiling allows fs_write in the temporary folder, the tool sh and the
// largest budgets.
func testCeiling(t *testing.T) *policy.Policy {
	t.Helper()
	c, err := policy.New(policy.Spec{FSWrite: []string{os.TempDir()}, AllowedTools: []string{"sh"}, Budget: policy.Bounds()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// newEnvNoCeiling is newEnv without filling in a ceiling.
func newEnvNoCeiling(t *testing.T, cfg server.Config) *env {
	t.Helper()
	e := &env{t: t, fakes: map[string]*fakeSession{}, clock: airtest.NewFakeClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))}
	if cfg.NewSession == nil {
		cfg.NewSession = e.startSession
	}
	if cfg.Tokens == nil && !cfg.InsecureNoAuth {
		cfg.Tokens = []string{tokA, tokB}
	}
	if cfg.Clock == nil {
		cfg.Clock = e.clock
	}
	srv, err := server.New(cfg)
	if err != nil {
		t.Fatalf("server.New: %v", err)
	}
	e.srv = srv
	e.ts = httptest.NewUnstartedServer(srv)
	e.reads = airtest.CountReads(e.ts.Listener)
	e.ts.Listener = e.reads
	e.ts.Start()
	t.Cleanup(func() {
		e.ts.Close()
		if err := srv.Shutdown(context.Background()); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return e
}

func (e *env) newSession(ctx context.Context, p *policy.Policy) (server.Session, error) {
	// The guard holds every grant open, as a sandbox session's does: the
	// fake's grants exist as folders.
	for _, d := range append(p.FSRead(), p.FSWrite()...) {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	g, err := guard.New(guard.Config{Policy: p})
	if err != nil {
		return nil, err
	}
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	f := &fakeSession{id: hex.EncodeToString(b[:]), g: g, created: e.clock.Now(), now: e.clock.Now, done: make(chan struct{})}
	if ws := p.FSWrite(); len(ws) > 0 {
		f.workspace = ws[0]
	}
	e.mu.Lock()
	f.exec = e.exec
	e.fakes[f.id] = f
	e.mu.Unlock()
	return f, nil
}

func (e *env) fake(id string) *fakeSession {
	e.mu.Lock()
	defer e.mu.Unlock()
	f := e.fakes[id]
	if f == nil {
		e.t.Fatalf("no fake session %q", id)
	}
	return f
}

// do sends a request; path is sent as is (no cleaning). body may be nil, a
// string or []byte.
func (e *env) do(method, path, token string, body any) (*http.Response, []byte) {
	e.t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case string:
		r = strings.NewReader(b)
	case []byte:
		r = bytes.NewReader(b)
	case io.Reader:
		r = b
	}
	req, err := http.NewRequest(method, e.ts.URL+path, r)
	if err != nil {
		e.t.Fatalf("NewRequest: %v", err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := e.ts.Client().Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return resp, data
}

// apiErr is the error body, as clients decode it.
type apiErr = api.ErrorBody

// wantError checks status, JSON content type and code.
func (e *env) wantError(resp *http.Response, body []byte, status int, code string) apiErr {
	e.t.Helper()
	var ae apiErr
	if resp.StatusCode != status {
		e.t.Errorf("%s %s: status = %d, want %d (body %s)", resp.Request.Method, resp.Request.URL.Path, resp.StatusCode, status, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		e.t.Errorf("%s %s: Content-Type = %q, want application/json", resp.Request.Method, resp.Request.URL.Path, ct)
	}
	if err := json.Unmarshal(body, &ae); err != nil || ae.Error == nil {
		e.t.Errorf("%s %s: body %q is not a JSON error: %v", resp.Request.Method, resp.Request.URL.Path, body, err)
		ae.Error = &api.Error{}
	}
	if ae.Error.Code != code || ae.Error.Message == "" {
		e.t.Errorf("%s %s: error = %+v, want code %q and a message", resp.Request.Method, resp.Request.URL.Path, ae.Error, code)
	}
	return ae
}

// create makes a session with the policy text and returns its id.
func (e *env) create(token, policyText string) string {
	e.t.Helper()
	b, _ := json.Marshal(map[string]string{"policy": policyText})
	resp, body := e.do("POST", "/v1/sessions", token, b)
	if resp.StatusCode != http.StatusCreated {
		e.t.Fatalf("create: status %d: %s", resp.StatusCode, body)
	}
	var s struct{ ID string }
	if err := json.Unmarshal(body, &s); err != nil || s.ID == "" {
		e.t.Fatalf("create: body %s: %v", body, err)
	}
	return s.ID
}

// wsPolicy returns a policy text granting fs_write on dir.
func wsPolicy(dir string) string {
	return "version: 1\nfs_write: [" + dir + "]\nallowed_tools: [sh]\n"
}
