package httpauth_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/httpauth"
)

const (
	tokA = "0123456789abcdef-test-token"
	tokB = "fedcba9876543210-other-token"
)

func TestMatch(t *testing.T) {
	toks, err := httpauth.NewTokens([]string{tokA, tokB})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, header string
		want         int // -1: refused
	}{
		{"first", "Bearer " + tokA, 0},
		{"second", "Bearer " + tokB, 1},
		{"scheme-case", "bearer " + tokA, 0},
		{"missing", "", -1},
		{"empty-bearer", "Bearer ", -1},
		{"wrong-same-length", "Bearer 0123456789abcdef-test-tokeN", -1},
		{"prefix", "Bearer " + tokA[:20], -1},
		{"longer", "Bearer " + tokA + "x", -1},
		{"two-spaces", "Bearer  " + tokA, -1},
		{"upper-case-token", "Bearer " + strings.ToUpper(tokA), -1},
		{"basic", "Basic " + tokA, -1},
		{"no-space", "Bearer" + tokA, -1},
		{"no-scheme", tokA, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			if tt.header != "" {
				r.Header.Set("Authorization", tt.header)
			}
			owner, ok := toks.Match(r)
			if ok != (tt.want >= 0) || owner != tt.want {
				t.Errorf("Match(Authorization %q) = %d, %v, want %d", tt.header, owner, ok, tt.want)
			}
		})
	}
	var none *httpauth.Tokens
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("Authorization", "Bearer "+tokA)
	if owner, ok := none.Match(r); ok || owner != -1 || none.Len() != 0 {
		t.Errorf("nil Tokens: Match = %d, %v, Len = %d; want -1, false, 0", owner, ok, none.Len())
	}
}

func TestRequire(t *testing.T) {
	toks, err := httpauth.NewTokens([]string{tokA})
	if err != nil {
		t.Fatal(err)
	}
	reached := 0
	h := toks.Require(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached++
		w.WriteHeader(http.StatusTeapot)
	}))
	for _, tt := range []struct {
		header string
		want   int
	}{{"Bearer " + tokA, http.StatusTeapot}, {"", http.StatusUnauthorized}, {"Bearer " + tokB, http.StatusUnauthorized}} {
		r := httptest.NewRequest("POST", "/", strings.NewReader("{}"))
		if tt.header != "" {
			r.Header.Set("Authorization", tt.header)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tt.want {
			t.Errorf("Authorization %q: status %d, want %d", tt.header, w.Code, tt.want)
		}
		if w.Code == http.StatusUnauthorized && w.Header().Get("WWW-Authenticate") == "" {
			t.Errorf("Authorization %q: 401 without WWW-Authenticate", tt.header)
		}
	}
	if reached != 1 {
		t.Errorf("the handler ran %d times, want once (for the right token)", reached)
	}
}

func TestNewTokensRefusesWeakTokens(t *testing.T) {
	for _, tok := range []string{"", "short", "fifteen-chars!!", " " + tokA, tokA + "\n", "token with spaces inside", "token\x00with-a-nul-inside", "token\u00a0no-break-space"} {
		_, err := httpauth.NewTokens([]string{tokA, tok})
		if err == nil {
			t.Errorf("NewTokens(%q) = nil error, want a refusal", tok)
			continue
		}
		if tok != "" && strings.Contains(err.Error(), tok) || !strings.Contains(err.Error(), "token 2") {
			t.Errorf("NewTokens(%q) = %v: want it to name token 2 and not show it", tok, err)
		}
	}
	if _, err := httpauth.NewTokens([]string{strings.Repeat("x", httpauth.MinTokenLen)}); err != nil {
		t.Errorf("NewTokens(%d characters) = %v, want it accepted", httpauth.MinTokenLen, err)
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
		{"[::ffff:127.0.0.1]:8808", true},
		{"localhost:8808", true},
		{"LOCALHOST:8808", true},
		{":8808", false},
		{"0.0.0.0:8808", false},
		{"[::]:8808", false},
		{"[::ffff:10.0.0.1]:8808", false},
		{"10.0.0.1:8808", false},
		{"example.com:80", false},
		{"localhost.example.com:80", false},
		{"127.0.0.1", false},
		{"/run/airlock.sock", false},
	}
	for _, tt := range tests {
		if got := httpauth.IsLoopback(tt.addr); got != tt.want {
			t.Errorf("IsLoopback(%q) = %v, want %v", tt.addr, got, tt.want)
		}
	}
}
