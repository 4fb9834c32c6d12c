package mcp

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// minTokenLen is the shortest bearer token BearerAuth accepts, so that a
// token cannot be guessed online.
const minTokenLen = 16

// BearerAuth returns a handler that passes a request to next only when it
// carries "Authorization: Bearer TOKEN" with the given token, compared in
// constant time. Other requests get 401 and reach nothing. The token must
// be at least 16 bytes without surrounding whitespace.
func BearerAuth(token string, next http.Handler) (http.Handler, error) {
	if len(token) < minTokenLen || strings.TrimSpace(token) != token {
		return nil, errors.New("mcp: bearer token is too short or has surrounding whitespace: use at least 16 random characters")
	}
	// Comparing hashes keeps the comparison constant-time even when the
	// lengths differ.
	want := sha256.Sum256([]byte(token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := bearer(r.Header.Get("Authorization"))
		sum := sha256.Sum256([]byte(got))
		if !ok || subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="airlock"`)
			http.Error(w, "airlock: missing or wrong bearer token", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	}), nil
}

// bearer extracts the token of an "Authorization: Bearer TOKEN" header.
func bearer(h string) (string, bool) {
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return "", false
	}
	return tok, true
}

// IsLoopback reports whether the listen address addr ("host:port") binds
// only to a loopback interface: 127.0.0.0/8, ::1 or "localhost". An empty
// host binds every interface and is not loopback.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}
