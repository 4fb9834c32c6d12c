package main

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/mcp"
	"github.com/airlock-sandbox/airlock/policy"
)

// mcpHandler is the HTTP handler airlock mcp --listen serves with tokens.
func mcpHandler(t *testing.T, tokens []string) http.Handler {
	t.Helper()
	srv, err := mcp.New(mcp.Config{Policy: policy.Default(), Tokens: tokens,
		NewSession: func(context.Context, *policy.Policy) (mcp.Session, error) {
			return nil, errors.New("no sandbox in this test")
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv.Handler()
}

// TestMCPTokenFile: airlock mcp --listen reads the token file as airlock
// serve does, and the files it read before (one token, with or without a
// line end) still work; only the tokens it names get past the handler's
// check (to the MCP transport, which answers a bare POST 415).
func TestMCPTokenFile(t *testing.T) {
	const tok, other = "mcp-token-0123456789abcdef", "other-token-0123456789abcdef"
	for _, tt := range []struct{ name, text string }{
		{"old-no-newline", tok},
		{"old-newline", tok + "\n"},
		{"old-crlf", tok + "\r\n"},
		{"serve-format", "# agents\n\n" + tok + "\n" + other + "\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("AIRLOCK_TOKEN", "")
			file := filepath.Join(t.TempDir(), "token")
			if err := os.WriteFile(file, []byte(tt.text), 0o600); err != nil {
				t.Fatal(err)
			}
			tokens, err := mcpTokens("0.0.0.0:8808", file, false)
			if err != nil {
				t.Fatalf("mcpTokens(%q) = %v", tt.text, err)
			}
			h := mcpHandler(t, tokens)
			for header, want := range map[string]int{"Bearer " + tok: http.StatusUnsupportedMediaType, "": http.StatusUnauthorized, "Bearer " + tok + "x": http.StatusUnauthorized, "Bearer # agents": http.StatusUnauthorized} {
				r := httptest.NewRequest("POST", "/", nil)
				if header != "" {
					r.Header.Set("Authorization", header)
				}
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if w.Code != want {
					t.Errorf("token file %q, Authorization %q: status %d, want %d", tt.text, header, w.Code, want)
				}
			}
		})
	}
}

// TestMCPAuthRefusals: what airlock mcp --listen refuses to serve with, and
// that no message shows a token.
func TestMCPAuthRefusals(t *testing.T) {
	const secret = "secret-token-0123456789"
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name, addr, file, env string
		noAuth                bool
		want                  string
	}{
		{"ceiling", "127.0.0.1:0", write("ceiling", secret+" ceiling=c.yaml\n"), "", false, "no ceilings"},
		{"short", "127.0.0.1:0", write("short", "short\n"), "", false, "at least 16"},
		{"short-env", "127.0.0.1:0", "", "short", false, "at least 16"},
		{"empty-file", "127.0.0.1:0", write("empty", "# none\n"), "", false, "holds no token"},
		{"token-and-no-auth", "127.0.0.1:0", "", secret, true, "choose one"},
		{"no-token", "127.0.0.1:0", "", "", false, "needs a bearer token"},
		{"no-auth-public", "0.0.0.0:8808", "", "", true, "only loopback"},
		{"no-auth-all-interfaces", ":8808", "", "", true, "only loopback"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("AIRLOCK_TOKEN", tt.env)
			_, err := mcpTokens(tt.addr, tt.file, tt.noAuth)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("mcpTokens = %v, want an error saying %q", err, tt.want)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error shows the token: %v", err)
			}
		})
	}
	t.Setenv("AIRLOCK_TOKEN", "")
	if _, err := mcpTokens("[::1]:8808", "", true); err != nil {
		t.Errorf("--insecure-no-auth on [::1] = %v, want it allowed", err)
	}
}
