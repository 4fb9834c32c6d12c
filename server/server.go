package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/httpauth"
	"github.com/airlock-sandbox/airlock/internal/inflight"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
)

// Defaults for the zero fields of Config.
const (
	DefaultMaxSessions           = 8
	DefaultIdle                  = 10 * time.Minute
	DefaultMaxUpload             = 32 << 20
	DefaultMaxJSON               = 1 << 20
	DefaultMaxTransfers          = 8
	DefaultMaxTransfersTotal     = 64
	DefaultMaxTransferBytes      = 256 << 20
	DefaultMaxTransferBytesTotal = 1 << 30
	DefaultMaxExecs              = 8
)

// Config describes one API server. The zero Config is not usable: New
// needs NewSession and either Tokens or InsecureNoAuth.
type Config struct {
	// NewSession starts the sandbox behind each session. Required;
	// cmd/airlock-server passes a closure around sandbox.NewSession.
	NewSession NewSessionFunc

	// Metrics, when set, counts the server's sessions and API requests
	// (its Sink, given to the sessions' audit, counts what they do). Nil
	// counts nothing.
	Metrics *Metrics

	// Tokens are the bearer tokens accepted, at least
	// httpauth.MinTokenLen (16) characters each, without white space.
	// Each token owns the sessions it creates. Empty is allowed only with
	// InsecureNoAuth.
	Tokens []string

	// InsecureNoAuth serves without tokens. Serve then refuses any
	// listener that is not on a loopback address. False requires Tokens.
	InsecureNoAuth bool

	// PolicyDir is the folder of named policies: a session created with
	// policy_name NAME ([a-z0-9-]+) uses PolicyDir/NAME.yaml. Empty means
	// only inline policies are accepted.
	PolicyDir string

	// Ceiling is the operator's upper bound on the session policies of
	// every token that has no ceiling of its own in TokenCeilings: each
	// policy, inline or named, must lie within it ((*policy.Policy).Within)
	// once the budgets it leaves at their defaults are lowered to the
	// ceiling's, or the session is refused with 403 exceeds_ceiling. The
	// ceiling grants nothing itself. Nil means no ceiling: an inline policy
	// may then grant no host path, network, host environment variable,
	// absolute tool path or downgrade, and budgets at most the defaults;
	// named policies are used as written.
	Ceiling *policy.Policy

	// TokenCeilings[i], when not nil, is the ceiling of Tokens[i] in place
	// of Ceiling. Nil, or shorter than Tokens, leaves the other tokens with
	// Ceiling; longer than Tokens is an error.
	TokenCeilings []*policy.Policy

	// WorkspaceDir is where each session whose policy grants no fs_write
	// of its own (inline policies only) gets a private workspace, created
	// 0700 at the start and removed at the end of the session; the
	// workspace becomes the policy's fs_write grant. New makes the
	// server's own 0700 folder in it (removed by Shutdown) for them, after
	// removing the folders of servers that were killed. A missing
	// WorkspaceDir is created 0700; an existing one must belong to the
	// server's user and be closed to others. Empty means os.TempDir().
	WorkspaceDir string

	// MaxSessions is how many live sessions one token may hold. Zero means
	// DefaultMaxSessions.
	MaxSessions int

	// Idle ends a session when no request has used it for this long. Zero
	// means DefaultIdle.
	Idle time.Duration

	// MaxUpload caps an uploaded file's body. Zero means DefaultMaxUpload.
	MaxUpload int64

	// MaxJSON caps a JSON request body (a policy included). Zero means
	// DefaultMaxJSON.
	MaxJSON int64

	// MaxTransfers is how many transfers one token may have in flight at
	// once: request bodies being received (uploads, JSON) and downloads
	// being sent. Beyond it a request is refused with 429 quota_exceeded
	// before its body is read. Zero means DefaultMaxTransfers.
	MaxTransfers int

	// MaxTransfersTotal is MaxTransfers for all tokens together; beyond it
	// a request is refused with 429 server_busy. Zero means
	// DefaultMaxTransfersTotal, or MaxTransfers if that is more.
	MaxTransfersTotal int

	// MaxTransferBytes is how many bytes one token's transfers in flight
	// may hold together: an upload counts its declared Content-Length from
	// the start (or its bytes as they arrive when it declares none), a
	// download its bytes as they are read. Uploads and downloads are
	// spooled to files in the server's folder of workspaces, never held in
	// memory; JSON bodies are held while they are decoded. Zero means
	// DefaultMaxTransferBytes, or MaxUpload or MaxJSON if more.
	MaxTransferBytes int64

	// MaxTransferBytesTotal is MaxTransferBytes for all tokens together.
	// Zero means DefaultMaxTransferBytesTotal, or MaxTransferBytes if that
	// is more.
	MaxTransferBytesTotal int64

	// MaxExecs is how many execs one session runs at once; one more is
	// refused with 429 quota_exceeded. Zero means DefaultMaxExecs.
	MaxExecs int

	// Logger receives request and session logs, with the details that
	// clients are not shown. Nil discards them.
	Logger *slog.Logger

	// Clock times idle expiry and session records. Nil means the system
	// clock. Network deadlines always use the real clock.
	Clock budget.Clock

	// AgentAdvice lets responses carry the operator's advice: an exec
	// report's "operator" field and a 403's, which name the policy change
	// that would allow each denial. Every such change widens the policy,
	// and the token holder may be an agent following an injected
	// instruction, so false, the default, removes the advice; the audit
	// log keeps it. Denials always carry their hint (what to do within
	// the grants).
	AgentAdvice bool
}

// Server serves the API. It is safe for concurrent use.
type Server struct {
	cfg       Config
	tokens    *httpauth.Tokens
	log       *slog.Logger
	clock     budget.Clock
	mux       *http.ServeMux
	ws        *workspaces
	transfers *inflight.Limiter // request bodies and downloads in flight
	baseCtx   context.Context   // sessions live at most as long as it
	cancel    context.CancelFunc
	sessionWG sync.WaitGroup // watchers of live sessions

	mu       sync.Mutex
	sessions map[string]*entry // guarded by mu; live sessions by id
	owned    map[int]int       // guarded by mu; live or starting sessions per token
	ended    tombstones        // guarded by mu
	closing  bool              // guarded by mu; set by Shutdown
	httpSrv  *http.Server      // guarded by mu; set by Serve
}

// New validates cfg and returns a server. It starts nothing but prepares
// the folder of workspaces (Config.WorkspaceDir): use Serve, or the Server
// as an http.Handler (then idle sessions end only when ExpireIdle is
// called), and call Shutdown at the end.
func New(cfg Config) (*Server, error) {
	if cfg.NewSession == nil {
		return nil, errors.New("server: new: no NewSession: set Config.NewSession")
	}
	if len(cfg.Tokens) == 0 && !cfg.InsecureNoAuth {
		return nil, errors.New("server: new: no token: give at least one token, or set InsecureNoAuth for a loopback-only server")
	}
	if cfg.MaxSessions < 0 || cfg.Idle < 0 || cfg.MaxUpload < 0 || cfg.MaxJSON < 0 || cfg.MaxExecs < 0 ||
		cfg.MaxTransfers < 0 || cfg.MaxTransfersTotal < 0 || cfg.MaxTransferBytes < 0 || cfg.MaxTransferBytesTotal < 0 {
		return nil, errors.New("server: new: negative limit: use zero for the default or a positive value")
	}
	if len(cfg.TokenCeilings) > len(cfg.Tokens) {
		return nil, fmt.Errorf("server: new: %d token ceilings for %d tokens: give at most one ceiling per token", len(cfg.TokenCeilings), len(cfg.Tokens))
	}
	tokens, err := httpauth.NewTokens(cfg.Tokens)
	if err != nil {
		return nil, fmt.Errorf("server: new: %w", err)
	}
	s := &Server{cfg: cfg, tokens: tokens, log: cfg.Logger, clock: cfg.Clock, sessions: map[string]*entry{}, owned: map[int]int{}}
	if s.cfg.MaxSessions == 0 {
		s.cfg.MaxSessions = DefaultMaxSessions
	}
	if s.cfg.Idle == 0 {
		s.cfg.Idle = DefaultIdle
	}
	if s.cfg.MaxUpload == 0 {
		s.cfg.MaxUpload = DefaultMaxUpload
	}
	if s.cfg.MaxJSON == 0 {
		s.cfg.MaxJSON = DefaultMaxJSON
	}
	if s.cfg.MaxExecs == 0 {
		s.cfg.MaxExecs = DefaultMaxExecs
	}
	if s.transfers, err = newTransfers(&s.cfg); err != nil {
		return nil, err
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.clock == nil {
		s.clock = budget.SystemClock{}
	}
	// Last, so that no earlier refusal leaves a folder behind.
	ws, swept, err := newWorkspaces(cfg.WorkspaceDir)
	if err != nil {
		return nil, err
	}
	if swept > 0 {
		s.log.Info("removed the workspaces of servers that were killed", "folders", swept)
	}
	s.ws = ws
	s.baseCtx, s.cancel = context.WithCancel(context.Background())
	if cfg.Metrics != nil {
		cfg.Metrics.registerSessions(func() float64 {
			s.mu.Lock()
			defer s.mu.Unlock()
			return float64(len(s.sessions))
		})
	}
	s.routes()
	return s, nil
}

// routes registers every endpoint, and for each path a method-less pattern
// that answers 405 in JSON for the methods it does not serve.
func (s *Server) routes() {
	s.mux = http.NewServeMux()
	type route struct {
		method string
		h      http.HandlerFunc
	}
	table := []struct {
		path   string
		routes []route
	}{
		{"/v1/health", []route{{"GET", s.health}}},
		{"/v1/openapi.yaml", []route{{"GET", s.openapi}}},
		{"/v1/sessions", []route{{"POST", s.authed(s.createSession)}, {"GET", s.authed(s.listSessions)}}},
		{"/v1/sessions/{id}", []route{{"GET", s.authed(s.sessionInfo)}, {"DELETE", s.authed(s.destroySession)}}},
		{"/v1/sessions/{id}/exec", []route{{"POST", s.authed(s.exec)}}},
		{"/v1/sessions/{id}/extend", []route{{"POST", s.authed(s.extendSession)}}},
		{"/v1/sessions/{id}/files", []route{{"GET", s.authed(s.listFiles)}}},
		{"/v1/sessions/{id}/files/{path...}", []route{{"PUT", s.authed(s.uploadFile)}, {"GET", s.authed(s.downloadFile)}, {"DELETE", s.authed(s.deleteFile)}}},
	}
	for _, p := range table {
		var allow []string
		for _, r := range p.routes {
			s.mux.HandleFunc(r.method+" "+p.path, s.cfg.Metrics.instrument(r.method+" "+p.path, r.h))
			allow = append(allow, r.method)
			if r.method == "GET" {
				allow = append(allow, "HEAD")
			}
		}
		methods := strings.Join(allow, ", ")
		s.mux.HandleFunc(p.path, func(w http.ResponseWriter, r *http.Request) {
			methodNotAllowed(w, methods, "use "+methods+" on this path")
		})
	}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, errorf(http.StatusNotFound, "not_found", "no such endpoint: see GET /v1/openapi.yaml"))
	})
}

// ServeHTTP routes r. File paths with "..", "//" or "." segments reach the
// file handlers as they were sent, so the guard refuses them with a denial;
// http.ServeMux would redirect them to some other path instead.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if id, fp, ok := uncleanFilePath(r.URL.Path); ok {
		r.SetPathValue("id", id)
		r.SetPathValue("path", fp)
		h := map[string]ownerHandler{"PUT": s.uploadFile, "GET": s.downloadFile, "HEAD": s.downloadFile, "DELETE": s.deleteFile}[r.Method]
		if h == nil {
			methodNotAllowed(w, "PUT, GET, HEAD, DELETE", "use PUT, GET or DELETE on a file")
			return
		}
		s.authed(h)(w, r)
		return
	}
	if r.URL.Path != cleanPath(r.URL.Path) {
		writeError(w, errorf(http.StatusNotFound, "not_found", "no such endpoint: the path has empty, \".\" or \"..\" segments"))
		return
	}
	s.mux.ServeHTTP(w, r)
}

// uncleanFilePath splits /v1/sessions/ID/files/PATH when PATH is one that
// http.ServeMux would redirect.
func uncleanFilePath(p string) (id, file string, ok bool) {
	rest, ok := strings.CutPrefix(p, "/v1/sessions/")
	if !ok {
		return "", "", false
	}
	id, rest, ok = strings.Cut(rest, "/")
	if !ok || id == "" || id == "." || id == ".." {
		return "", "", false
	}
	file, ok = strings.CutPrefix(rest, "files/")
	if !ok || p == cleanPath(p) {
		return "", "", false
	}
	return id, file, true
}

// cleanPath is the form http.ServeMux accepts without a redirect.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		np += "/"
	}
	return np
}

// ownerHandler is a handler for an authenticated token; owner is the
// token's index in Config.Tokens (0 without auth).
type ownerHandler func(w http.ResponseWriter, r *http.Request, owner int)

// authed checks the bearer token before h runs.
func (s *Server) authed(h ownerHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		owner, ok := s.authenticate(r)
		if !ok {
			s.log.Info("unauthorized request", "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr)
			writeError(w, errorf(http.StatusUnauthorized, "unauthorized", "missing or wrong bearer token: send Authorization: Bearer TOKEN"))
			return
		}
		h(w, r, owner)
	}
}

// authenticate returns the index of the token r carries (httpauth checks
// it in constant time), or 0 for every request of a server without tokens.
func (s *Server) authenticate(r *http.Request) (owner int, ok bool) {
	if s.cfg.InsecureNoAuth && s.tokens.Len() == 0 {
		return 0, true
	}
	return s.tokens.Match(r)
}

// Serve accepts connections on l until Shutdown. It refuses to serve
// without tokens on a listener that is not loopback. It returns
// http.ErrServerClosed after Shutdown.
func (s *Server) Serve(l net.Listener) error {
	if s.tokens.Len() == 0 && !httpauth.IsLoopback(l.Addr().String()) {
		return fmt.Errorf("server: serve: no token and %s is not a loopback address: give a token, or listen on 127.0.0.1 or [::1]", l.Addr())
	}
	hs := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return context.Background() },
	}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return http.ErrServerClosed
	}
	if s.httpSrv != nil {
		s.mu.Unlock()
		return errors.New("server: serve: already serving: call Serve once")
	}
	s.httpSrv = hs
	s.mu.Unlock()
	go s.reapIdle()
	s.log.Info("serving", "addr", l.Addr().String(), "auth", s.tokens.Len() > 0)
	return hs.Serve(l)
}

// reapIdle ends idle sessions until the server shuts down. It ticks on the
// real clock; ExpireIdle decides on Config.Clock.
func (s *Server) reapIdle() {
	every := min(max(s.cfg.Idle/4, time.Second), 30*time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.baseCtx.Done():
			return
		case <-t.C:
			s.ExpireIdle()
		}
	}
}

// Shutdown stops taking sessions, closes every live session (which ends
// their running execs), then shuts the HTTP server down gracefully within
// ctx. Sessions are closed even when ctx has ended, and their private
// workspaces removed with the server's folder of workspaces.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	live := make([]*entry, 0, len(s.sessions))
	for _, e := range s.sessions {
		live = append(live, e)
	}
	hs := s.httpSrv
	s.mu.Unlock()

	var wg sync.WaitGroup
	for _, e := range live {
		wg.Go(func() { s.end(e, endShutdown) })
	}
	wg.Wait()
	s.cancel()
	s.sessionWG.Wait()
	if err := s.ws.close(); err != nil {
		s.log.Warn("remove the workspace folder", "dir", s.ws.dir, "err", err)
	}
	s.log.Info("shut down", "sessions_closed", len(live))
	if hs == nil {
		return nil
	}
	return hs.Shutdown(ctx)
}
