package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/internal/cli"
	"github.com/airlock-sandbox/airlock/internal/termtext"
	"github.com/airlock-sandbox/airlock/policy/budget"
)

const egressProxySynopsis = `airlock egress-proxy --config FILE [--http-listen ADDR] [--socks-listen ADDR]

Serves airlock's egress proxy on its own, for sandboxes that are not started
by airlock run: the Kubernetes export's proxy Deployment runs it next to the
sandbox Pod. The policy's net_hosts decide every connection exactly as in
airlock run; max_ops counts requests and max_wall ends the service. Every
decision is written to stdout as JSON lines.`

func cmdEgressProxy(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("egress-proxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: %s\n\nflags:\n", egressProxySynopsis)
		fs.PrintDefaults()
	}
	config := fs.String("config", "", "policy `FILE` (YAML or JSON); required")
	httpAddr := fs.String("http-listen", ":3128", "`ADDR` for the HTTP forward proxy and CONNECT")
	socksAddr := fs.String("socks-listen", ":1080", "`ADDR` for SOCKS5 (empty disables it)")
	if err := cli.Parse(fs, args, stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0 // -h and --help print the usage and succeed
		}
		return cli.ExitUsage
	}
	if *config == "" || fs.NArg() != 0 {
		fmt.Fprintln(stderr, "airlock egress-proxy: --config FILE is required and no arguments are taken")
		return cli.ExitUsage
	}
	p, err := cli.ReadPolicyFile(*config)
	if err != nil {
		printErrors(stderr, err)
		return cli.ExitFailed
	}
	if len(p.NetHosts()) == 0 {
		fmt.Fprintln(stderr, "airlock egress-proxy: the policy has no net_hosts: there is nothing to serve (every request would be denied)")
		return cli.ExitFailed
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	meter := budget.NewMeter(p.Budget(), nil)
	ctx, cancel := context.WithDeadline(ctx, meter.Deadline())
	defer cancel()
	// Every target in the JSON lines is one a sandbox asked for.
	px, err := egress.New(egress.Config{Policy: p, Meter: meter, Audit: audit.NewJSONL(termtext.NewJSONWriter(stdout)), Logger: cli.NewLogger(stderr)})
	if err != nil {
		fmt.Fprintf(stderr, "airlock egress-proxy: %s\n", cli.ErrText(err))
		return cli.ExitFailed
	}
	defer px.Close()
	serve := map[string]func(net.Listener) error{*httpAddr: px.ServeHTTPProxy}
	if *socksAddr != "" {
		serve[*socksAddr] = px.ServeSOCKS5
	}
	errs := make(chan error, len(serve))
	for addr, fn := range serve {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			fmt.Fprintf(stderr, "airlock egress-proxy: listen %s: %s\n", termtext.Field(addr), cli.ErrText(err))
			return cli.ExitFailed
		}
		fmt.Fprintf(stderr, "airlock egress-proxy: listening on %s\n", l.Addr())
		go func() { errs <- fn(l) }()
	}
	select {
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			fmt.Fprintln(stderr, "airlock egress-proxy: max_wall reached; no more connections")
		}
		return cli.ExitOK
	case err := <-errs:
		fmt.Fprintf(stderr, "airlock egress-proxy: %s\n", cli.ErrText(err))
		return cli.ExitFailed
	}
}
