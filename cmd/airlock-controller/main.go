// Command airlock-controller is the airlock controller for Kubernetes:
// Sandbox resources (airlock.dev/v1alpha1) run in Pods under their
// policies (package controller). `airlock controller` executes it from
// airlock's own folder, as it executes airlock-server for serve and mcp.
// It is a program of its own because client-go and controller-runtime
// take milliseconds to initialize: linked into airlock-server, they made
// every `airlock serve`, `airlock mcp` and `airlock export k8s` start
// slower (`airlock-server version`, medians: 4.9 ms without them, 13.3 ms
// with). It can also be run directly. See `airlock-controller --help`.
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/airlock-sandbox/airlock/internal/cli"
)

func main() {
	os.Exit(dispatch(os.Args[1:], os.Stdout, os.Stderr))
}

// dispatch runs the controller with args. airlock passes its own
// arguments, which start with the command name, "controller".
func dispatch(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "controller":
			args = args[1:]
		case "version", "--version":
			fmt.Fprintln(stdout, "airlock-controller", cli.Version)
			return cli.ExitOK
		}
	}
	return cmdController(args, stdout, stderr)
}
