package mcp

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/policy"
)

// TestToolAnnotationsAndSchema: every tool carries annotations (read-only
// for the readers, destructive for run and write_file, open world for run
// only when net_hosts grants hosts), and run's command is an array of
// strings only: a schema that allowed null let clients send a string.
func TestToolAnnotationsAndSchema(t *testing.T) {
	for _, hosts := range [][]string{nil, {"api.example.com"}} {
		p := mustPolicy(t, policy.Spec{NetHosts: hosts, AllowedTools: []string{"python3"}})
		cs, _ := connect(t, newServer(t, Config{Policy: p}, (&fakes{}).new))
		res, err := cs.ListTools(t.Context(), nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, tool := range res.Tools {
			a := tool.Annotations
			if a == nil || a.Title == "" || a.OpenWorldHint == nil {
				t.Fatalf("tool %s has no annotations: %+v", tool.Name, a)
			}
			readOnly := tool.Name == ToolReadFile || tool.Name == ToolListFiles || tool.Name == ToolSessionInfo
			if a.ReadOnlyHint != readOnly {
				t.Errorf("%s: readOnlyHint %v, want %v", tool.Name, a.ReadOnlyHint, readOnly)
			}
			destructive := tool.Name == ToolRun || tool.Name == ToolWriteFile
			if !readOnly && (a.DestructiveHint == nil || *a.DestructiveHint != destructive) {
				t.Errorf("%s: destructiveHint %v, want %v", tool.Name, a.DestructiveHint, destructive)
			}
			if open := tool.Name == ToolRun && len(hosts) > 0; *a.OpenWorldHint != open {
				t.Errorf("%s with net_hosts %v: openWorldHint %v, want %v", tool.Name, hosts, *a.OpenWorldHint, open)
			}
			if tool.Name != ToolRun {
				continue
			}
			raw, _ := json.Marshal(tool.InputSchema)
			var sc struct {
				Properties map[string]struct {
					Type  any `json:"type"`
					Items struct {
						Type any `json:"type"`
					} `json:"items"`
				} `json:"properties"`
			}
			if err := json.Unmarshal(raw, &sc); err != nil {
				t.Fatal(err)
			}
			if c := sc.Properties["command"]; c.Type != "array" || c.Items.Type != "string" {
				t.Errorf("run's command schema is type %v of %v, want an array of strings only: %s", c.Type, c.Items.Type, raw)
			}
		}
	}
}

// TestRunProgress: a client that sends a progress token hears from a long
// run every ProgressInterval, with the output so far, and then gets the
// report; one that sends none gets no notifications.
func TestRunProgress(t *testing.T) {
	p := mustPolicy(t, policy.Spec{AllowedTools: []string{"sh"}})
	f := &fakes{rep: api.Report{Stdout: "done"}, run: func(req api.ExecRequest) {
		for i := range 8 {
			if req.Stdout != nil {
				req.Stdout.Write([]byte("tick " + string(rune('0'+i)) + "\n"))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}}
	srv := newServer(t, Config{Policy: p, ProgressInterval: 150 * time.Millisecond}, f.new)
	var mu sync.Mutex
	var got []*sdk.ProgressNotificationParams
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ct, st := sdk.NewInMemoryTransports()
	ss, err := srv.srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "1"}, &sdk.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *sdk.ProgressNotificationClientRequest) {
			mu.Lock()
			got = append(got, r.Params)
			mu.Unlock()
		}}).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cs.Close(); ss.Wait() }()
	params := &sdk.CallToolParams{Name: ToolRun, Arguments: map[string]any{"command": []string{"sh", "-c", "slow"}}}
	params.SetProgressToken("run-1")
	res, err := cs.CallTool(ctx, params)
	if err != nil || res.IsError {
		t.Fatalf("run: %v %+v", err, res)
	}
	mu.Lock()
	n := len(got)
	var last *sdk.ProgressNotificationParams
	if n > 0 {
		last = got[n-1]
	}
	mu.Unlock()
	if n < 2 {
		t.Fatalf("%d progress notifications for an 800 ms run every 150 ms, want at least 2", n)
	}
	if last.ProgressToken != "run-1" || !strings.Contains(last.Message, "tick") || last.Progress <= 0 {
		t.Errorf("last progress %+v: want the token, output so far and elapsed seconds", last)
	}
	// Without a token: none.
	mu.Lock()
	got = nil
	mu.Unlock()
	if res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: ToolRun, Arguments: map[string]any{"command": []string{"sh", "-c", "slow"}}}); err != nil || res.IsError {
		t.Fatalf("run: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 0 {
		t.Errorf("%d progress notifications without a progress token", len(got))
	}
}

// TestExtendSessionTool: extend_session moves the session's end; a
// nonsense duration is refused.
func TestExtendSessionTool(t *testing.T) {
	p := mustPolicy(t, policy.Spec{AllowedTools: []string{"sh"}})
	cs, _ := connect(t, newServer(t, Config{Policy: p}, (&fakes{}).new))
	// by is added to the current end: on a session with an hour to live
	// (the fake's, from its start at the first call), 30m gives it an hour
	// and a half, and a second 30m two hours. The fake counts from the
	// system clock: the bounds allow for the moments the calls take.
	before := time.Now()
	var first, second ExtendOutput
	if res := call(t, cs, ToolExtend, map[string]any{"by": "30m"}, &first); res.IsError {
		t.Fatalf("extend by 30m: %+v", res)
	}
	if lo, hi := before.Add(90*time.Minute-time.Minute), time.Now().Add(90*time.Minute); first.Deadline.Before(lo) || first.Deadline.After(hi) {
		t.Fatalf("extend by 30m on a session with an hour left: deadline %v, want between %v and %v", first.Deadline, lo, hi)
	}
	if res := call(t, cs, ToolExtend, map[string]any{"by": "30m"}, &second); res.IsError {
		t.Fatalf("extend by 30m again: %+v", res)
	}
	if want := first.Deadline.Add(30 * time.Minute); second.Deadline.Before(want.Add(-time.Minute)) || second.Deadline.After(want.Add(time.Minute)) {
		t.Fatalf("second extend by 30m: deadline %v, want %v, 30 minutes past the first", second.Deadline, want)
	}
	for _, bad := range []any{"0s", "-5m", "soon", "1000h", 3600, ""} {
		if res := call(t, cs, ToolExtend, map[string]any{"by": bad}, nil); !res.IsError {
			t.Errorf("extend by %v was accepted", bad)
		}
	}
	if res := call(t, cs, ToolExtend, map[string]any{"seconds": 3600}, nil); !res.IsError {
		t.Error("extend with seconds was accepted: by is its one argument")
	}
}
