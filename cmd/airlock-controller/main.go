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

	"github.com/airlock-sandbox/airlock/controller"
	"github.com/airlock-sandbox/airlock/internal/cli"
)

func main() {
	os.Exit(dispatch(os.Args[1:], os.Stdout, os.Stderr))
}

// dispatch runs the controller with args. airlock passes its own
// arguments, which start with the command name, "controller". `install`
// is what the Pods' init container runs from the operator's image.
func dispatch(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "controller":
			args = args[1:]
		case "install":
			return cmdInstall(args[1:], stdout, stderr)
		case "version", "--version":
			if len(args) > 1 && cli.IsHelp(args[1]) {
				fmt.Fprintln(stdout, "usage: airlock-controller version\n\nPrints airlock-controller's version.")
				return cli.ExitOK
			}
			fmt.Fprintln(stdout, "airlock-controller", cli.Version)
			return cli.ExitOK
		}
	}
	return cmdController(args, stdout, stderr)
}

// cmdInstall runs `airlock-controller install DIR` in a Pod's init
// container: airlock and airlock-init from this program's folder, and
// the policy from the environment, into DIR (controller.Install).
func cmdInstall(args []string, stdout, stderr io.Writer) int {
	if len(args) == 1 && cli.IsHelp(args[0]) {
		fmt.Fprintf(stdout, "usage: airlock-controller install DIR\n\nCopies airlock and airlock-init from this program's folder, and the policy in $%s, into DIR: what a Sandbox Pod's init container runs.\n", controller.EnvPolicy)
		return cli.ExitOK
	}
	if len(args) != 1 || args[0] == "" || args[0][0] != '/' {
		fmt.Fprintf(stderr, "airlock-controller install: want one absolute DIR, got %q: this is what the Pods' init container runs (usage: airlock-controller install DIR, the policy in $%s)\n", args, controller.EnvPolicy)
		return cli.ExitUsage
	}
	self, err := os.Executable()
	if err == nil {
		err = controller.Install(self, args[0], os.Getenv(controller.EnvPolicy))
	}
	if err != nil {
		fmt.Fprintf(stderr, "airlock-controller %s\n", cli.ErrText(err))
		return cli.ExitFailed
	}
	return cli.ExitOK
}
