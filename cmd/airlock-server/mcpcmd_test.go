package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMCPTokenFile: airlock mcp --listen reads the token file as airlock
// serve does, and the files it read before (one token, with or without a
// line end) still work; only the token it names opens the handler.
func TestMCPTokenFile(t *testing.T) {
	const tok, other = "mcp-token-0123456789abcdef", "other-token-0123456789abcdef"
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
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
			h, err := authHandler(ok, "0.0.0.0:8808", file, false)
			if err != nil {
				t.Fatalf("authHandler(%q) = %v", tt.text, err)
			}
			for header, want := range map[string]int{"Bearer " + tok: http.StatusTeapot, "": http.StatusUnauthorized, "Bearer " + tok + "x": http.StatusUnauthorized, "Bearer # agents": http.StatusUnauthorized} {
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
			_, err := authHandler(http.NotFoundHandler(), tt.addr, tt.file, tt.noAuth)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("authHandler = %v, want an error saying %q", err, tt.want)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error shows the token: %v", err)
			}
		})
	}
	t.Setenv("AIRLOCK_TOKEN", "")
	if _, err := authHandler(http.NotFoundHandler(), "[::1]:8808", "", true); err != nil {
		t.Errorf("--insecure-no-auth on [::1] = %v, want it allowed", err)
	}
}
