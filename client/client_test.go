package client_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/guard"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/server"
)

// These tests run the client against the real server package, so the two
// agree on the wire. The sandbox behind the server is a fake whose Exec
// echoes its arguments; file operations use a real guard on real
// directories. e2e/server_test.go runs the client against `airlock serve`
// with the real sandbox.

const token = "client-test-token-0123456789"

type echoSession struct {
	id   string
	g    *guard.Guard
	ws   string
	done chan struct{}
	once sync.Once
}

func (s *echoSession) ID() string                                { return s.id }
func (s *echoSession) Guard() *guard.Guard                       { return s.g }
func (s *echoSession) Done() <-chan struct{}                     { return s.done }
func (s *echoSession) Close() error                              { s.once.Do(func() { close(s.done) }); return nil }
func (s *echoSession) Extend(d time.Duration) (time.Time, error) { return time.Now().Add(d), nil }
func (s *echoSession) Info() api.SessionInfo {
	return api.SessionInfo{ID: s.id, Workspace: s.ws, Execs: 1, Usage: api.Usage{Ops: 2}}
}

// Exec writes each argument after the first to stdout, stdin to stderr,
// and reports exit code len(Args).
func (s *echoSession) Exec(ctx context.Context, req api.ExecRequest) (*api.Report, error) {
	var out bytes.Buffer
	for _, a := range req.Args[1:] {
		out.WriteString(a)
		if req.Stdout != nil {
			io.WriteString(req.Stdout, a)
		}
	}
	var in []byte
	if req.Stdin != nil {
		in, _ = io.ReadAll(req.Stdin)
		if req.Stderr != nil {
			req.Stderr.Write(in)
		}
	}
	return &api.Report{ExitCode: len(req.Args), Stdout: out.String(), Stderr: string(in), Denials: []api.Denial{}}, nil
}

func newServer(t *testing.T) *httptest.Server {
	t.Helper()
	// The tests' policies write in their temporary folders: the operator's
	// ceiling must allow that.
	ceiling, err := policy.New(policy.Spec{FSWrite: []string{os.TempDir()}, AllowedTools: []string{"sh"}})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{
		Ceiling: ceiling,
		Tokens:  []string{token},
		NewSession: func(ctx context.Context, p *policy.Policy) (server.Session, error) {
			g, err := guard.New(guard.Config{Policy: p})
			if err != nil {
				return nil, err
			}
			var b [8]byte
			_, _ = rand.Read(b[:]) // crypto/rand never fails
			s := &echoSession{id: hex.EncodeToString(b[:]), g: g, done: make(chan struct{})}
			if ws := p.FSWrite(); len(ws) > 0 {
				s.ws = ws[0]
			}
			return s, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(func() {
		ts.Close()
		_ = srv.Shutdown(context.Background()) // nothing left to report
	})
	return ts
}

func newClient(t *testing.T, url, tok string) *client.Client {
	t.Helper()
	c, err := client.New(url, tok, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func policyFor(ws string) string { return "version: 1\nfs_write: [" + ws + "]\nallowed_tools: [sh]\n" }

// apiError returns err as *client.Error, failing the test otherwise.
func apiError(t *testing.T, what string, err error, status int, code string) *client.Error {
	t.Helper()
	var ae *client.Error
	if !errors.As(err, &ae) {
		t.Fatalf("%s: error = %v, want *client.Error", what, err)
	}
	if ae.Status != status || ae.Code != code || ae.Message == "" {
		t.Errorf("%s: error = %+v, want %d %s with a message", what, ae, status, code)
	}
	return ae
}

func TestWorkflow(t *testing.T) {
	ts := newServer(t)
	c := newClient(t, ts.URL+"/", token) // a trailing slash is fine
	ctx := ctxT(t)
	ws := t.TempDir()
	if err := c.Health(ctx); err != nil {
		t.Fatalf("Health: %v", err)
	}
	s, err := c.CreateSession(ctx, client.CreateRequest{PolicyText: policyFor(ws)})
	if err != nil {
		t.Fatalf("CreateSession: %v", err)
	}
	if err := s.Upload(ctx, "dir/a b%?#.txt", strings.NewReader("hello")); err != nil {
		t.Fatalf("Upload: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(ws, "dir", "a b%?#.txt")); err != nil || string(got) != "hello" {
		t.Fatalf("uploaded file = %q, %v", got, err)
	}
	for _, p := range []string{"dir/a b%?#.txt", filepath.Join(ws, "dir", "a b%?#.txt")} {
		if got, err := s.Download(ctx, p); err != nil || string(got) != "hello" {
			t.Errorf("Download(%q) = %q, %v", p, got, err)
		}
	}
	entries, err := s.List(ctx, "dir")
	if err != nil || len(entries) != 1 || entries[0] != (api.Entry{Name: "a b%?#.txt", Type: "file", Size: 5, Mode: "0644"}) {
		t.Errorf("List = %+v, %v", entries, err)
	}

	rep, err := s.Exec(ctx, client.ExecRequest{Args: []string{"sh", "a", "b"}, Stdin: "in", Timeout: time.Second})
	if err != nil || rep.ExitCode != 3 || rep.Stdout != "ab" || rep.Stderr != "in" {
		t.Errorf("Exec = %+v, %v", rep, err)
	}
	var got []string
	rep, err = s.Exec(ctx, client.ExecRequest{Args: []string{"sh", "x", "y"}, Stdin: "e", OnOutput: func(stream string, data []byte) {
		got = append(got, stream+":"+string(data))
	}})
	if err != nil || rep.ExitCode != 3 || strings.Join(got, ",") != "stdout:x,stdout:y,stderr:e" {
		t.Errorf("streamed Exec = %+v, %v; output %v", rep, err, got)
	}

	info, err := s.Info(ctx)
	if err != nil || info.ID != s.ID() || info.Workspace != ws || info.Usage.Ops != 2 {
		t.Errorf("Info = %+v, %v", info, err)
	}
	list, err := c.Sessions(ctx)
	if err != nil || len(list) != 1 || list[0].ID != s.ID() {
		t.Errorf("Sessions = %+v, %v", list, err)
	}
	if err := s.Delete(ctx, "dir/a b%?#.txt"); err != nil {
		t.Errorf("Delete: %v", err)
	}
	_, err = s.Download(ctx, "dir/a b%?#.txt")
	apiError(t, "Download after Delete", err, 404, "file_not_found")

	if info, err := s.Extend(ctx, 2*time.Hour); err != nil || info.ID != s.ID() {
		t.Fatalf("Extend: %+v %v", info, err)
	}
	if err := s.Destroy(ctx); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	_, err = s.Extend(ctx, time.Hour)
	apiError(t, "Extend after Destroy", err, 410, "session_ended")
	_, err = s.Exec(ctx, client.ExecRequest{Args: []string{"sh"}, OnOutput: func(string, []byte) {}})
	apiError(t, "streamed Exec after Destroy", err, 410, "session_ended")
}

func TestErrors(t *testing.T) {
	ts := newServer(t)
	ctx := ctxT(t)
	c := newClient(t, ts.URL, token)
	ws := t.TempDir()
	s, err := c.CreateSession(ctx, client.CreateRequest{PolicyText: policyFor(ws)})
	if err != nil {
		t.Fatal(err)
	}

	_, err = newClient(t, ts.URL, "wrong-token-0123456789").Sessions(ctx)
	apiError(t, "wrong token", err, 401, "unauthorized")
	_, err = newClient(t, ts.URL, "").Sessions(ctx)
	apiError(t, "no token", err, 401, "unauthorized")

	_, err = c.CreateSession(ctx, client.CreateRequest{PolicyText: "version: 1\nbudget:\n  max_wal: 1s\n"})
	ae := apiError(t, "bad policy", err, 400, "bad_policy")
	if len(ae.Problems) != 1 || ae.Problems[0].Line != 3 || ae.Problems[0].Col != 3 {
		t.Errorf("problems = %+v, want one at 3:3", ae.Problems)
	}

	_, err = c.Session("nope").Info(ctx)
	apiError(t, "unknown session", err, 404, "unknown_session")

	for _, p := range []string{"../x", "./../x", "/etc/x", "//etc/x"} {
		t.Run("escape-"+strings.NewReplacer("/", "_", ".", "d").Replace(p), func(t *testing.T) {
			err := s.Upload(ctx, p, strings.NewReader("x"))
			ae := apiError(t, "Upload "+p, err, 403, "denied")
			if ae.Denial == nil || ae.Denial.Layer != "fs" || ae.Denial.Rule != "fs_write" || ae.Operator != nil {
				t.Errorf("denial = %+v", ae.Denial)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(ws), "x")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("an escaping upload wrote a file: %v", err)
	}
}

func TestNew(t *testing.T) {
	tests := []struct {
		name, url, token string
		ok               bool
	}{
		{"http", "http://127.0.0.1:1", "t", true},
		{"https-with-path", "https://example.com/airlock", "t", true},
		{"no-token", "http://127.0.0.1:1", "", true},
		{"no-scheme", "127.0.0.1:8080", "t", false},
		{"ftp", "ftp://example.com", "t", false},
		{"no-host", "http://", "t", false},
		{"bearer-prefix", "http://127.0.0.1:1", "Bearer t", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := client.New(tt.url, tt.token, client.Options{})
			if (err == nil) != tt.ok {
				t.Errorf("New(%q, %q) error = %v, want ok %v", tt.url, tt.token, err, tt.ok)
			}
		})
	}
}

// TestNotAnAPIAnswer: a non-JSON error (a proxy's page) is still an *Error.
func TestNotAnAPIAnswer(t *testing.T) {
	ts := httptest.NewServer(nil) // the default mux: 404 page not found
	defer ts.Close()
	_, err := newClient(t, ts.URL, "").Sessions(ctxT(t))
	ae := apiError(t, "plain 404", err, 404, "http_404")
	if !strings.Contains(ae.Message, "page not found") {
		t.Errorf("message %q does not quote the answer", ae.Message)
	}
	if !strings.HasPrefix(ae.Error(), "airlock api: 404 http_404: ") {
		t.Errorf("Error() = %q", ae.Error())
	}
}
