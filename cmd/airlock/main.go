// Command airlock runs a command so that it can touch only what a policy
// grants, enforced by the kernel. See `airlock help`.
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/airlock-sandbox/airlock/internal/cli"
	"github.com/airlock-sandbox/airlock/sandbox"
)

const usage = `airlock runs code an AI agent wrote so that it touches only what a policy grants.

usage:
  airlock run [--policy FILE] [flags] -- COMMAND [ARG]...   run COMMAND in a fresh sandbox
  airlock explain [--policy FILE] [flags] [-- COMMAND...]  print the enforcement plan, layer by layer
  airlock policy check [--no-host] FILE                     validate a policy file, then check it on this host
  airlock serve [--listen ADDR] [--token-file F]           HTTP API with long-lived sessions
  airlock mcp [--policy FILE] [flags] [--listen ADDR]       MCP server (stdio, or streamable HTTP with --listen)
  airlock export oci|k8s [--policy FILE] [flags] -- CMD...  the same policy as an OCI bundle or Kubernetes manifests
  airlock controller [--kubeconfig FILE] [flags]            the Kubernetes controller: Sandbox resources run in Pods
  airlock egress-proxy --config FILE                        the egress proxy on its own (for the Kubernetes export)
  airlock doctor [--json]                                   what this host can enforce; exit 1 if a default run cannot be
  airlock version                                           print the version

Run 'airlock COMMAND --help' for the flags of a command. serve, mcp and export k8s
are in airlock-server, and controller in airlock-controller; airlock runs them from
its own folder.

exit codes of 'airlock run': the command's own status; 128+N when it died of
signal N; 124 when a budget halted it; 125 when airlock refused or failed
(nothing was started); 126/127 when the command is not executable / not found
or not an allowed tool.
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
	case "run":
		return cmdRun(args[1:], stdout, stderr)
	case "explain":
		return cmdExplain(args[1:], stdout, stderr)
	case "policy":
		return cmdPolicy(args[1:], stdout, stderr)
	case "mcp", "serve":
		return runServer(args[0], args, stderr)
	case "controller":
		return runSibling(controllerBinary, "controller", args, stderr)
	case "export":
		if len(args) > 1 && args[1] == "k8s" {
			return runServer("export k8s", args, stderr)
		}
		return cmdExport(args[1:], stdout, stderr)
	case "egress-proxy":
		return cmdEgressProxy(args[1:], stdout, stderr)
	case "doctor":
		return cmdDoctor(args[1:], stdout, stderr)
	case "version", "--version":
		if len(args) > 1 && cli.IsHelp(args[1]) {
			fmt.Fprintln(stdout, "usage: airlock version\n\nPrints airlock's version.")
			return cli.ExitOK
		}
		fmt.Fprintln(stdout, "airlock", cli.Version)
		return cli.ExitOK
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return cli.ExitOK
	}
	fmt.Fprintf(stderr, "airlock: unknown command %q\n\n%s", args[0], usage)
	return cli.ExitUsage
}
