// Command airlock-server holds the airlock commands with heavy
// dependencies: serve (the HTTP API, with Prometheus metrics), mcp (the
// MCP SDK) and export k8s (the Kubernetes API types). `airlock serve`,
// `airlock mcp` and `airlock export k8s` execute it from airlock's own
// folder, so that airlock itself, and every `airlock run`, links and
// initializes none of them. It can also be run directly. See
// `airlock-server help`.
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/airlock-sandbox/airlock/internal/cli"
	"github.com/airlock-sandbox/airlock/sandbox"
)

const usage = `airlock-server holds airlock's servers and its Kubernetes export. 'airlock serve',
'airlock mcp' and 'airlock export k8s' run it from airlock's folder; it runs on its own too.

usage:
  airlock-server serve [--listen ADDR] [--token-file F]           HTTP API with long-lived sessions (airlock serve)
  airlock-server mcp [--policy FILE] [flags] [--listen ADDR]       MCP server (airlock mcp): stdio, or streamable HTTP with --listen
  airlock-server export k8s [--policy FILE] [flags] -- CMD...      the policy as Kubernetes manifests (airlock export k8s)
  airlock-server version                                           print the version

Run 'airlock-server COMMAND --help' for the flags of a command.
`

func main() {
	sandbox.Init() // the re-executed sandbox init never returns from here
	os.Exit(dispatch(os.Args[1:], os.Stdout, os.Stderr))
}

func dispatch(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return cli.ExitUsage
	}
	switch args[0] {
	case "serve":
		return cmdServe(args[1:], stdout, stderr)
	case "mcp":
		return cmdMCP(args[1:], stdout, stderr)
	case "export":
		return cmdExport(args[1:], stdout, stderr)
	case "version", "--version":
		if len(args) > 1 && cli.IsHelp(args[1]) {
			fmt.Fprintln(stdout, "usage: airlock-server version\n\nPrints airlock-server's version.")
			return cli.ExitOK
		}
		fmt.Fprintln(stdout, "airlock-server", cli.Version)
		return cli.ExitOK
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return cli.ExitOK
	}
	fmt.Fprintf(stderr, "airlock-server: unknown command %q (airlock runs the others)\n\n%s", args[0], usage)
	return cli.ExitUsage
}
