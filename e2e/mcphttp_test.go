//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock/internal/airtest"
)

// bearer adds a bearer token to every request.
type bearer string

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(b))
	return http.DefaultTransport.RoundTrip(r)
}

// TestMCPHTTPTokens: airlock mcp --listen with two tokens. Token B,
// presenting token A's Mcp-Session-Id, gets the answer of an unknown id and
// reaches nothing of A's sandbox; B's own session works; the id never
// appears in the server's log.
func TestMCPHTTPTokens(t *testing.T) {
	airtest.RequireUserNS(t)
	airtest.RequireLandlockABI(t, 4)
	const tokA, tokB = "tenant-a-0123456789abcdef", "tenant-b-0123456789abcdef"
	bin := mcpBinary(t)
	dir := t.TempDir()
	ws := filepath.Join(dir, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte(tokA+"\n"+tokB+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.Command(bin, "mcp", "--listen", "127.0.0.1:0", "--token-file", tokens, "--fs-write", ws, "--tool", "sh", "--warm-pool", "0")
	cmd.Env = append(os.Environ(), "AIRLOCK_TOKEN=")
	stderrPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var log lockedBuffer
	addr := make(chan string, 1)
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		sc := bufio.NewScanner(stderrPipe)
		for sc.Scan() {
			log.Write([]byte(sc.Text() + "\n"))
			if u, ok := strings.CutPrefix(sc.Text(), "airlock mcp: serving MCP (streamable HTTP) on "); ok {
				addr <- u
			}
		}
	}()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		<-exited
		_ = cmd.Wait()
	}()
	var url string
	select {
	case url = <-addr:
	case <-exited:
		t.Fatalf("airlock mcp exited before serving:\n%s", log.String())
	case <-ctx.Done():
		t.Fatalf("airlock mcp printed no address:\n%s", log.String())
	}

	dial := func(token string) *sdk.ClientSession {
		t.Helper()
		tr := &sdk.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: bearer(token)}, MaxRetries: -1, DisableStandaloneSSE: true}
		cs, err := sdk.NewClient(&sdk.Implementation{Name: "airlock-e2e", Version: "1"}, nil).Connect(ctx, tr, nil)
		if err != nil {
			t.Fatalf("connect with a token: %v\n%s", err, log.String())
		}
		return cs
	}
	csA := dial(tokA)
	defer csA.Close()
	res, err := csA.CallTool(ctx, &sdk.CallToolParams{Name: "run", Arguments: map[string]any{"command": []string{"sh", "-c", "echo secret-of-a > a.txt"}}})
	if err != nil || res.IsError {
		t.Fatalf("token A's run: %v, %+v\n%s", err, res, log.String())
	}
	idA := csA.ID()

	raw := func(sid string) (int, string) {
		msg := `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"read_file","arguments":{"path":"a.txt"}}}`
		req, _ := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(msg))
		req.Header.Set("Authorization", "Bearer "+tokB)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", sid)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return resp.StatusCode, string(b)
	}
	stB, bodyB := raw(idA)
	stU, bodyU := raw(strings.Repeat("Z", len(idA)))
	if stB != stU || bodyB != bodyU || strings.Contains(bodyB, "secret-of-a") {
		t.Errorf("token B with token A's session id got %d %q, an unknown id %d %q: want the same answer, and nothing of A's", stB, bodyB, stU, bodyU)
	}
	csB := dial(tokB)
	defer csB.Close()
	if res, err := csB.CallTool(ctx, &sdk.CallToolParams{Name: "session_info", Arguments: map[string]any{}}); err != nil || res.IsError {
		t.Errorf("token B's own session: %v, %+v", err, res)
	}
	csA.Close()
	csB.Close()
	if strings.Contains(log.String(), idA) {
		t.Errorf("the server's log holds token A's Mcp-Session-Id:\n%s", log.String())
	}
}
