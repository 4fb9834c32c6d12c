package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/server"
)

func TestExec(t *testing.T) {
	e := newEnv(t, server.Config{})
	var got api.ExecRequest
	e.exec = func(ctx context.Context, req api.ExecRequest) (*api.Report, error) {
		got = req
		return &api.Report{ExitCode: 3, Stdout: "hi\n"}, nil
	}
	id := e.create(tokA, wsPolicy(t.TempDir()))
	resp, body := e.do("POST", "/v1/sessions/"+id+"/exec", tokA, `{"args":["sh","-c","echo hi"],"dir":"/tmp","env":["A=1"],"stdin":"in","timeout":"5s"}`)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("exec = %d %s", resp.StatusCode, body)
	}
	var out struct {
		Report struct {
			ExitCode int    `json:"exit_code"`
			Stdout   string `json:"stdout"`
		} `json:"report"`
	}
	if err := json.Unmarshal(body, &out); err != nil || out.Report.ExitCode != 3 || out.Report.Stdout != "hi\n" {
		t.Errorf("exec body %s: %+v %v", body, out, err)
	}
	stdin, _ := io.ReadAll(got.Stdin)
	if strings.Join(got.Args, " ") != "sh -c echo hi" || got.Dir != "/tmp" || len(got.Env) != 1 || string(stdin) != "in" || got.Timeout.String() != "5s" {
		t.Errorf("ExecRequest = %+v (stdin %q)", got, stdin)
	}
	if got.Stdout != nil || got.Stderr != nil {
		t.Errorf("non-streaming exec got writers")
	}
}

// TestExecStream: output arrives as NDJSON events in order, characters split
// across writes stay whole, and the report comes last.
func TestExecStream(t *testing.T) {
	e := newEnv(t, server.Config{})
	e.exec = func(ctx context.Context, req api.ExecRequest) (*api.Report, error) {
		io.WriteString(req.Stdout, "line 1\n")
		io.WriteString(req.Stderr, "oops\n")
		req.Stdout.Write([]byte("caf\xc3")) // "é" split across two writes
		req.Stdout.Write([]byte("\xa9\n"))
		req.Stdout.Write([]byte("end\xe2\x82")) // an incomplete "€" at the end
		return &api.Report{ExitCode: 7}, nil
	}
	id := e.create(tokA, wsPolicy(t.TempDir()))
	resp, body := e.do("POST", "/v1/sessions/"+id+"/exec?stream=1", tokA, `{"args":["sh"]}`)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("exec = %d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	type event struct {
		Stream string          `json:"stream"`
		Data   string          `json:"data"`
		Report json.RawMessage `json:"report"`
	}
	var events []event
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		var ev event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		events = append(events, ev)
	}
	want := []event{
		{Stream: "stdout", Data: "line 1\n"},
		{Stream: "stderr", Data: "oops\n"},
		{Stream: "stdout", Data: "caf"},
		{Stream: "stdout", Data: "é\n"},
		{Stream: "stdout", Data: "end"},
		{Stream: "stdout", Data: "\ufffd\ufffd"}, // one U+FFFD per byte left of the incomplete sequence, flushed at the end
	}
	if len(events) != len(want)+1 {
		t.Fatalf("got %d lines, want %d: %s", len(events), len(want)+1, body)
	}
	for i, w := range want {
		if events[i].Stream != w.Stream || events[i].Data != w.Data {
			t.Errorf("event %d = %+v, want %+v", i, events[i], w)
		}
	}
	want7, err := json.Marshal(&api.Report{ExitCode: 7})
	if err != nil {
		t.Fatal(err)
	}
	if last := events[len(events)-1]; string(last.Report) != string(want7) {
		t.Errorf("last line report = %s, want the report %s", last.Report, want7)
	}
}

// TestExecStreamSessionEnds: an exec whose session ends before any output
// gets a plain 410; one that ends after output gets an error line.
func TestExecStreamSessionEnds(t *testing.T) {
	e := newEnv(t, server.Config{})
	var f *fakeSession
	e.exec = func(ctx context.Context, req api.ExecRequest) (*api.Report, error) {
		io.WriteString(req.Stdout, "partial")
		return nil, api.ErrSessionClosed
	}
	id := e.create(tokA, wsPolicy(t.TempDir()))
	f = e.fake(id)
	resp, body := e.do("POST", "/v1/sessions/"+id+"/exec?stream=1", tokA, `{"args":["sh"]}`)
	lines := strings.Split(strings.TrimSpace(string(body)), "\n")
	if resp.StatusCode != 200 || len(lines) != 2 || !strings.Contains(lines[0], "partial") || !strings.Contains(lines[1], `"code":"session_ended"`) {
		t.Errorf("exec = %d %s, want an output line then an error line", resp.StatusCode, body)
	}
	if !f.closed() {
		t.Errorf("session not ended after Exec said it was closed")
	}
	resp, body = e.do("POST", "/v1/sessions/"+id+"/exec?stream=1", tokA, `{"args":["sh"]}`)
	e.wantError(resp, body, http.StatusGone, "session_ended")
}

// TestExecMisuse: an Exec error other than a closed session is a 400 that
// leaves the session alive.
func TestExecMisuse(t *testing.T) {
	e := newEnv(t, server.Config{})
	e.exec = func(ctx context.Context, req api.ExecRequest) (*api.Report, error) {
		return nil, io.ErrShortWrite
	}
	id := e.create(tokA, wsPolicy(t.TempDir()))
	resp, body := e.do("POST", "/v1/sessions/"+id+"/exec", tokA, `{"args":["sh"]}`)
	e.wantError(resp, body, 400, "bad_exec")
	if e.fake(id).closed() {
		t.Errorf("a misused exec ended the session")
	}
}
