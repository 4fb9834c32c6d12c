//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock/internal/airtest"
)

// mcpBinary returns the airlock binary under test: $AIRLOCK_E2E_BINARY when
// set (airlock-server must be next to it), else one built from
// ./cmd/airlock into a temporary directory, with ./cmd/airlock-server next
// to it: airlock runs it for serve, mcp and export k8s.
func mcpBinary(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("AIRLOCK_E2E_BINARY"); bin != "" {
		return bin
	}
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", dir, "./cmd/airlock", "./cmd/airlock-server")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/airlock ./cmd/airlock-server: %v\n%s", err, out)
	}
	return filepath.Join(dir, "airlock")
}

// lockedBuffer collects the server's stderr while the transport runs.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer // guarded by mu
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestMCPStdio drives `airlock mcp` over stdio as an MCP client would: a
// python run whose output comes back in the report, a file written by the
// sandboxed code and read back through the guard, and a refused read.
func TestMCPStdio(t *testing.T) {
	airtest.RequireUserNS(t)
	airtest.RequireLandlockABI(t, 4)
	bin := mcpBinary(t)
	ws := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	cmd := exec.Command(bin, "mcp", "--fs-write", ws, "--tool", "python3")
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "airlock-e2e", Version: "1"}, nil).
		Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect to airlock mcp: %v\nstderr:\n%s", err, stderr.String())
	}
	defer func() {
		if err := cs.Close(); err != nil {
			t.Logf("close: %v", err)
		}
		if cmd.ProcessState != nil && !cmd.ProcessState.Success() {
			t.Errorf("airlock mcp exited with %v\nstderr:\n%s", cmd.ProcessState, stderr.String())
		}
	}()

	callTool := func(name string, args map[string]any, out any) *sdk.CallToolResult {
		t.Helper()
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: protocol error %v\nstderr:\n%s", name, err, stderr.String())
		}
		data, err := json.Marshal(res.StructuredContent)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s: structured content %s: %v", name, data, err)
		}
		return res
	}

	var rep struct {
		ExitCode int     `json:"exit_code"`
		HaltedBy *string `json:"halted_by"`
		Stdout   string  `json:"stdout"`
		Stderr   string  `json:"stderr"`
		Error    string  `json:"error"`
	}
	res := callTool("run", map[string]any{"language": "python", "code": "print(6 * 7)\nopen('answer.txt', 'w').write('42')"}, &rep)
	if res.IsError || rep.ExitCode != 0 || rep.Stdout != "42\n" {
		t.Fatalf("run = isError %v, exit %d, stdout %q, stderr %q, error %q\nserver stderr:\n%s",
			res.IsError, rep.ExitCode, rep.Stdout, rep.Stderr, rep.Error, stderr.String())
	}

	var file struct {
		Content string `json:"content"`
	}
	if res := callTool("read_file", map[string]any{"path": "answer.txt"}, &file); res.IsError || file.Content != "42" {
		t.Fatalf("read_file answer.txt = isError %v, content %q", res.IsError, file.Content)
	}

	var refused struct {
		Denied *struct {
			Rule string `json:"rule"`
		} `json:"denied"`
	}
	if res := callTool("read_file", map[string]any{"path": "/etc/shadow"}, &refused); !res.IsError || refused.Denied == nil || refused.Denied.Rule != "fs_read" {
		t.Fatalf("read_file /etc/shadow = isError %v, denied %+v; want an fs_read denial", res.IsError, refused.Denied)
	}
}
