package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/server"
)

// The heap bounds below derive from the server's limits: each transfer
// it admits (at most DefaultMaxTransfers of one token) may hold its copy
// buffers, or a JSON body and the decoder's copy of it; each connection,
// admitted or refused, its buffers and goroutine stacks on both sides
// (the test client runs in the same process); slack covers the runtime.
const (
	perConn     = 256 << 10
	perUpload   = 4 * 32 << 10 // receive and write buffers of one upload
	perJSONBody = 2 * server.DefaultMaxJSON
	slack       = 8 * mib
)

// TestAttackSlowUploads: one tenant starts 60 uploads of 64 MiB each and
// trickles them (4 MiB sent, then nothing). The server must hold none of
// it in memory, refuse the uploads beyond the token's limits with 429,
// answer a health check meanwhile, and serve another tenant's upload.
func TestAttackSlowUploads(t *testing.T) {
	const n, size, sent = 60, 64 * mib, 4 * mib
	ws := t.TempDir()
	e := newEnv(t, server.Config{MaxUpload: size})
	id := e.create(tokA, wsPolicy(ws))
	idB := e.create(tokB, wsPolicy(t.TempDir()))

	before := airtest.LiveHeap()
	var ups []*airtest.Stalled
	for i := range n {
		ups = append(ups, e.startStuck("PUT", fmt.Sprintf("/v1/sessions/%s/files/up-%d", id, i), tokA, size, airtest.Zeros{}, sent, nil))
	}
	airtest.WaitTaken(t, e.reads, ups)
	grew := airtest.LiveHeap() - before
	bound := int64(server.DefaultMaxTransfers*perUpload + n*perConn + slack)
	t.Logf("live heap grew by %.1f MiB (bound %d MiB) with %d uploads stalled after %d MiB", float64(grew)/mib, bound/mib, n, sent/mib)
	if grew > bound {
		t.Errorf("the server's heap grew by %d MiB with %d uploads stalled after %d MiB each, want at most %d MiB: upload bodies are held in memory", grew/mib, n, sent/mib, bound/mib)
	}

	if resp, body := e.do("GET", "/v1/health", "", nil); resp.StatusCode != 200 {
		t.Errorf("health check during the stalled uploads = %d %s", resp.StatusCode, body)
	}
	if resp, body := e.do("PUT", "/v1/sessions/"+idB+"/files/small", tokB, "hello"); resp.StatusCode != 200 {
		t.Errorf("another tenant's upload during the stalled uploads = %d %s, want 200", resp.StatusCode, body)
	}
	refused := 0
	for _, up := range ups {
		if up.Answered() {
			refused++
			wantErrorBody(t, up, 429, "quota_exceeded")
		}
	}
	if refused == 0 {
		t.Errorf("none of %d stalled uploads of one token was refused: uploads in flight are not bounded", n)
	}
	for _, up := range ups {
		close(up.Release)
		<-up.Done
	}
	ents, err := os.ReadDir(ws)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 0 {
		t.Errorf("aborted uploads left %d files in the workspace, want none", len(ents))
	}
}

// wantErrorBody checks a stalled request's answer.
func wantErrorBody(t *testing.T, s *airtest.Stalled, status int, code string) {
	t.Helper()
	var ae api.ErrorBody
	if s.Status != status || json.Unmarshal(s.Body, &ae) != nil || ae.Error == nil || ae.Error.Code != code || ae.Error.Message == "" {
		t.Errorf("stalled request answered %d %q (err %v), want %d %s with a message", s.Status, s.Body, s.Err, status, code)
	}
}

// TestAttackHugeUpload: one chunked upload that goes on past the limit
// never sits in the server's memory, is refused with 413, and leaves no
// file behind.
func TestAttackHugeUpload(t *testing.T) {
	const limit = 64 * mib
	ws := t.TempDir()
	e := newEnv(t, server.Config{MaxUpload: limit})
	id := e.create(tokA, wsPolicy(ws))

	before := airtest.LiveHeap()
	up := e.startStuck("PUT", "/v1/sessions/"+id+"/files/huge", tokA, -1, airtest.Zeros{}, limit-mib, io.LimitReader(airtest.Zeros{}, 1<<30))
	airtest.WaitTaken(t, e.reads, []*airtest.Stalled{up})
	grew, bound := airtest.LiveHeap()-before, int64(perUpload+perConn+slack)
	t.Logf("live heap grew by %.1f MiB (bound %d MiB) with an upload stalled after %d MiB", float64(grew)/mib, bound/mib, (limit-mib)/mib)
	if grew > bound {
		t.Errorf("the server's heap grew by %d MiB with an upload stalled after %d MiB, want at most %d MiB", grew/mib, (limit-mib)/mib, bound/mib)
	}
	close(up.Release)
	<-up.Done
	wantErrorBody(t, up, 413, "body_too_large")
	if _, err := os.Stat(filepath.Join(ws, "huge")); !os.IsNotExist(err) {
		t.Errorf("the refused upload left a file: stat = %v", err)
	}
}

// TestAttackHugeDownload: a download of a large file is streamed, not
// read into memory first, and arrives whole.
func TestAttackHugeDownload(t *testing.T) {
	const size = 128 * mib
	ws := t.TempDir()
	f, err := os.Create(filepath.Join(ws, "big"))
	if err == nil {
		err = f.Truncate(size) // sparse: costs no disk
	}
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	e := newEnv(t, server.Config{})
	id := e.create(tokA, wsPolicy(ws)+"budget:\n  max_output_bytes: 1GiB\n")

	before := airtest.LiveHeap()
	req, err := http.NewRequest("GET", e.ts.URL+"/v1/sessions/"+id+"/files/big", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tokA)
	resp, err := e.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.ContentLength != size {
		t.Fatalf("download = %d with Content-Length %d, want 200 and %d", resp.StatusCode, resp.ContentLength, size)
	}
	// Take a little, then stop reading: a slow client.
	if _, err := io.CopyN(io.Discard, resp.Body, mib); err != nil {
		t.Fatal(err)
	}
	grew, bound := airtest.LiveHeap()-before, int64(perUpload+perConn+slack)
	t.Logf("live heap grew by %.1f MiB (bound %d MiB) while a client downloads %d MiB slowly", float64(grew)/mib, bound/mib, size/mib)
	if grew > bound {
		t.Errorf("the server's heap grew by %d MiB while a client downloads a %d MiB file slowly, want at most %d MiB: downloads are read into memory", grew/mib, size/mib, bound/mib)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil || n+mib != size {
		t.Errorf("download body = %d bytes, %v; want %d", n+mib, err, size)
	}
}

// TestAttackSlowJSONBodies: 60 exec requests whose JSON bodies (stdin of
// 1 MiB) trickle in are not all held in memory at once.
func TestAttackSlowJSONBodies(t *testing.T) {
	const n, size = 60, server.DefaultMaxJSON
	const sent = size - 64<<10
	e := newEnv(t, server.Config{})
	id := e.create(tokA, wsPolicy(t.TempDir()))

	before := airtest.LiveHeap()
	var reqs []*airtest.Stalled
	for range n {
		// Valid JSON so far: an exec whose stdin is still arriving.
		first := io.MultiReader(strings.NewReader(`{"args":["sh"],"stdin":"`), airtest.Letters{})
		reqs = append(reqs, e.startStuck("POST", "/v1/sessions/"+id+"/exec", tokA, size, first, sent, nil))
	}
	airtest.WaitTaken(t, e.reads, reqs)
	grew, bound := airtest.LiveHeap()-before, int64(server.DefaultMaxTransfers*perJSONBody+n*perConn+slack)
	t.Logf("live heap grew by %.1f MiB (bound %d MiB) with %d exec bodies stalled", float64(grew)/mib, bound/mib, n)
	if grew > bound {
		t.Errorf("the server's heap grew by %d MiB with %d exec bodies stalled after %d KiB each, want at most %d MiB", grew/mib, n, sent>>10, bound/mib)
	}
	refused := 0
	for _, r := range reqs {
		if r.Answered() {
			refused++
			wantErrorBody(t, r, 429, "quota_exceeded")
		}
	}
	if refused == 0 {
		t.Errorf("none of %d stalled exec bodies of one token was refused: JSON bodies in flight are not bounded", n)
	}
}

// TestAttackExecsPerSession: one session runs a bounded number of execs at
// once; the next is refused with 429 instead of running.
func TestAttackExecsPerSession(t *testing.T) {
	const limit = server.DefaultMaxExecs
	e := newEnv(t, server.Config{})
	var running atomic.Int64
	release := make(chan struct{})
	e.exec = func(ctx context.Context, req api.ExecRequest) (*api.Report, error) {
		running.Add(1)
		defer running.Add(-1)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return &api.Report{}, nil
	}
	id := e.create(tokA, wsPolicy(t.TempDir()))
	type answer struct {
		status int
		body   []byte
	}
	answers := make(chan answer, limit+1)
	execOnce := func() {
		req, _ := http.NewRequest("POST", e.ts.URL+"/v1/sessions/"+id+"/exec", strings.NewReader(`{"args":["sh"]}`))
		req.Header.Set("Authorization", "Bearer "+tokA)
		resp, err := e.ts.Client().Do(req)
		if err != nil {
			answers <- answer{0, []byte(err.Error())}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		answers <- answer{resp.StatusCode, b}
	}
	defer close(release)
	for range limit {
		go execOnce()
	}
	waitFor(t, "8 execs running", func() bool { return running.Load() == limit })
	go execOnce()
	deadline := time.After(time.Minute)
	for {
		select {
		case a := <-answers:
			var ae api.ErrorBody
			if a.status != 429 || json.Unmarshal(a.body, &ae) != nil || ae.Error.Code != "quota_exceeded" {
				t.Fatalf("exec beyond the limit = %d %s, want 429 quota_exceeded", a.status, a.body)
			}
			return
		case <-deadline:
			t.Fatal("the exec beyond the limit was neither refused nor run in a minute")
		case <-time.After(10 * time.Millisecond):
			if r := running.Load(); r > limit {
				t.Fatalf("%d execs run at once in one session, want at most %d", r, limit)
			}
		}
	}
}

// waitFor polls cond for at most a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestAttackUnprintableNames: file names with control characters, escape
// sequences, bidi overrides or bytes that are not UTF-8 are refused with a
// 400 that shows the name escaped, and nothing is written; names the
// sandbox made are listed escaped and marked.
func TestAttackUnprintableNames(t *testing.T) {
	ws := t.TempDir()
	e := newEnv(t, server.Config{})
	id := e.create(tokA, wsPolicy(ws))
	base := "/v1/sessions/" + id + "/files"
	tests := []struct{ name, sent, shown string }{
		{"control", "a%01b", `a\x01b`},
		{"escape-sequence", "x%1b%5b31my", `x\x1b[31my`},
		{"newline", "log%0aFAKE", `log\nFAKE`},
		{"not-utf8", "bad%ffname", `bad\xffname`},
		{"bidi-override", "txt%e2%80%aeexe.sh", `txt\u202eexe.sh`},
		{"in-a-folder", "dir%07/f", `dir\x07/f`},
		{"nul", "a%00b", `a\x00b`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, m := range []string{"PUT", "GET", "DELETE"} {
				resp, body := e.do(m, base+"/"+tt.sent, tokA, "data")
				ae := e.wantError(resp, body, 400, "bad_path")
				if !strings.Contains(ae.Error.Message, tt.shown) {
					t.Errorf("%s message %q does not name the escaped path %s", m, ae.Error.Message, tt.shown)
				}
			}
			resp, body := e.do("GET", base+"?dir="+tt.sent, tokA, nil)
			e.wantError(resp, body, 400, "bad_path")
		})
	}
	if ents, _ := os.ReadDir(ws); len(ents) != 0 {
		t.Fatalf("refused names left %d entries in the workspace", len(ents))
	}

	// A name the sandbox made: listed escaped, marked, never raw.
	raw := "evil\x1b]0;owned\x07\xff"
	if err := os.WriteFile(filepath.Join(ws, raw), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	resp, body := e.do("GET", base, tokA, nil)
	var list struct {
		Entries []struct {
			Name    string `json:"name"`
			Escaped bool   `json:"escaped"`
		} `json:"entries"`
	}
	if err := json.Unmarshal(body, &list); resp.StatusCode != 200 || err != nil || len(list.Entries) != 1 {
		t.Fatalf("list = %d %s (%v)", resp.StatusCode, body, err)
	}
	if got := list.Entries[0]; got.Name != `evil\x1b]0;owned\x07\xff` || !got.Escaped {
		t.Errorf("listed %+v, want the name escaped and marked escaped", got)
	}
}

// TestAttackHugeListing: a folder the sandbox filled with more entries
// than a listing holds is listed in part, marked truncated, instead of
// whole into the server's memory.
func TestAttackHugeListing(t *testing.T) {
	ws := t.TempDir()
	const n = server.MaxListEntries + 500
	for i := range n {
		if err := os.WriteFile(filepath.Join(ws, fmt.Sprintf("f%06d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	e := newEnv(t, server.Config{})
	id := e.create(tokA, wsPolicy(ws)+"budget:\n  max_output_bytes: 1GiB\n")
	resp, body := e.do("GET", "/v1/sessions/"+id+"/files", tokA, nil)
	var list struct {
		Entries   []json.RawMessage `json:"entries"`
		Truncated bool              `json:"truncated"`
	}
	if err := json.Unmarshal(body, &list); resp.StatusCode != 200 || err != nil {
		t.Fatalf("list = %d (%v)", resp.StatusCode, err)
	}
	if len(list.Entries) != server.MaxListEntries || !list.Truncated {
		t.Errorf("listing a folder of %d entries gave %d entries, truncated %v; want %d and truncated", n, len(list.Entries), list.Truncated, server.MaxListEntries)
	}
}

// TestAttackHugeHeaders: Serve refuses request headers beyond 64 KiB with
// 431 before any handler runs, and keeps answering.
func TestAttackHugeHeaders(t *testing.T) {
	ns := func(context.Context, *policy.Policy) (server.Session, error) {
		return nil, errors.New("no sessions in this test")
	}
	srv, err := server.New(server.Config{NewSession: ns, Tokens: []string{tokA}})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	defer func() {
		if err := srv.Shutdown(context.Background()); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		<-served
	}()
	c, err := net.DialTimeout("tcp", l.Addr().String(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	go func() {
		// The server may stop reading once it has refused: write errors
		// are expected.
		fmt.Fprintf(c, "GET /v1/sessions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nX-Pad: %s\r\n\r\n", tokA, strings.Repeat("a", 1<<20))
	}()
	status, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || !strings.Contains(status, " 431 ") {
		t.Errorf("a request with 1 MiB of headers got %q (%v), want 431", status, err)
	}
	resp, err := http.Get("http://" + l.Addr().String() + "/v1/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("health after the refusal = %d", resp.StatusCode)
	}
}

// TestAttackStreamNotRead: a client that asks for a streamed exec and
// never reads it makes the server hold no more than the socket buffers:
// the command's writes block (its pipe fills in a real sandbox) instead of
// piling up in the server.
func TestAttackStreamNotRead(t *testing.T) {
	const chunk, total = 64 << 10, 256 * mib
	e := newEnv(t, server.Config{})
	var accepted atomic.Int64
	finished := make(chan struct{})
	e.exec = func(ctx context.Context, req api.ExecRequest) (*api.Report, error) {
		defer close(finished)
		buf := make([]byte, chunk)
		for i := range buf {
			buf[i] = 'x'
		}
		for accepted.Load() < total && ctx.Err() == nil {
			n, _ := req.Stdout.Write(buf)
			accepted.Add(int64(n))
		}
		return &api.Report{}, nil
	}
	id := e.create(tokA, wsPolicy(t.TempDir()))
	before := airtest.LiveHeap()
	req, err := http.NewRequest("POST", e.ts.URL+"/v1/sessions/"+id+"/exec?stream=1", strings.NewReader(`{"args":["sh"]}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tokA)
	resp, err := e.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	// Read nothing. Wait until the command's writes stop being accepted
	// (blocked on the unread connection), or all of them were.
	last, still := int64(-1), 0
	for still < 20 && accepted.Load() < total {
		if a := accepted.Load(); a == last {
			still++
		} else {
			last, still = a, 0
		}
		time.Sleep(25 * time.Millisecond)
	}
	got := accepted.Load()
	grew, bound := airtest.LiveHeap()-before, int64(perConn+slack)
	t.Logf("%d MiB of output accepted, live heap grew by %.1f MiB (bound %d MiB), with the stream unread", got/mib, float64(grew)/mib, bound/mib)
	if got >= total {
		t.Errorf("the server accepted all %d MiB of output that nobody read", total/mib)
	}
	if grew > bound {
		t.Errorf("the server's heap grew by %d MiB with an unread stream, want at most %d MiB", grew/mib, bound/mib)
	}
	resp.Body.Close() // the client goes: the exec ends with its request
	<-finished
}
