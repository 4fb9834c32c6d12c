package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/server"
)

// A report's "operator" field and a 403's name the policy change that
// would allow a denial. That widens the policy, so the server passes it on
// only with Config.AgentAdvice (issue 12 §5).

const reportWithAdvice = `{"exit_code":0,"stdout":"x","denials":[{"layer":"net","op":"connect","target":"evil.test:8000","rule":"net_hosts","message":"evil.test is not in net_hosts","count":1}],` +
	`"operator":{"suggestions":[{"layer":"net","op":"connect","target":"evil.test:8000","rule":"net_hosts","suggestion":"add \"evil.test:8000\" to net_hosts","changes":[{"action":"add","key":"net_hosts","value":"evil.test:8000"}]}]},"error":"e"}`

// TestExecOperatorAdvice: the exec report reaches the client without its
// operator field, streamed or not, every other field as the sandbox made
// it; with AgentAdvice it is kept. The session's own report is not changed.
func TestExecOperatorAdvice(t *testing.T) {
	for _, advice := range []bool{false, true} {
		for _, stream := range []bool{false, true} {
			e := newEnv(t, server.Config{AgentAdvice: advice})
			var made *api.Report
			e.exec = func(ctx context.Context, req api.ExecRequest) (*api.Report, error) {
				made = new(api.Report)
				if err := json.Unmarshal([]byte(reportWithAdvice), made); err != nil {
					t.Fatal(err)
				}
				return made, nil
			}
			id := e.create(tokA, wsPolicy(t.TempDir()))
			path := "/v1/sessions/" + id + "/exec"
			if stream {
				path += "?stream=1"
			}
			resp, body := e.do("POST", path, tokA, `{"args":["sh"]}`)
			if resp.StatusCode != 200 {
				t.Fatalf("exec (advice %v, stream %v) = %d %s", advice, stream, resp.StatusCode, body)
			}
			line := body
			if stream {
				sc := bufio.NewScanner(bytes.NewReader(body))
				for sc.Scan() {
					line = sc.Bytes()
				}
			}
			var out struct {
				Report json.RawMessage `json:"report"`
			}
			if err := json.Unmarshal(line, &out); err != nil {
				t.Fatalf("exec body %s: %v", body, err)
			}
			if made.Operator == nil {
				t.Fatalf("exec (advice %v, stream %v): the server removed the advice from the session's own report", advice, stream)
			}
			want := *made
			if !advice {
				want.Operator = nil
			}
			wantJSON, err := json.Marshal(&want)
			if err != nil {
				t.Fatal(err)
			}
			if string(out.Report) != string(wantJSON) {
				t.Errorf("exec report (advice %v, stream %v) =\n%s\nwant\n%s", advice, stream, out.Report, wantJSON)
			}
			if got := bytes.Contains(out.Report, []byte(`"operator"`)); got != advice {
				t.Errorf("exec report (advice %v, stream %v) has operator = %v: %s", advice, stream, got, out.Report)
			}
		}
	}
}

// TestDeniedOperatorAdvice: a 403 carries the policy change that would
// allow it only with AgentAdvice, and that change is right: the path read,
// and for a file not created yet the nearest folder that exists.
func TestDeniedOperatorAdvice(t *testing.T) {
	root := t.TempDir()
	ws, outside := filepath.Join(root, "ws"), filepath.Join(root, "outside")
	for _, d := range []string{ws, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, method, path, want string
	}{
		{"read", "GET", "/" + filepath.Join(outside, "secret"), `add "` + filepath.Join(outside, "secret") + `" to fs_read`},
		{"write-new", "PUT", "/" + filepath.Join(outside, "new", "deeper", "f"), `add "` + outside + `" to fs_write`},
		{"write-protected", "PUT", ".envrc", `add "` + filepath.Join(ws, ".envrc") + `" to fs_unprotect`},
	}
	for _, advice := range []bool{false, true} {
		e := newEnv(t, server.Config{AgentAdvice: advice})
		id := e.create(tokA, wsPolicy(ws))
		for _, tt := range tests {
			resp, body := e.do(tt.method, "/v1/sessions/"+id+"/files/"+tt.path, tokA, "x")
			ae := e.wantError(resp, body, 403, "denied")
			switch {
			case !advice && ae.Error.Operator != nil:
				t.Errorf("%s: the 403 carries the operator's advice: %s", tt.name, body)
			case advice && (ae.Error.Operator == nil || len(ae.Error.Operator.Suggestions) != 1 || ae.Error.Operator.Suggestions[0].Suggestion != tt.want):
				t.Errorf("%s: with AgentAdvice the 403 is %s, want the suggestion %s", tt.name, body, tt.want)
			}
		}
	}
}
