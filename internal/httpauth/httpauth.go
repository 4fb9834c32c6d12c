// Package httpauth decides who may use airlock's HTTP servers (the API of
// airlock serve, airlock mcp --listen), in one place for both: bearer
// tokens, and whether a listen address is loopback only, the one case in
// which a server may run without a token.
//
// It stops a caller without a token from reaching anything: a request is
// refused before any handler sees it. A token is at least MinTokenLen
// characters, so it cannot be guessed online, and checking one takes the
// same time whatever was presented: the presented token is hashed and
// compared with every token's hash in constant time, and which token
// matched is selected without a branch, so neither a token's length nor its
// content nor its position leaks through timing.
//
// It imports the standard library only.
package httpauth

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"unicode"
)

// MinTokenLen is the shortest bearer token accepted.
const MinTokenLen = 16

// Tokens is a set of bearer tokens. A nil *Tokens holds none and matches
// nothing. It is safe for concurrent use.
type Tokens struct {
	sums [][sha256.Size]byte
}

// NewTokens returns the set of tokens. Each must be at least MinTokenLen
// characters long, with no white space or control character in it. Errors
// name a token by its position (1-based), never by its text.
func NewTokens(tokens []string) (*Tokens, error) {
	t := &Tokens{}
	for i, tok := range tokens {
		if len(tok) < MinTokenLen || strings.IndexFunc(tok, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
			return nil, fmt.Errorf("token %d has %d characters or contains white space: use at least %d random characters without spaces", i+1, len(tok), MinTokenLen)
		}
		t.sums = append(t.sums, sha256.Sum256([]byte(tok)))
	}
	return t, nil
}

// Len returns the number of tokens in t.
func (t *Tokens) Len() int {
	if t == nil {
		return 0
	}
	return len(t.sums)
}

// Match returns the index in NewTokens' list of the token that r carries
// as "Authorization: Bearer TOKEN" (the scheme in any case), or -1 and
// false when it carries none of them.
func (t *Tokens) Match(r *http.Request) (owner int, ok bool) {
	if t == nil {
		return -1, false
	}
	scheme, tok, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	sum := sha256.Sum256([]byte(tok))
	owner = -1
	for i := range t.sums {
		eq := subtle.ConstantTimeCompare(sum[:], t.sums[i][:])
		owner = subtle.ConstantTimeSelect(eq, i, owner)
	}
	if !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return -1, false
	}
	return owner, owner >= 0
}

// Require returns a handler that passes a request to next only when it
// carries one of t's tokens. Any other request gets 401 with
// WWW-Authenticate and a plain-text body, and reaches nothing.
func (t *Tokens) Require(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := t.Match(r); !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="airlock"`)
			http.Error(w, "airlock: missing or wrong bearer token", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// IsLoopback reports whether the address addr ("host:port", as given to
// net.Listen or as a listener's Addr().String()) binds only to a loopback
// interface: 127.0.0.0/8, ::1 (an IPv4-mapped loopback address included)
// or "localhost". An empty host binds every interface and is not
// loopback; neither is anything that is not host:port (a unix socket's
// path).
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}
