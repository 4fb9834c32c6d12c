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
	"path/filepath"
	"strings"
	"syscall"
	"time"
	"unicode"

	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/internal/cli"
	"github.com/airlock-sandbox/airlock/internal/termtext"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/airlock-sandbox/airlock/server"
)

const serveSynopsis = `airlock serve [--listen ADDR] [--token-file FILE] [--ceiling FILE] [flags]

Serves the HTTP API: sessions (one policy and one sandbox each), exec with
streamed output, and files in and out through the in-process guard. Every
request needs "Authorization: Bearer TOKEN"; the tokens come from
--token-file or AIRLOCK_TOKEN. The bound address is printed on stderr as
"airlock serve: listening on http://ADDR". SIGTERM or SIGINT closes every
session and stops the server. The API is described at GET /v1/openapi.yaml.

Token holders are tenants, not operators. The ceiling (--ceiling, a policy
file) is the upper bound of every session policy, inline or named: paths
within its paths, hosts within its hosts, tools among its tools, env
pass-through among its env, budgets at most its budgets, downgrades among
its downgrades; anything more is refused with 403 exceeds_ceiling, naming
each grant. Budgets a policy does not set are lowered to the ceiling's.
The ceiling grants nothing by itself.

Without a ceiling, an inline policy may grant no host path, no network, no
pass-through of the server's environment (NAME=value is fine), no absolute
tool path (bare names, looked up in /usr/local/bin, /usr/bin and /bin, are
fine), no downgrade, and budgets at most the defaults. Named policies from
--policy-dir are the operator's and are used as written.

A session whose inline policy grants no fs_write gets a private workspace:
a new 0700 folder that is its fs_write grant, the "workspace" of the
session JSON, the base of relative file paths and the working directory of
its execs; it is removed when the session ends. The workspaces live in the
server's own 0700 folder in --workspace-dir, removed at exit; the folders of
killed servers are removed by the next server using that --workspace-dir.

Advice is the operator's. A denial in a report or a 403 says what was
refused and why, and what the program can do within its grants (its
hint). The policy change that would allow it (add "evil.example:443" to
net_hosts) widens the policy, and a token holder may be an agent following
an instruction injected into what it read: that advice goes to the audit
log (--audit) only, unless --agent-advice passes it on in the report's and
the 403's "operator" field and in the egress proxy's refusals.

The token file holds one token per line; blank lines and lines starting
with # are skipped. A line "TOKEN ceiling=FILE" gives that token its own
ceiling in place of --ceiling (FILE relative to the token file's folder).

What clients hold in the server is bounded, per token and in total: the
server runs outside every sandbox's cgroup, so what one client makes it
hold, every client shares. Request bodies being received (uploads and
JSON) and downloads being sent are transfers: at most --max-transfers per
token and --max-transfers-total in all, holding at most
--max-transfer-bytes per token and --max-transfer-bytes-total in all (an
upload counts its Content-Length from the start). Beyond a token's limit a
request gets 429 quota_exceeded before its body is read, beyond the
server's 429 server_busy with Retry-After. Uploads and downloads pass
through unlinked files in the server's folder in --workspace-dir, never
its memory, so that folder's disk holds up to --max-transfer-bytes-total;
an upload reaches the session only once it has arrived whole. Each session
runs at most --max-execs execs at once. File paths must be printable UTF-8.

File descriptors: a quarter of RLIMIT_NOFILE (at least 256) is kept for
the API; the rest is shared evenly by the most sessions that can be live
(--max-sessions per token), and caps the connections each session's
sandbox may hold to its egress proxy (2 fds each). The split is logged at
start; serve refuses to start when a session would get fewer than 16.

examples:
  AIRLOCK_TOKEN=$(head -c 24 /dev/urandom | base64) airlock serve --listen 127.0.0.1:8080
  airlock serve --listen 0.0.0.0:8080 --token-file /etc/airlock/tokens --ceiling /etc/airlock/ceiling.yaml --policy-dir /etc/airlock/policies`

// serveShutdownGrace bounds the graceful HTTP shutdown after the sessions
// are closed.
const serveShutdownGrace = 10 * time.Second

func cmdServe(args []string, stdout, stderr io.Writer) int {
	fs := cli.NewFlagSet("serve", serveSynopsis, stderr)
	listen := fs.String("listen", "127.0.0.1:8080", "`ADDR` to listen on (port 0 picks a free port)")
	tokenFile := fs.String("token-file", "", "`FILE` of bearer tokens, one per line (default: $AIRLOCK_TOKEN)")
	noAuth := fs.Bool("insecure-no-auth", false, "serve without a token (only on a loopback address)")
	policyDir := fs.String("policy-dir", "", "`DIR` of named policies: policy_name NAME uses DIR/NAME.yaml")
	ceilingFile := fs.String("ceiling", "", "policy `FILE` that bounds every session policy of tokens without their own ceiling (default: no ceiling, see above)")
	workspaceDir := fs.String("workspace-dir", "", "`DIR` for the sessions' private workspaces, created 0700 if missing (default: $TMPDIR)")
	maxSessions := fs.Int("max-sessions", server.DefaultMaxSessions, "live sessions per token")
	idle := fs.Duration("idle", server.DefaultIdle, "end a session after this long without a request")
	lifetime := fs.Duration("session-lifetime", sandbox.DefaultSessionLifetime, "end a session this long after its start unless a client extends it (POST /v1/sessions/{id}/extend); the policy's max_wall bounds each exec")
	maxLifetime := fs.Duration("session-max-lifetime", sandbox.DefaultSessionMaxLifetime, "the latest end an extension can give a session, counted from its start")
	maxBody := fs.String("max-body", "32MiB", "largest file upload, e.g. 32MiB")
	maxTransfers := fs.Int("max-transfers", server.DefaultMaxTransfers, "request bodies and downloads one token may have in flight at once (see above)")
	maxTransfersTotal := fs.Int("max-transfers-total", server.DefaultMaxTransfersTotal, "request bodies and downloads in flight at once, all tokens together")
	maxTransferBytes := fs.String("max-transfer-bytes", "256MiB", "bytes one token's transfers in flight may hold together; at least --max-body (unset: 256MiB, or --max-body if more)")
	maxTransferBytesTotal := fs.String("max-transfer-bytes-total", "1GiB", "bytes all transfers in flight may hold together, on the disk of --workspace-dir (unset: 1GiB, or --max-transfer-bytes if more)")
	maxExecs := fs.Int("max-execs", server.DefaultMaxExecs, "execs one session runs at once")
	metricsListen := fs.String("metrics-listen", "", "serve Prometheus metrics at http://`ADDR`/metrics, without a token (bind it where only your Prometheus reaches: it counts every tenant's sessions); default: no metrics")
	logFormat := fs.String("log-format", "text", "`FORMAT` of the log on stderr: text, or json (one object a line, with the run id of each sandbox's records)")
	auditFile := fs.String("audit", "", "append audit events (JSON lines) to `FILE`")
	fsAudit := fs.Bool("fs-audit", false, "itemize filesystem denials in reports from Landlock audit records (root, Linux 6.15+; turns the host's audit subsystem on while sessions run)")
	var downgrades cli.CommaListFlag
	fs.Var(&downgrades, "allow-downgrade", "accept, for every session, running without `LAYER` where this host lacks it (max_memory, max_pids, ...; repeatable or comma-separated): the operator's choice, beyond any ceiling; each report says what ran without")
	agentAdvice := fs.Bool("agent-advice", false, "give clients the operator's advice: the policy change that would allow each denial (default: the audit log only, see above)")
	warmPool := fs.Int("warm-pool", 2, fmt.Sprintf("keep `N` sandbox inits started ahead of need, so that a new session starts in a few milliseconds (0 to %d; 0: every session starts cold); each waits in its own namespaces and an empty cgroup, costs about 1.5 MiB, is replaced once taken and after a minute unused, and runs nothing until a session's policy is applied to it", sandbox.MaxPoolSize))
	if err := cli.Parse(fs, args, stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0 // -h and --help print the usage and succeed
		}
		return cli.ExitUsage
	}
	log, err := cli.NewLoggerFormat(stderr, *logFormat)
	if err != nil {
		fmt.Fprintf(stderr, "airlock serve: %s\n", cli.ErrText(err))
		return cli.ExitFailed
	}
	// say prints a line of serve's own: plain text, or with --log-format
	// json a log record like every other line.
	say := cli.Sayer("airlock serve", *logFormat, stderr, log)
	fail := func(format string, a ...any) int {
		if *logFormat == "json" {
			log.Error(fmt.Sprintf(format, a...))
		} else {
			fmt.Fprintf(stderr, "airlock serve: "+format+"\n", cli.EscapeArgs(a)...)
		}
		return cli.ExitFailed
	}
	if fs.NArg() > 0 {
		return fail("unexpected argument %q: serve takes only flags", fs.Arg(0))
	}
	maxUpload, err := policy.ParseSize(*maxBody)
	if err != nil || maxUpload <= 0 {
		return fail("--max-body %q: give a positive size such as 32MiB", *maxBody)
	}
	if *maxSessions <= 0 || *idle <= 0 || *maxExecs <= 0 || *maxTransfers <= 0 || *maxTransfersTotal <= 0 {
		return fail("--max-sessions, --idle, --max-execs, --max-transfers and --max-transfers-total must be positive")
	}
	transferBytes, err := policy.ParseSize(*maxTransferBytes)
	if err != nil || transferBytes <= 0 {
		return fail("--max-transfer-bytes %q: give a positive size such as 256MiB", *maxTransferBytes)
	}
	transferBytesTotal, err := policy.ParseSize(*maxTransferBytesTotal)
	if err != nil || transferBytesTotal <= 0 {
		return fail("--max-transfer-bytes-total %q: give a positive size such as 1GiB", *maxTransferBytesTotal)
	}
	// Unset, they follow --max-body up (server.Config's zero values);
	// given, they are checked against it.
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if !given["max-transfer-bytes"] {
		transferBytes = 0
	}
	if !given["max-transfer-bytes-total"] {
		transferBytesTotal = 0
	}
	if *warmPool < 0 || *warmPool > sandbox.MaxPoolSize {
		return fail("--warm-pool %d: give 0 to %d", *warmPool, sandbox.MaxPoolSize)
	}
	if *lifetime <= 0 || *maxLifetime < *lifetime {
		return fail("--session-lifetime must be positive and at most --session-max-lifetime (%v)", *maxLifetime)
	}
	entries, err := serveTokens(*tokenFile, os.Getenv("AIRLOCK_TOKEN"))
	tokens := make([]string, len(entries))
	for i, e := range entries {
		tokens[i] = e.token
	}
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

	if len(downgrades) > 0 {
		if _, err := policy.Default().With(policy.Overrides{AllowDowngrade: downgrades}, ""); err != nil {
			return fail("%v", err)
		}
	}
	ceilings := map[string]*policy.Policy{}
	var ceiling *policy.Policy
	if *ceilingFile != "" {
		if ceiling, err = loadCeiling(*ceilingFile, ceilings); err != nil {
			return fail("--ceiling: %v", err)
		}
	}
	var tokenCeilings []*policy.Policy
	for i, e := range entries {
		if e.ceiling == "" {
			continue
		}
		c, err := loadCeiling(e.ceiling, ceilings)
		if err != nil {
			return fail("--token-file line %d: ceiling: %v", e.line, err)
		}
		tokenCeilings = append(tokenCeilings, make([]*policy.Policy, i+1-len(tokenCeilings))...)
		tokenCeilings[i] = c
	}
	wsDir := *workspaceDir
	if wsDir != "" {
		if wsDir, err = filepath.Abs(wsDir); err != nil {
			return fail("--workspace-dir: %v", err)
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

	log.Info("file descriptors", "nofile", quota.nofile, "api_reserve", quota.reserve, "sessions", quota.sessions, "proxy_conns_per_session", quota.conns)
	var sink audit.Sink
	if *auditFile != "" {
		f, err := os.OpenFile(*auditFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return fail("--audit: %v", err)
		}
		defer f.Close()
		sink = audit.NewJSONL(termtext.NewJSONWriter(f))
	}
	var metrics *server.Metrics
	if *metricsListen != "" {
		metrics = server.NewMetrics()
		if sink == nil {
			sink = metrics.Sink()
		} else {
			sink = audit.Tee{sink, metrics.Sink()}
		}
	}
	var pool *sandbox.Pool
	if *warmPool > 0 {
		if pool, err = sandbox.NewPool(sandbox.PoolConfig{Size: *warmPool, Logger: log}); err != nil {
			return fail("--warm-pool: %v", err)
		}
		defer pool.Close()
		if metrics != nil {
			metrics.WatchPool(func() server.PoolStats {
				s := pool.Stats()
				return server.PoolStats{Ready: s.Ready, Starting: s.Starting, Taken: s.Taken, Misses: s.Misses, Failed: s.Failed, Expired: s.Expired,
					MountedAhead: s.MountedAhead}
			})
		}
	}
	srv, err := server.New(server.Config{
		Metrics: metrics,
		NewSession: serveNewSession(sandbox.Config{Logger: log, Audit: sink, FSAudit: *fsAudit, MaxProxyConns: quota.conns, AgentAdvice: *agentAdvice,
			SessionLifetime: *lifetime, SessionMaxLifetime: *maxLifetime, Pool: pool}, downgrades),
		Tokens:         tokens,
		InsecureNoAuth: *noAuth,
		PolicyDir:      dir,
		Ceiling:        ceiling,
		TokenCeilings:  tokenCeilings,
		WorkspaceDir:   wsDir,
		MaxSessions:    *maxSessions,
		Idle:           *idle,
		MaxUpload:      maxUpload,
		MaxExecs:       *maxExecs,
		Logger:         log,

		MaxTransfers:          *maxTransfers,
		MaxTransfersTotal:     *maxTransfersTotal,
		MaxTransferBytes:      transferBytes,
		MaxTransferBytesTotal: transferBytesTotal,
		AgentAdvice:           *agentAdvice,
	})
	if err != nil {
		return fail("%v", err)
	}
	own := 0
	for _, c := range tokenCeilings {
		own += btoi(c != nil)
	}
	log.Info("ceilings", "ceiling", orNone(*ceilingFile), "tokens_with_own_ceiling", own)
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		_ = srv.Shutdown(context.Background()) // removes the folder of workspaces; the listen error is the one to report
		return fail("listen: %v", err)
	}
	say(slog.LevelInfo, fmt.Sprintf("listening on http://%s", ln.Addr()), "url", "http://"+ln.Addr().String())
	if metrics != nil {
		mln, err := net.Listen("tcp", *metricsListen)
		if err != nil {
			ln.Close()
			_ = srv.Shutdown(context.Background())
			return fail("--metrics-listen: %v", err)
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", metrics.Handler())
		ms := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second, MaxHeaderBytes: 16 << 10}
		go func() { _ = ms.Serve(mln) }()
		defer ms.Close()
		say(slog.LevelInfo, fmt.Sprintf("metrics on http://%s/metrics", mln.Addr()), "url", "http://"+mln.Addr().String()+"/metrics")
	}

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
	say(slog.LevelInfo, "shutting down: closing every session")
	sctx, cancel := context.WithTimeout(context.Background(), serveShutdownGrace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fail("shutdown: %v", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return fail("serve: %v", err)
	}
	return cli.ExitOK
}

// serveToken is one bearer token and the ceiling file given for it.
type serveToken struct {
	token   string
	ceiling string // absolute path of the token's ceiling; "" for none
	line    int    // in the token file; 0 for AIRLOCK_TOKEN
}

// serveTokens reads the token file or, without one, the env token: the one
// token-file format, which airlock mcp --listen reads too. Each line of
// the file is "TOKEN" or "TOKEN ceiling=FILE" (FILE relative to the file's
// folder, and it may contain spaces); blank lines and lines starting with
// # are skipped. Errors name the line, never the token.
func serveTokens(file, env string) ([]serveToken, error) {
	if file == "" {
		if env = strings.TrimSpace(env); env != "" {
			return []serveToken{{token: env}}, nil
		}
		return nil, nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("--token-file: %w", err)
	}
	base, err := filepath.Abs(filepath.Dir(file))
	if err != nil {
		return nil, fmt.Errorf("--token-file: %w", err)
	}
	var tokens []serveToken
	n := 0
	for line := range strings.Lines(string(data)) {
		n++
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		t := serveToken{token: line, line: n}
		if i := strings.IndexFunc(line, unicode.IsSpace); i >= 0 {
			t.token = line[:i]
			c, ok := strings.CutPrefix(strings.TrimSpace(line[i:]), "ceiling=")
			if !ok || c == "" {
				return nil, fmt.Errorf("--token-file %s line %d: after the token comes something other than ceiling=FILE: write TOKEN or TOKEN ceiling=FILE", file, n)
			}
			if !filepath.IsAbs(c) {
				c = filepath.Join(base, c)
			}
			t.ceiling = filepath.Clean(c)
		}
		tokens = append(tokens, t)
	}
	if len(tokens) == 0 {
		return nil, fmt.Errorf("--token-file %s holds no token: put one token per line", file)
	}
	return tokens, nil
}

// loadCeiling parses a ceiling policy file, relative paths in it taken
// against its folder like any policy file. seen caches files by absolute
// path, so a ceiling shared by tokens is read once.
func loadCeiling(file string, seen map[string]*policy.Policy) (*policy.Policy, error) {
	abs, err := filepath.Abs(file)
	if err != nil {
		return nil, err
	}
	if c, ok := seen[abs]; ok {
		return c, nil
	}
	c, err := cli.ReadPolicyFile(file)
	if err != nil {
		return nil, err
	}
	seen[abs] = c
	return c, nil
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// serveNewSession starts real sandbox sessions for the server, with base's
// settings and the session's policy.
func serveNewSession(base sandbox.Config, downgrades []string) server.NewSessionFunc {
	return func(ctx context.Context, p *policy.Policy) (server.Session, error) {
		cfg := base
		if len(downgrades) > 0 {
			// Checked at start (serve refuses bad names), so With cannot fail
			// on them; the session's own grants are unchanged.
			var err error
			if p, err = p.With(policy.Overrides{AllowDowngrade: downgrades}, ""); err != nil {
				return nil, err
			}
		}
		cfg.Policy = p
		s, err := sandbox.NewSession(ctx, cfg)
		if err != nil {
			return nil, err // not a nil *sandbox.Session in a non-nil interface
		}
		return s, nil
	}
}
