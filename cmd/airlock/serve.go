package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/airlock-sandbox/airlock/server"
)

const serveSynopsis = `airlock serve [--listen ADDR] [--token-file FILE] [flags]

Serves the HTTP API: sessions (one policy and one sandbox each), exec with
streamed output, and files in and out through the in-process guard. Every
request needs "Authorization: Bearer TOKEN"; the tokens come from
--token-file (one per line) or AIRLOCK_TOKEN. The bound address is printed
on stderr as "airlock serve: listening on http://ADDR". SIGTERM or SIGINT
closes every session and stops the server. The API is described at
GET /v1/openapi.yaml.

File descriptors: a quarter of RLIMIT_NOFILE (at least 256) is kept for
the API; the rest is shared evenly by the most sessions that can be live
(--max-sessions per token), and caps the connections each session's
sandbox may hold to its egress proxy (2 fds each). The split is logged at
start; serve refuses to start when a session would get fewer than 16.

examples:
  AIRLOCK_TOKEN=$(head -c 24 /dev/urandom | base64) airlock serve --listen 127.0.0.1:8080
  airlock serve --listen 0.0.0.0:8080 --token-file /etc/airlock/tokens --policy-dir /etc/airlock/policies`

// serveShutdownGrace bounds the graceful HTTP shutdown after the sessions
// are closed.
const serveShutdownGrace = 10 * time.Second

func cmdServe(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("serve", serveSynopsis, stderr)
	listen := fs.String("listen", "127.0.0.1:8080", "`ADDR` to listen on (port 0 picks a free port)")
	tokenFile := fs.String("token-file", "", "`FILE` of bearer tokens, one per line (default: $AIRLOCK_TOKEN)")
	noAuth := fs.Bool("insecure-no-auth", false, "serve without a token (only on a loopback address)")
	policyDir := fs.String("policy-dir", "", "`DIR` of named policies: policy_name NAME uses DIR/NAME.yaml")
	maxSessions := fs.Int("max-sessions", server.DefaultMaxSessions, "live sessions per token")
	idle := fs.Duration("idle", server.DefaultIdle, "end a session after this long without a request")
	maxBody := fs.String("max-body", "32MiB", "largest file upload, e.g. 32MiB")
	auditFile := fs.String("audit", "", "append audit events (JSON lines) to `FILE`")
	fsAudit := fs.Bool("fs-audit", false, "itemize filesystem denials in reports from Landlock audit records (root, Linux 6.15+; turns the host's audit subsystem on while sessions run)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "airlock serve: "+format+"\n", a...)
		return 1
	}
	if fs.NArg() > 0 {
		return fail("unexpected argument %q: serve takes only flags", fs.Arg(0))
	}
	maxUpload, err := policy.ParseSize(*maxBody)
	if err != nil || maxUpload <= 0 {
		return fail("--max-body %q: give a positive size such as 32MiB", *maxBody)
	}
	if *maxSessions <= 0 || *idle <= 0 {
		return fail("--max-sessions and --idle must be positive")
	}
	tokens, err := serveTokens(*tokenFile, os.Getenv("AIRLOCK_TOKEN"))
	switch {
	case err != nil:
		return fail("%v", err)
	case len(tokens) > 0 && *noAuth:
		return fail("a token and --insecure-no-auth were both given: choose one")
	case len(tokens) == 0 && !*noAuth:
		return fail("no token: give --token-file FILE or set AIRLOCK_TOKEN (or --insecure-no-auth on a loopback address)")
	}
	dir := *policyDir
	if dir != "" {
		if dir, err = filepath.Abs(dir); err != nil {
			return fail("--policy-dir: %v", err)
		}
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			return fail("--policy-dir %s is not a readable folder: give the folder holding NAME.yaml files", dir)
		}
	}

	nofile, err := nofileLimit()
	if err != nil {
		return fail("%v", err)
	}
	quota, err := serveFDQuota(nofile, *maxSessions*max(1, len(tokens)))
	if err != nil {
		return fail("%v", err)
	}

	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	log.Info("file descriptors", "nofile", quota.nofile, "api_reserve", quota.reserve, "sessions", quota.sessions, "proxy_conns_per_session", quota.conns)
	var sink audit.Sink
	if *auditFile != "" {
		f, err := os.OpenFile(*auditFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return fail("--audit: %v", err)
		}
		defer f.Close()
		sink = audit.NewJSONL(f)
	}
	srv, err := server.New(server.Config{
		NewSession:     serveNewSession(sandbox.Config{Logger: log, Audit: sink, FSAudit: *fsAudit, MaxProxyConns: quota.conns}),
		Tokens:         tokens,
		InsecureNoAuth: *noAuth,
		PolicyDir:      dir,
		MaxSessions:    *maxSessions,
		Idle:           *idle,
		MaxUpload:      maxUpload,
		Logger:         log,
	})
	if err != nil {
		return fail("%v", err)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fail("listen: %v", err)
	}
	fmt.Fprintf(stderr, "airlock serve: listening on http://%s\n", ln.Addr())

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		// Serve failed before any shutdown; close the sessions it made.
		_ = srv.Shutdown(context.Background()) // the Serve error is the one to report
		return fail("serve: %v", err)
	case <-ctx.Done():
	}
	stop()
	fmt.Fprintln(stderr, "airlock serve: shutting down: closing every session")
	sctx, cancel := context.WithTimeout(context.Background(), serveShutdownGrace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fail("shutdown: %v", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return fail("serve: %v", err)
	}
	return 0
}

// serveTokens reads the token file (one token per line; blank lines and
// lines starting with # are skipped) or, without one, the env token.
func serveTokens(file, env string) ([]string, error) {
	if file == "" {
		if env = strings.TrimSpace(env); env != "" {
			return []string{env}, nil
		}
		return nil, nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("--token-file: %w", err)
	}
	var tokens []string
	for line := range strings.Lines(string(data)) {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "#") {
			tokens = append(tokens, line)
		}
	}
	if len(tokens) == 0 {
		return nil, fmt.Errorf("--token-file %s holds no token: put one token per line", file)
	}
	return tokens, nil
}

// serveNewSession starts real sandbox sessions for the server, with base's
// settings and the session's policy.
func serveNewSession(base sandbox.Config) server.NewSessionFunc {
	return func(ctx context.Context, p *policy.Policy) (server.Session, error) {
		cfg := base
		cfg.Policy = p
		s, err := sandbox.NewSession(ctx, cfg)
		if err != nil {
			return nil, err
		}
		return serveSession{s}, nil
	}
}

// serveSession adapts *sandbox.Session to server.Session. The server does
// not import sandbox (it would reach internal/enforce), so the conversions
// live here; ExecRequest and Usage convert directly because their fields
// are the same, which the compiler checks.
type serveSession struct{ *sandbox.Session }

func (s serveSession) Exec(ctx context.Context, req server.ExecRequest) (json.RawMessage, error) {
	rep, err := s.Session.Exec(ctx, sandbox.ExecRequest(req))
	if errors.Is(err, sandbox.ErrSessionClosed) {
		return nil, fmt.Errorf("%w: %w", server.ErrSessionClosed, err)
	}
	if err != nil {
		return nil, err
	}
	return json.Marshal(rep)
}

func (s serveSession) Info() server.Info {
	i := s.Session.Info()
	pending := make([]server.Denial, 0, len(i.PendingDenials))
	for _, d := range i.PendingDenials {
		pending = append(pending, server.Denial(d))
	}
	return server.Info{ID: i.ID, Created: i.Created, Deadline: i.Deadline, Workspace: i.Workspace, Usage: server.Usage(i.Usage), Execs: i.Execs,
		PendingDenials: pending, DenialCounts: server.DenialCounts(i.DenialCounts)}
}
