//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock/internal/airtest"
)

// One lifecycle (issue 14): what one entry point had, every entry point
// has. A pseudo-terminal for an exec through the HTTP API and through MCP,
// and itemized filesystem denials (--fs-audit) in MCP results, as
// `airlock run --pty` and `airlock serve --fs-audit` had them.

const isattyCode = "import os, sys; print(os.isatty(0), os.isatty(1), os.isatty(2))"

// TestServeExecPTY: "pty": true in an exec body gives the command a
// terminal; without it, pipes.
func TestServeExecPTY(t *testing.T) {
	airtest.RequireUserNS(t)
	airtest.RequireLandlockABI(t, 4)
	airtest.RequireBinary(t, "/usr/bin/python3")
	p := startServe(t, mcpBinary(t))
	ctx := serveCtx(t)
	status, body := rawAPI(t, ctx, p, "POST", "/v1/sessions", map[string]string{"policy": "version: 1\nallowed_tools: [python3]\n"})
	if status != http.StatusCreated && status != http.StatusOK {
		t.Fatalf("create session = %d %s\n%s", status, body, p.logText())
	}
	var sess struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(body, &sess); err != nil || sess.ID == "" {
		t.Fatalf("create session: %s: %v", body, err)
	}
	for _, pty := range []bool{true, false} {
		status, body := rawAPI(t, ctx, p, "POST", "/v1/sessions/"+sess.ID+"/exec", map[string]any{"args": []string{"python3", "-c", isattyCode}, "pty": pty})
		var res struct {
			Report struct {
				ExitCode int    `json:"exit_code"`
				Stdout   string `json:"stdout"`
			} `json:"report"`
		}
		if status != http.StatusOK || json.Unmarshal(body, &res) != nil {
			t.Fatalf("exec with pty %v = %d %s", pty, status, body)
		}
		rep := res.Report
		want := map[bool]string{true: "True True True", false: "False False False"}[pty]
		if rep.ExitCode != 0 || strings.TrimSpace(rep.Stdout) != want {
			t.Errorf("exec with pty %v: exit %d, stdout %q; want %q\n%s", pty, rep.ExitCode, rep.Stdout, want, body)
		}
	}
}

// TestMCPPTYAndFSAudit: the run tool's pty argument gives the program a
// terminal, and `airlock mcp --fs-audit` itemizes the listing the kernel
// refused (the target named) in the run's denials.
func TestMCPPTYAndFSAudit(t *testing.T) {
	airtest.RequireRoot(t) // --fs-audit reads the kernel's audit records
	airtest.RequireUserNS(t)
	airtest.RequireLandlockABI(t, 4)
	airtest.RequireBinary(t, "/usr/bin/python3")
	ws := t.TempDir()
	// A folder that exists inside (a file in it is granted) but is not
	// readable: listing it is refused by Landlock, not by absence. Not
	// below /tmp, which is the sandbox's own scratch space.
	secret, err := os.MkdirTemp("/var/tmp", "airlock-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(secret) })
	granted := filepath.Join(secret, "granted.txt")
	if err := os.WriteFile(granted, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.Command(mcpBinary(t), "mcp", "--fs-audit", "--fs-write", ws, "--fs-read", granted, "--tool", "python3")
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "airlock-e2e", Version: "1"}, nil).
		Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect to airlock mcp --fs-audit: %v\nstderr:\n%s", err, stderr.String())
	}
	defer cs.Close()

	type report struct {
		ExitCode int    `json:"exit_code"`
		Stdout   string `json:"stdout"`
		Denials  []struct {
			Layer  string `json:"layer"`
			Target string `json:"target"`
			Rule   string `json:"rule"`
		} `json:"denials"`
	}
	run := func(args map[string]any) report {
		t.Helper()
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "run", Arguments: args})
		if err != nil {
			t.Fatalf("run: protocol error %v\nstderr:\n%s", err, stderr.String())
		}
		data, _ := json.Marshal(res.StructuredContent)
		var rep report
		if err := json.Unmarshal(data, &rep); err != nil {
			t.Fatalf("run: structured content %s: %v", data, err)
		}
		return rep
	}
	if rep := run(map[string]any{"language": "python", "code": isattyCode, "pty": true}); strings.TrimSpace(rep.Stdout) != "True True True" {
		t.Errorf("run with pty: exit %d, stdout %q; want a terminal on 0, 1 and 2", rep.ExitCode, rep.Stdout)
	}
	if rep := run(map[string]any{"language": "python", "code": isattyCode}); strings.TrimSpace(rep.Stdout) != "False False False" {
		t.Errorf("run without pty: exit %d, stdout %q; want pipes", rep.ExitCode, rep.Stdout)
	}
	rep := run(map[string]any{"language": "python", "code": "import os; os.listdir(" + pyQuote(secret) + ")"})
	found := false
	for _, d := range rep.Denials {
		found = found || (d.Layer == "fs" && d.Target == secret)
	}
	if rep.ExitCode == 0 || !found {
		t.Errorf("listing %s under --fs-audit: exit %d, denials %+v; want the read itemized", secret, rep.ExitCode, rep.Denials)
	}
}

// pyQuote is s as a Python string literal.
func pyQuote(s string) string {
	b, _ := json.Marshal(s) // a JSON string is a Python string literal for a path
	return string(b)
}
