package mcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/internal/httpauth"
	"github.com/airlock-sandbox/airlock/internal/inflight"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
)

// Config describes one MCP server. The zero Config is invalid: New needs a
// Policy.
type Config struct {
	// Policy is what every sandbox session of this server grants. Required.
	Policy *policy.Policy

	// NewSession starts the sandbox behind each MCP session. Required;
	// cmd/airlock-server passes a closure around sandbox.NewSession, giving it
	// the same Audit sink.
	NewSession NewSessionFunc

	// Audit receives the refusals this package makes itself (the sandbox
	// and its guard emit to the sink NewSession gives them). Nil discards
	// them; tool results carry the denials either way.
	Audit audit.Sink

	// Clock times audit events and session_info's seconds_left. Nil means
	// the system clock.
	Clock budget.Clock

	// Logger receives operational messages, including the details of
	// failures that the model only sees as a public message. Nil discards
	// them.
	Logger *slog.Logger

	// Dir is the working directory of run inside the sandbox. Empty means
	// the session's workspace (the first fs_write grant), else /tmp.
	Dir string

	// MaxSessions bounds the sandbox sessions alive at once, across all
	// MCP client sessions. Zero means 8.
	MaxSessions int

	// Tokens are the bearer tokens Handler accepts, at least
	// httpauth.MinTokenLen characters each, without white space. Each is a
	// tenant: the MCP sessions it creates are its own, invisible to the
	// others. Empty serves HTTP only with InsecureNoAuth; ServeIO needs
	// none.
	Tokens []string

	// InsecureNoAuth lets Handler serve without tokens, every client then
	// being one tenant. The caller must listen on a loopback address.
	InsecureNoAuth bool

	// MaxSessionsPerToken bounds the sandboxes one token's MCP sessions
	// hold at once, so that no token takes every slot of MaxSessions. Zero
	// means MaxSessions shared evenly among the tokens (at least 1).
	MaxSessionsPerToken int

	// MaxClientsPerToken bounds the MCP sessions one token holds at once
	// over HTTP (each holds at most one sandbox); one more is refused with
	// 429 until one ends or idles out. Zero means twice
	// MaxSessionsPerToken.
	MaxClientsPerToken int

	// ProgressInterval is how often run notifies progress to a client
	// that sent a progress token. Zero means DefaultProgressInterval.
	ProgressInterval time.Duration

	// IdleTimeout closes an HTTP client session, and its sandbox, after
	// this long without a request. Zero means 10 minutes. Stdio sessions
	// end with their transport.
	IdleTimeout time.Duration

	// Version is reported to clients as the server's version. Empty means
	// "dev".
	Version string

	// AgentAdvice lets tool results carry the operator's advice: the
	// policy change that would allow each denial (a report's operator
	// field, the operator field of a refused file tool, and "to allow it"
	// in the text). Every such change widens the policy, and the agent
	// reading the result may be following an injected instruction, so
	// false, the default, leaves the advice to the audit log. Denials
	// always carry their hint (what to do within the grants).
	AgentAdvice bool
}

// Server is an MCP server whose tools act inside airlock sandboxes. It is
// safe for concurrent use; use New.
type Server struct {
	cfg Config
	// view is the policy as the sandbox sees it (placed grants at their
	// places): what the agent is told and the paths its tools take.
	view   *policy.Policy
	log    *slog.Logger
	sdkLog *slog.Logger // log without MCP session ids, for the SDK
	sink   audit.Sink
	clock  budget.Clock
	srv    *sdk.Server

	tokens    *httpauth.Tokens  // nil without tokens
	perToken  int               // sandboxes per token
	perClient int               // MCP sessions per token
	bodies    *inflight.Limiter // HTTP request bodies being read

	// base outlives requests: sessions are started with it so that they end
	// at Close or their deadline, not when the first tool call returns.
	base   context.Context
	cancel context.CancelFunc

	mu        sync.Mutex
	slots     map[*sdk.ServerSession]*slot // guarded by mu
	starting  int                          // sandboxes being started, guarded by mu
	open      int                          // sandboxes started and not closed, guarded by mu
	closed    bool                         // guarded by mu
	owners    map[string]int               // guarded by mu; HTTP MCP session id → token index
	pending   map[int]int                  // guarded by mu; MCP sessions being created, by token
	sandboxes map[int]int                  // guarded by mu; sandboxes open or starting, by token

	// reaping counts the goroutines that close a sandbox when its client's
	// transport ends; Close waits for them, so the process does not exit
	// while a sandbox is still copying its writes back.
	reaping sync.WaitGroup
}

// slot holds the sandbox of one MCP client session, started on first use.
type slot struct {
	mu    sync.Mutex
	s     Session // nil until started; guarded by mu
	owner int     // the token whose sandbox it is; -1 for none (stdio); guarded by mu
}

// New validates cfg and returns a server. It starts no sandbox: each MCP
// client session starts its own at its first tool call.
func New(cfg Config) (*Server, error) {
	if cfg.Policy == nil {
		return nil, errors.New("mcp: new: no policy: set Config.Policy")
	}
	if cfg.NewSession == nil {
		return nil, errors.New("mcp: new: no NewSession: set Config.NewSession")
	}
	if cfg.MaxSessions < 0 || cfg.MaxSessionsPerToken < 0 || cfg.MaxClientsPerToken < 0 {
		return nil, errors.New("mcp: new: a session limit is negative: give a positive number or zero for the default")
	}
	if cfg.MaxSessions == 0 {
		cfg.MaxSessions = 8
	}
	if len(cfg.Tokens) > 0 && cfg.InsecureNoAuth {
		return nil, errors.New("mcp: new: tokens and InsecureNoAuth were both given: choose one")
	}
	tokens, err := httpauth.NewTokens(cfg.Tokens)
	if err != nil {
		return nil, fmt.Errorf("mcp: new: %w", err)
	}
	perToken := cfg.MaxSessionsPerToken
	if perToken == 0 {
		perToken = max(1, cfg.MaxSessions/max(1, len(cfg.Tokens)))
	}
	perClient := cfg.MaxClientsPerToken
	if perClient == 0 {
		perClient = 2 * perToken
	}
	bodies, err := inflight.New(inflight.Limits{PerTenant: BodiesPerToken, Total: BodiesTotal})
	if err != nil {
		return nil, fmt.Errorf("airlock bug: mcp: new: %w", err)
	}
	if cfg.ProgressInterval <= 0 {
		cfg.ProgressInterval = DefaultProgressInterval
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = 10 * time.Minute
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	s := &Server{
		cfg:       cfg,
		log:       cfg.Logger,
		sink:      cfg.Audit,
		slots:     make(map[*sdk.ServerSession]*slot),
		tokens:    tokens,
		perToken:  perToken,
		perClient: perClient,
		bodies:    bodies,
		owners:    map[string]int{},
		pending:   map[int]int{},
		sandboxes: map[int]int{},
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.sdkLog = slog.New(hideIDs{s.log.Handler()})
	if s.sink == nil {
		s.sink = audit.Discard
	}
	if s.clock = cfg.Clock; s.clock == nil {
		s.clock = budget.SystemClock{}
	}
	s.base, s.cancel = context.WithCancel(context.Background())
	s.view = cfg.Policy.View()
	s.srv = sdk.NewServer(&sdk.Implementation{Name: "airlock", Title: "airlock sandbox", Version: cfg.Version}, &sdk.ServerOptions{
		Instructions: instructions(s.view),
		Logger:       s.sdkLog,
		Capabilities: &sdk.ServerCapabilities{Tools: &sdk.ToolCapabilities{}},
	})
	s.addTools()
	return s, nil
}

// ServeIO serves one MCP client over newline-delimited JSON-RPC on in and
// out (stdio for `airlock mcp`) until the client disconnects or ctx ends,
// then closes the server and its sandbox.
func (s *Server) ServeIO(ctx context.Context, in io.Reader, out io.Writer) error {
	defer s.Close()
	t := &sdk.IOTransport{Reader: io.NopCloser(in), Writer: nopWriteCloser{out}}
	err := s.srv.Run(ctx, t)
	if errors.Is(err, io.EOF) || errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// Close ends every sandbox session and refuses new ones. It is idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	slots := s.slots
	s.slots = make(map[*sdk.ServerSession]*slot)
	s.mu.Unlock()
	s.cancel()
	var errs []error
	for _, sl := range slots {
		errs = append(errs, s.closeSlot(sl))
	}
	s.reaping.Wait()
	return errors.Join(errs...)
}

// errServerClosed is returned to tool calls that arrive after Close.
var errServerClosed = errors.New("the airlock server is shutting down: no new sandbox can start")

// errTooMany is returned when MaxSessions sandboxes are already alive.
var errTooMany = errors.New("too many sandbox sessions are open on this server: end another MCP session and retry")

// errTokenFull is returned when the token's MCP sessions hold
// MaxSessionsPerToken sandboxes already.
var errTokenFull = errors.New("this token's MCP sessions already hold as many sandboxes as it may have: end one of those sessions and retry")

// errNoSandbox is the public message when a sandbox cannot start; the
// reason, which may name host paths, goes to the log only.
var errNoSandbox = errors.New("the sandbox could not start on this host (nothing ran); the operator's log has the reason")

// current returns the sandbox of ss if it has started, else nil. It never
// starts one.
func (s *Server) current(ss *sdk.ServerSession) Session {
	s.mu.Lock()
	sl := s.slots[ss]
	s.mu.Unlock()
	if sl == nil {
		return nil
	}
	sl.mu.Lock()
	defer sl.mu.Unlock()
	return sl.s
}

// sandboxFor returns the sandbox of the MCP session ss, starting it with the
// policy on first use. A failed start is not remembered: the next call
// tries again.
func (s *Server) sandboxFor(ss *sdk.ServerSession) (Session, error) {
	owner := s.ownerOf(ss)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errServerClosed
	}
	sl := s.slots[ss]
	if sl == nil {
		sl = &slot{owner: owner}
		s.slots[ss] = sl
		if ss != nil {
			s.reaping.Add(1)
			go s.reap(ss)
		}
	}
	s.mu.Unlock()

	sl.mu.Lock()
	defer sl.mu.Unlock()
	if sl.s != nil {
		return sl.s, nil
	}
	s.mu.Lock()
	if s.open+s.starting >= s.cfg.MaxSessions {
		s.mu.Unlock()
		return nil, errTooMany
	}
	if sl.owner >= 0 && s.sandboxes[sl.owner] >= s.perToken {
		s.mu.Unlock()
		return nil, errTokenFull
	}
	s.starting++
	s.sandboxes[sl.owner]++
	s.mu.Unlock()

	sess, err := s.cfg.NewSession(s.base, s.cfg.Policy)
	if err == nil && sess == nil {
		err = errors.New("airlock bug: mcp: NewSession returned neither a session nor an error")
	}

	s.mu.Lock()
	s.starting--
	stale := s.closed || s.slots[ss] != sl
	if err == nil && !stale {
		s.open++
	} else {
		s.dropSandboxLocked(sl.owner)
	}
	s.mu.Unlock()
	if err != nil {
		s.log.Error("mcp: start sandbox session", "error", err)
		return nil, errNoSandbox
	}
	if stale {
		// Close or the transport's end raced with the start.
		sess.Close()
		return nil, errServerClosed
	}
	s.log.Info("mcp: sandbox session started", "session", sess.ID())
	sl.s = sess
	return sess, nil
}

// reap closes the sandbox of ss once its transport ends.
func (s *Server) reap(ss *sdk.ServerSession) {
	defer s.reaping.Done()
	waited := make(chan struct{})
	go func() {
		ss.Wait()
		close(waited)
	}()
	select {
	case <-waited:
	case <-s.base.Done():
		return // Close took every slot and closes them itself
	}
	s.mu.Lock()
	sl := s.slots[ss]
	delete(s.slots, ss)
	s.mu.Unlock()
	if sl != nil {
		if err := s.closeSlot(sl); err != nil {
			s.log.Error("mcp: close sandbox session", "error", err)
		}
	}
}

// closeSlot ends the slot's sandbox, if any.
func (s *Server) closeSlot(sl *slot) error {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if sl.s == nil {
		return nil
	}
	err := sl.s.Close()
	sl.s = nil
	s.mu.Lock()
	s.open--
	s.dropSandboxLocked(sl.owner)
	s.mu.Unlock()
	return err
}

// dropSandboxLocked uncounts a sandbox of owner. s.mu is held.
func (s *Server) dropSandboxLocked(owner int) {
	if s.sandboxes[owner]--; s.sandboxes[owner] <= 0 {
		delete(s.sandboxes, owner)
	}
}
