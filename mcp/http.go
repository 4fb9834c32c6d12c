package mcp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Over streamable HTTP, the Mcp-Session-Id a client is given names its
// session, and with it its sandbox: whoever presents it is that client. So
// each MCP session belongs to the token that created it, and only that
// token may use it: any other gets exactly the answer of an unknown id
// (404 "session not found"), so that the answer tells nothing about
// whether the id exists. The id never reaches the log: the SDK's records
// carry a short hash of it instead (sessionTag).
//
// Each token is a tenant, and may hold at most perClient MCP sessions and
// perToken sandboxes at once; at most BodiesPerToken of its request
// bodies, and BodiesTotal of all tokens, are read at once. Beyond them a
// request is refused with 429 before the SDK sees it.

// Limits on the request bodies the HTTP transport reads at once. Each is
// at most MaxBodyBytes, so they hold at most BodiesTotal × MaxBodyBytes.
const (
	MaxBodyBytes   = sdk.DefaultMaxRequestBodyBytes
	BodiesPerToken = 8
	BodiesTotal    = 32
)

// sessionHeader is the MCP session's id on the wire.
const sessionHeader = "Mcp-Session-Id"

// Handler returns the streamable HTTP transport for this server, behind
// the bearer-token check of Config.Tokens (in constant time, internal/
// httpauth). Each MCP client session gets its own sandbox, closed when the
// client ends the session or it stays idle for Config.IdleTimeout, and
// belongs to the token that created it. Without tokens it serves only with
// Config.InsecureNoAuth, every client then being one tenant; the caller
// must then listen on a loopback address. Without either, every request
// is refused with 401.
func (s *Server) Handler() http.Handler {
	var next http.Handler = sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s.srv }, &sdk.StreamableHTTPOptions{
		Logger:              s.sdkLog,
		SessionTimeout:      s.cfg.IdleTimeout,
		MaxRequestBodyBytes: MaxBodyBytes,
	})
	if s.tokens.Len() > 0 {
		// A second lock behind the first: the SDK binds each session to the
		// user that created it too, and refuses another (with an answer of
		// its own, which the check in front keeps anyone from seeing).
		verify := func(ctx context.Context, _ string, _ *http.Request) (*auth.TokenInfo, error) {
			owner, ok := ctx.Value(ownerKey{}).(int)
			if !ok {
				return nil, auth.ErrInvalidToken
			}
			return &auth.TokenInfo{UserID: "token-" + strconv.Itoa(owner)}, nil
		}
		next = auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(next)
	}
	return &front{s: s, next: next}
}

// ownerKey is the context key of the token index that made a request.
type ownerKey struct{}

// front authenticates each request, keeps every token to its own MCP
// sessions and enforces the per-token limits, in front of the SDK.
type front struct {
	s    *Server
	next http.Handler
}

func (f *front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s := f.s
	owner := 0
	if s.tokens.Len() > 0 {
		o, ok := s.tokens.Match(r)
		if !ok {
			unauthorized(w)
			return
		}
		owner = o
	} else if !s.cfg.InsecureNoAuth {
		unauthorized(w)
		return
	}
	r = r.WithContext(context.WithValue(r.Context(), ownerKey{}, owner))
	if id := r.Header.Get(sessionHeader); id != "" {
		if !s.ownedBy(id, owner) {
			// The SDK's answer to an id it does not know, word for word.
			http.Error(w, "session not found", http.StatusNotFound)
			return
		}
	} else if r.Method == http.MethodPost {
		// A POST without an id creates a session.
		if !s.reserveClient(owner) {
			s.log.Info("mcp: new session refused: the token holds its limit", "owner", owner, "limit", s.perClient)
			tooMany(w, "this token already holds "+strconv.Itoa(s.perClient)+" MCP sessions: end one (or let it idle out), then connect again")
			return
		}
		defer s.unreserveClient(owner)
		w = &binder{ResponseWriter: w, s: s, owner: owner}
	}
	if r.Method == http.MethodPost {
		t, err := s.bodies.Start(owner, 0)
		if err != nil {
			w.Header().Set("Retry-After", "1")
			tooMany(w, "too many requests of this token (or of all clients) are being received at once: retry in a moment")
			return
		}
		defer t.Done()
		r.Body = &doneAtEOF{ReadCloser: r.Body, done: t.Done}
	}
	f.next.ServeHTTP(w, r)
}

func unauthorized(w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="airlock"`)
	http.Error(w, "airlock: missing or wrong bearer token", http.StatusUnauthorized)
}

// tooMany answers 429 with a JSON-RPC error, which MCP clients show.
func tooMany(w http.ResponseWriter, msg string) {
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": nil, "error": map[string]any{"code": -32000, "message": msg}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusTooManyRequests)
	_, _ = w.Write(body) // a write error means the client went away
}

// doneAtEOF calls done once the body has been read to its end (or closed),
// so that a request stops counting as a body being read while its tool
// call runs on.
type doneAtEOF struct {
	io.ReadCloser
	done func()
}

func (d *doneAtEOF) Read(p []byte) (int, error) {
	n, err := d.ReadCloser.Read(p)
	if err != nil {
		d.done()
	}
	return n, err
}

func (d *doneAtEOF) Close() error {
	d.done()
	return d.ReadCloser.Close()
}

// binder records the session id the SDK gives a new session as the
// creating token's, before the header leaves: the client may use the id
// as soon as it sees it.
type binder struct {
	http.ResponseWriter
	s     *Server
	owner int
	bound bool
}

func (b *binder) WriteHeader(code int) {
	if !b.bound {
		b.bound = true
		if id := b.Header().Get(sessionHeader); id != "" {
			b.s.bind(id, b.owner)
		}
	}
	b.ResponseWriter.WriteHeader(code)
}

func (b *binder) Write(p []byte) (int, error) {
	if !b.bound {
		b.WriteHeader(http.StatusOK)
	}
	return b.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the connection (Flush).
func (b *binder) Unwrap() http.ResponseWriter { return b.ResponseWriter }

// bind records that the MCP session id belongs to owner.
func (s *Server) bind(id string, owner int) {
	s.mu.Lock()
	s.owners[id] = owner
	s.mu.Unlock()
	s.log.Info("mcp: session created", "session", sessionTag(id), "owner", owner)
}

// ownedBy reports whether the MCP session id was created by owner.
func (s *Server) ownedBy(id string, owner int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.owners[id]
	return ok && o == owner
}

// ownerOf returns the token index that created ss, or -1 (stdio, or a
// session not made over HTTP).
func (s *Server) ownerOf(ss *sdk.ServerSession) int {
	if ss == nil {
		return -1
	}
	id := ss.ID()
	if id == "" {
		return -1
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if o, ok := s.owners[id]; ok {
		return o
	}
	return -1
}

// reserveClient counts a session that owner is creating, or reports false
// when owner holds perClient already. Records of ended sessions are
// dropped first.
func (s *Server) reserveClient(owner int) bool {
	live := map[string]bool{}
	for ss := range s.srv.Sessions() {
		live[ss.ID()] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	held := s.pending[owner]
	for id, o := range s.owners {
		switch {
		case !live[id]:
			delete(s.owners, id)
		case o == owner:
			held++
		}
	}
	if held >= s.perClient {
		return false
	}
	s.pending[owner]++
	return true
}

// unreserveClient ends a reservation of reserveClient: the session is
// bound by now, or was never made.
func (s *Server) unreserveClient(owner int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending[owner]--; s.pending[owner] <= 0 {
		delete(s.pending, owner)
	}
}

// sessionTag is what logs show of an MCP session id: a short hash, the
// same each time, from which the id cannot be recovered (the id has 130
// random bits).
func sessionTag(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:6])
}

// hideIDs is the SDK's log handler: it passes records on with each
// "session_id" attribute (the SDK's name for the Mcp-Session-Id) replaced
// by "session" with its sessionTag.
type hideIDs struct{ h slog.Handler }

func (h hideIDs) Enabled(ctx context.Context, l slog.Level) bool { return h.h.Enabled(ctx, l) }

func (h hideIDs) Handle(ctx context.Context, rec slog.Record) error {
	out := slog.NewRecord(rec.Time, rec.Level, rec.Message, rec.PC)
	rec.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(hideID(a))
		return true
	})
	return h.h.Handle(ctx, out)
}

func (h hideIDs) WithAttrs(as []slog.Attr) slog.Handler {
	hidden := make([]slog.Attr, len(as))
	for i, a := range as {
		hidden[i] = hideID(a)
	}
	return hideIDs{h.h.WithAttrs(hidden)}
}

func (h hideIDs) WithGroup(name string) slog.Handler { return hideIDs{h.h.WithGroup(name)} }

func hideID(a slog.Attr) slog.Attr {
	switch {
	case a.Key == "session_id":
		return slog.String("session", sessionTag(a.Value.Resolve().String()))
	case a.Value.Kind() == slog.KindGroup:
		g := a.Value.Group()
		hidden := make([]any, len(g))
		for i, ga := range g {
			hidden[i] = hideID(ga)
		}
		return slog.Group(a.Key, hidden...)
	}
	return a
}
