package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/internal/cli"
	"github.com/airlock-sandbox/airlock/internal/httpauth"
	"github.com/airlock-sandbox/airlock/internal/termtext"
	"github.com/airlock-sandbox/airlock/mcp"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/sandbox"
)

const mcpSynopsis = `airlock mcp [--policy FILE] [flags] [--listen ADDR [--token-file FILE | --insecure-no-auth]]

Serves the MCP tools run, read_file, write_file, list_files, session_info
and extend_session to an AI agent. Every tool acts inside one sandbox per MCP
session, started at the session's first tool call with the policy (the file
plus the flags) and closed when the session ends: at --session-lifetime
unless the agent extends it. extend_session {"by": "30m"} moves the end 30
minutes past the current end, never past --session-max-lifetime.

Without --listen it speaks MCP over stdin/stdout, for one client. With
--listen it serves streamable HTTP at ADDR and needs a bearer token (at
least 16 characters) from $AIRLOCK_TOKEN or --token-file, which is read as
airlock serve reads it: one token per line, blank lines and lines starting
with # skipped; a file holding one token is such a file. Without a token
it serves only with --insecure-no-auth and on a loopback address.

Over HTTP each token is a tenant. An MCP session belongs to the token that
created it: another token presenting its Mcp-Session-Id gets the answer of
an unknown id, and the log shows sessions only by a short hash of their
id. A token holds at most --max-sessions-per-token sandboxes (default: an
even share of --max-sessions) and --max-clients-per-token MCP sessions
(default: twice that); one more is refused (a tool error, or 429 at
connect) until one ends or idles out. At most 8 request bodies of a token,
32 of all clients, each at most 4 MiB, are read at once; more get 429.

Advice is the operator's. A denial in a tool result says what was refused
and why, and what the agent can do within its grants (its hint). The
policy change that would allow it (add "evil.example:443" to net_hosts)
widens the policy, and the agent may be following an instruction injected
into what it read: that advice goes to the audit log (--audit) only,
unless --agent-advice passes it on in results ("operator" and the text)
and in the egress proxy's refusals.

examples:
  airlock mcp --fs-write ./work --tool python3
  AIRLOCK_TOKEN=$(head -c 24 /dev/urandom | base64) airlock mcp --policy agent.yaml --listen 127.0.0.1:8808`

func cmdMCP(args []string, stdout, stderr io.Writer) int {
	fs := cli.NewFlagSet("mcp", mcpSynopsis, stderr)
	var pf cli.PolicyFlags
	pf.Register(fs)
	listen := fs.String("listen", "", "serve streamable HTTP on `ADDR` (host:port) instead of stdio")
	tokenFile := fs.String("token-file", "", "read the HTTP bearer tokens from `FILE`, one per line (default: $AIRLOCK_TOKEN)")
	noAuth := fs.Bool("insecure-no-auth", false, "serve HTTP without a token; only on a loopback ADDR")
	maxSessions := fs.Int("max-sessions", 0, "sandboxes alive at once across HTTP clients (default 8); a client beyond it is refused until one ends")
	perToken := fs.Int("max-sessions-per-token", 0, "HTTP: sandboxes one token's MCP sessions may hold at once (default: --max-sessions shared evenly among the tokens, at least 1)")
	perClient := fs.Int("max-clients-per-token", 0, "HTTP: MCP sessions one token may hold at once (default: twice --max-sessions-per-token)")
	idle := fs.Duration("idle", 10*time.Minute, "HTTP: end a client's session, and its sandbox, after this long without a request (a client that crashed holds its slot until then)")
	lifetime := fs.Duration("session-lifetime", sandbox.DefaultSessionLifetime, "end a sandbox this long after its start unless the agent extends it (extend_session); max_wall bounds each run")
	maxLifetime := fs.Duration("session-max-lifetime", sandbox.DefaultSessionMaxLifetime, "the latest end extend_session can give a sandbox, from its start")
	progress := fs.Duration("progress-interval", mcp.DefaultProgressInterval, "how often run reports progress to a client that asked for it")
	logFormat := fs.String("log-format", "text", "`FORMAT` of the log on stderr: text, or json (one object a line, with the run id of each sandbox's records)")
	auditFile := fs.String("audit", "", "append every audit event as JSON lines to `FILE` (mode 0600)")
	fsAudit := fs.Bool("fs-audit", false, "itemize filesystem denials in results from Landlock audit records (root, Linux 6.15+; turns the host's audit subsystem on while sessions run)")
	agentAdvice := fs.Bool("agent-advice", false, "give the agent the operator's advice: the policy change that would allow each denial (default: the audit log only, see above)")
	warmPool := fs.Int("warm-pool", 1, fmt.Sprintf("keep `N` sandbox inits started ahead of need, so that a session's sandbox starts in a few milliseconds (0 to %d; see airlock serve --help)", sandbox.MaxPoolSize))
	if err := cli.Parse(fs, args, stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0 // -h and --help print the usage and succeed
		}
		return cli.ExitUsage
	}
	logger, err := cli.NewLoggerFormat(stderr, *logFormat)
	if err != nil {
		fmt.Fprintf(stderr, "airlock mcp: %s\n", cli.ErrText(err))
		return cli.ExitFailed
	}
	// With --log-format json every line on stderr is a log record.
	fail := func(format string, a ...any) int {
		if *logFormat == "json" {
			logger.Error(fmt.Sprintf(format, a...))
		} else {
			fmt.Fprintf(stderr, "airlock mcp: "+format+"\n", cli.EscapeArgs(a)...)
		}
		return cli.ExitFailed
	}
	if fs.NArg() > 0 {
		return fail("unexpected arguments %q: the agent sends commands through the run tool", fs.Args())
	}
	p, err := pf.Build()
	if err != nil {
		return fail("%v", err)
	}
	dir, err := pf.Cwd(p)
	if err != nil {
		return fail("%v", err)
	}
	var sink audit.Sink = audit.Discard
	if *auditFile != "" {
		f, err := os.OpenFile(*auditFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return fail("--audit: %v", err)
		}
		defer f.Close()
		sink = audit.NewJSONL(termtext.NewJSONWriter(f))
	}
	if *idle <= 0 || *lifetime <= 0 || *maxLifetime < *lifetime || *progress <= 0 {
		return fail("--idle, --session-lifetime and --progress-interval must be positive, and --session-lifetime at most --session-max-lifetime")
	}
	if *warmPool < 0 || *warmPool > sandbox.MaxPoolSize {
		return fail("--warm-pool %d: give 0 to %d", *warmPool, sandbox.MaxPoolSize)
	}
	if *maxSessions < 0 || *perToken < 0 || *perClient < 0 {
		return fail("--max-sessions, --max-sessions-per-token and --max-clients-per-token must be positive (or 0 for the default)")
	}
	var tokens []string
	if *listen == "" {
		if *tokenFile != "" || *noAuth {
			return fail("--token-file and --insecure-no-auth apply only with --listen")
		}
	} else if tokens, err = mcpTokens(*listen, *tokenFile, *noAuth); err != nil {
		return fail("%v", err)
	}
	var pool *sandbox.Pool
	if *warmPool > 0 {
		if pool, err = sandbox.NewPool(sandbox.PoolConfig{Size: *warmPool, Logger: logger}); err != nil {
			return fail("--warm-pool: %v", err)
		}
		defer pool.Close()
	}
	cfg := mcp.Config{Policy: p, Dir: dir, MaxSessions: *maxSessions, Version: cli.Version, Logger: logger, Audit: sink, AgentAdvice: *agentAdvice,
		IdleTimeout: *idle, ProgressInterval: *progress,
		Tokens: tokens, InsecureNoAuth: *noAuth, MaxSessionsPerToken: *perToken, MaxClientsPerToken: *perClient,
		NewSession: func(ctx context.Context, p *policy.Policy) (mcp.Session, error) {
			s, err := sandbox.NewSession(ctx, sandbox.Config{Policy: p, Audit: sink, Logger: logger, FSAudit: *fsAudit, AgentAdvice: *agentAdvice,
				SessionLifetime: *lifetime, SessionMaxLifetime: *maxLifetime, Pool: pool})
			if err != nil {
				return nil, err // not a nil *sandbox.Session in a non-nil interface
			}
			return s, nil
		}}
	srv, err := mcp.New(cfg)
	if err != nil {
		return fail("%v", err)
	}
	defer srv.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if *listen == "" {
		if err := srv.ServeIO(ctx, os.Stdin, stdout); err != nil {
			return fail("%v", err)
		}
		return cli.ExitOK
	}

	h := srv.Handler()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fail("listen: %v", err)
	}
	if *noAuth && !httpauth.IsLoopback(ln.Addr().String()) {
		ln.Close()
		return fail("--insecure-no-auth: %s resolved to %s, which is not a loopback address: listen on 127.0.0.1 or [::1]", *listen, ln.Addr())
	}
	cli.Sayer("airlock mcp", *logFormat, stderr, logger)(slog.LevelInfo, fmt.Sprintf("serving MCP (streamable HTTP) on http://%s", ln.Addr()), "url", "http://"+ln.Addr().String())
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 64 << 10}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		hs.Shutdown(shutdown) // a failed graceful shutdown ends with Serve returning anyway
	}()
	if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return fail("serve: %v", err)
	}
	return cli.ExitOK
}

// mcpTokens returns the bearer tokens of airlock mcp --listen, or refuses
// to serve without one unless the operator opted out on a loopback
// address. The tokens come from the token file, in the format airlock serve
// reads (one per line, # comments; a file holding a single token is one
// such line), else from AIRLOCK_TOKEN. Errors never show a token.
func mcpTokens(addr, tokenFile string, noAuth bool) ([]string, error) {
	entries, err := serveTokens(tokenFile, os.Getenv("AIRLOCK_TOKEN"))
	if err != nil {
		return nil, err
	}
	list := make([]string, len(entries))
	for i, e := range entries {
		if e.ceiling != "" {
			return nil, fmt.Errorf("--token-file %s line %d: airlock mcp has one policy and no ceilings: remove ceiling=", tokenFile, e.line)
		}
		list[i] = e.token
	}
	switch {
	case len(list) > 0 && noAuth:
		return nil, errors.New("a token and --insecure-no-auth were both given: choose one")
	case len(list) > 0:
		if _, err := httpauth.NewTokens(list); err != nil {
			return nil, fmt.Errorf("bearer token: %w", err)
		}
		return list, nil
	case !noAuth:
		return nil, errors.New("--listen needs a bearer token: give --token-file FILE or set AIRLOCK_TOKEN (or --insecure-no-auth on a loopback address)")
	case !httpauth.IsLoopback(addr):
		return nil, fmt.Errorf("--insecure-no-auth on %q: only loopback addresses (127.0.0.1, ::1, localhost) may serve without a token", addr)
	}
	return nil, nil
}
