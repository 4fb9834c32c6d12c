package mcp

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/policy"
)

const otherToken = "fedcba9876543210-other-token"

// serveHTTP makes a server for cfg with the given tokens and serves it
// over streamable HTTP, as airlock mcp --listen does.
func serveHTTP(t *testing.T, cfg Config, newSession NewSessionFunc, tokens ...string) (*Server, *httptest.Server) {
	t.Helper()
	cfg.Tokens = tokens
	s := newServer(t, cfg, newSession)
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return s, ts
}

// dialHTTP connects an MCP client with token to ts.
func dialHTTP(ctx context.Context, ts *httptest.Server, token string) (*sdk.ClientSession, error) {
	tr := &sdk.StreamableClientTransport{Endpoint: ts.URL, HTTPClient: &http.Client{Transport: headerTransport{token}}, MaxRetries: -1, DisableStandaloneSSE: true}
	return sdk.NewClient(&sdk.Implementation{Name: "airlock-test", Version: "1"}, nil).Connect(ctx, tr, nil)
}

// rawMCP sends one JSON-RPC message with token and Mcp-Session-Id sid, as
// an attacker who copied the id would, and returns the status and body.
func rawMCP(t *testing.T, ts *httptest.Server, method, token, sid, msg string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, ts.URL, strings.NewReader(msg))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", sid)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatalf("%s with session id: %v", method, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(body)
}

// TestAttackMCPSessionHijack: token B presents token A's Mcp-Session-Id. It
// must get exactly what an unknown id gets, run nothing in A's sandbox,
// and not end A's session.
func TestAttackMCPSessionHijack(t *testing.T) {
	p := mustPolicy(t, policy.Spec{AllowedTools: []string{"sh"}, FSWrite: []string{t.TempDir()}})
	fk := &fakes{}
	_, ts := serveHTTP(t, Config{Policy: p}, fk.new, testToken, otherToken)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	csA, err := dialHTTP(ctx, ts, testToken)
	if err != nil {
		t.Fatal(err)
	}
	defer csA.Close()
	call(t, csA, ToolRun, map[string]any{"command": []string{"sh", "-c", "true"}}, nil)
	idA := csA.ID()

	run := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"run","arguments":{"command":["sh","-c","echo from B"]}}}`
	read := `{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"list_files","arguments":{}}}`
	unknown := strings.Repeat("Z", len(idA))
	for _, msg := range []string{run, read} {
		stB, bodyB := rawMCP(t, ts, "POST", otherToken, idA, msg)
		stU, bodyU := rawMCP(t, ts, "POST", otherToken, unknown, msg)
		if stB != stU || bodyB != bodyU {
			t.Errorf("token B with token A's Mcp-Session-Id got %d %q, an unknown id gets %d %q: want the same answer", stB, bodyB, stU, bodyU)
		}
		if stB == http.StatusOK {
			t.Errorf("token B's tools/call in token A's session was served: %q", bodyB)
		}
	}
	stB, bodyB := rawMCP(t, ts, "DELETE", otherToken, idA, "")
	stU, bodyU := rawMCP(t, ts, "DELETE", otherToken, unknown, "")
	if stB != stU || bodyB != bodyU {
		t.Errorf("token B's DELETE of token A's session got %d %q, of an unknown id %d %q: want the same answer", stB, bodyB, stU, bodyU)
	}
	made := fk.all()
	if len(made) != 1 {
		t.Fatalf("%d sandboxes were made, want token A's only", len(made))
	}
	made[0].mu.Lock()
	n := len(made[0].reqs)
	made[0].mu.Unlock()
	if n != 1 {
		t.Errorf("token A's sandbox ran %d commands, want 1 (token A's own)", n)
	}
	// A's session lives on.
	if res := call(t, csA, ToolRun, map[string]any{"command": []string{"sh", "-c", "true"}}, nil); res.IsError {
		t.Errorf("token A's session after token B's attempts: %s", text(res))
	}
}

// TestAttackMCPSlotsPerToken: one token cannot take every sandbox slot;
// another token still gets a sandbox.
func TestAttackMCPSlotsPerToken(t *testing.T) {
	const slots = 4
	p := mustPolicy(t, policy.Spec{AllowedTools: []string{"sh"}})
	_, ts := serveHTTP(t, Config{Policy: p, MaxSessions: slots}, (&fakes{}).new, testToken, otherToken)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	runArgs := map[string]any{"command": []string{"sh", "-c", "true"}}
	got := 0
	for range slots {
		cs, err := dialHTTP(ctx, ts, testToken)
		if err != nil {
			continue // refused at connect: fine
		}
		defer cs.Close()
		if res := call(t, cs, ToolRun, runArgs, nil); !res.IsError {
			got++
		}
	}
	if want := slots / 2; got != want {
		t.Errorf("token A holds %d of the server's %d sandboxes, want its even share %d", got, slots, want)
	}
	csB, err := dialHTTP(ctx, ts, otherToken)
	if err != nil {
		t.Fatalf("token B cannot connect while token A holds its sandboxes: %v", err)
	}
	defer csB.Close()
	if res := call(t, csB, ToolRun, runArgs, nil); res.IsError {
		t.Errorf("token B gets no sandbox while token A holds %d: %s", got, text(res))
	}
}

// TestAttackMCPClientSessionsPerToken: one token opening MCP sessions in a
// loop is refused beyond its limit, and another token can still connect.
func TestAttackMCPClientSessionsPerToken(t *testing.T) {
	const slots, tries = 4, 40
	p := mustPolicy(t, policy.Spec{AllowedTools: []string{"sh"}})
	_, ts := serveHTTP(t, Config{Policy: p, MaxSessions: slots}, (&fakes{}).new, testToken, otherToken)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	ok := 0
	for range tries {
		cs, err := dialHTTP(ctx, ts, testToken)
		if err != nil {
			continue
		}
		ok++
		defer cs.Close()
	}
	if want := 2 * (slots / 2); ok != want {
		t.Errorf("one token holds %d MCP sessions at once, want %d (twice its even share of sandboxes)", ok, want)
	}
	cs, err := dialHTTP(ctx, ts, otherToken)
	if err != nil {
		t.Fatalf("token B cannot connect after token A's %d sessions: %v", ok, err)
	}
	cs.Close()
}

// syncBuffer is a log destination safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestAttackMCPSessionIDNotLogged: the Mcp-Session-Id is a credential of
// its session; the log at INFO must not carry it.
func TestAttackMCPSessionIDNotLogged(t *testing.T) {
	var logs syncBuffer
	p := mustPolicy(t, policy.Spec{AllowedTools: []string{"sh"}})
	s, ts := serveHTTP(t, Config{Policy: p, Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))}, (&fakes{}).new, testToken)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cs, err := dialHTTP(ctx, ts, testToken)
	if err != nil {
		t.Fatal(err)
	}
	call(t, cs, ToolRun, map[string]any{"command": []string{"sh", "-c", "true"}}, nil)
	id := cs.ID()
	cs.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), id) {
		t.Errorf("the log holds the Mcp-Session-Id %s:\n%s", id, logs.String())
	}
	if tag := sessionTag(id); !strings.Contains(logs.String(), "session="+tag) {
		t.Errorf("the log does not name the session by its tag %s:\n%s", tag, logs.String())
	}
}

// TestAttackMCPSlowBodies: one token's POSTs into its own session whose
// 4 MiB bodies trickle in are not all held at once: beyond BodiesPerToken
// they are refused with 429 before they are read, and another token is
// still served.
func TestAttackMCPSlowBodies(t *testing.T) {
	const n = 40
	const sent = MaxBodyBytes - 64<<10
	p := mustPolicy(t, policy.Spec{AllowedTools: []string{"sh"}, FSWrite: []string{t.TempDir()}})
	s := newServer(t, Config{Policy: p, Tokens: []string{testToken, otherToken}}, (&fakes{}).new)
	ts := httptest.NewUnstartedServer(s.Handler())
	reads := airtest.CountReads(ts.Listener)
	ts.Listener = reads
	ts.Start()
	t.Cleanup(ts.Close) // after the stalled requests end (cleanups run last first)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	csA, err := dialHTTP(ctx, ts, testToken)
	if err != nil {
		t.Fatal(err)
	}
	defer csA.Close()

	before := airtest.LiveHeap()
	var reqs []*airtest.Stalled
	for range n {
		req, err := http.NewRequest("POST", ts.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = MaxBodyBytes
		req.Header.Set("Authorization", "Bearer "+testToken)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set(sessionHeader, csA.ID())
		first := io.MultiReader(strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"write_file","arguments":{"path":"x","content":"`), airtest.Letters{})
		reqs = append(reqs, airtest.StartStalled(t, req, first, sent, nil))
	}
	airtest.WaitTaken(t, reads, reqs)
	grew := airtest.LiveHeap() - before
	bound := int64(BodiesPerToken*2*MaxBodyBytes + n*256<<10 + 8<<20)
	t.Logf("live heap grew by %.1f MiB (bound %d MiB) with %d bodies stalled after %d KiB", float64(grew)/(1<<20), bound>>20, n, sent>>10)
	if grew > bound {
		t.Errorf("the heap grew by %d MiB with %d MCP bodies of one token stalled, want at most %d MiB", grew>>20, n, bound>>20)
	}
	refused := 0
	for _, r := range reqs {
		if r.Answered() {
			refused++
			if r.Status != http.StatusTooManyRequests {
				t.Errorf("stalled body answered %d %q (%v), want 429", r.Status, r.Body, r.Err)
			}
		}
	}
	if want := n - BodiesPerToken; refused != want {
		t.Errorf("%d of %d stalled bodies were refused, want %d (all beyond BodiesPerToken)", refused, n, want)
	}
	csB, err := dialHTTP(ctx, ts, otherToken)
	if err != nil {
		t.Fatalf("token B cannot connect while token A's bodies stall: %v", err)
	}
	defer csB.Close()
	if res := call(t, csB, ToolSessionInfo, map[string]any{}, nil); res.IsError {
		t.Errorf("token B's call while token A's bodies stall: %s", text(res))
	}
}

// TestAttackMCPUnprintableNames: the file tools refuse paths with control
// or format characters or bytes that are not UTF-8, write nothing, and
// list names the sandbox made escaped and marked.
func TestAttackMCPUnprintableNames(t *testing.T) {
	ws := t.TempDir()
	p := mustPolicy(t, policy.Spec{FSWrite: []string{ws}})
	cs, _ := connect(t, newServer(t, Config{Policy: p}, (&fakes{}).new))
	for _, tt := range []struct{ name, path, shown string }{
		{"escape", "a\x1b[31mb", `a\x1b[31mb`},
		{"newline", "log\nFAKE", `log\nFAKE`},
		{"nul", "a\x00b", `a\x00b`}, // JSON carries no bytes that are not UTF-8 (they arrive as U+FFFD)
		{"bidi", "txt\u202eexe.sh", `txt\u202eexe.sh`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, c := range []struct {
				tool string
				args map[string]any
			}{
				{ToolWriteFile, map[string]any{"path": tt.path, "content": "x"}},
				{ToolReadFile, map[string]any{"path": tt.path}},
				{ToolListFiles, map[string]any{"path": tt.path}},
			} {
				res := call(t, cs, c.tool, c.args, nil)
				if !res.IsError || !strings.Contains(text(res), tt.shown) || !strings.Contains(text(res), "not printable") {
					t.Errorf("%s(%q) = %q (error %v), want a refusal showing %s", c.tool, tt.path, text(res), res.IsError, tt.shown)
				}
			}
		})
	}
	if ents, _ := os.ReadDir(ws); len(ents) != 0 {
		t.Fatalf("refused names left %d entries in the workspace", len(ents))
	}
	if err := os.WriteFile(filepath.Join(ws, "evil\x1b]0;owned\x07"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var out ListFilesOutput
	call(t, cs, ToolListFiles, map[string]any{}, &out)
	if len(out.Entries) != 1 || out.Entries[0].Name != `evil\x1b]0;owned\x07` || !out.Entries[0].Escaped {
		t.Errorf("list_files = %+v, want the name escaped and marked", out.Entries)
	}
}

// TestAttackMCPHugeListing: list_files of a folder the sandbox filled
// returns at most MaxListEntries, marked truncated.
func TestAttackMCPHugeListing(t *testing.T) {
	ws := t.TempDir()
	for i := range MaxListEntries + 100 {
		if err := os.WriteFile(filepath.Join(ws, fmt.Sprintf("f%05d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p := mustPolicy(t, policy.Spec{FSWrite: []string{ws}})
	cs, _ := connect(t, newServer(t, Config{Policy: p}, (&fakes{}).new))
	var out ListFilesOutput
	call(t, cs, ToolListFiles, map[string]any{}, &out)
	if len(out.Entries) != MaxListEntries || !out.Truncated {
		t.Errorf("list_files of %d entries = %d entries, truncated %v; want %d and truncated", MaxListEntries+100, len(out.Entries), out.Truncated, MaxListEntries)
	}
}
