package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/airlock-sandbox/airlock/internal/cli"
	"github.com/airlock-sandbox/airlock/internal/termtext"
	"github.com/airlock-sandbox/airlock/plan"
	"github.com/airlock-sandbox/airlock/sandbox"
)

const explainSynopsis = `airlock explain [--policy FILE] [flags] [-- COMMAND [ARG]...]

Prints the policy and the plan that 'airlock run' would enforce for it:
the namespaces and the id mapping, every mount of the sandbox's root (with
its flags, and the grant or system base behind it), the masked and
read-only /proc paths, the Landlock rules, the network, the capabilities
and no_new_privs, the seccomp allow-list by group, the limits, the
environment and the rlimits. It is the plan nsinit and the exports read.
Nothing is started. COMMAND defaults to sh.

example:
  airlock explain --policy examples/data-analysis.yaml -- python3 analyze.py`

func cmdExplain(args []string, stdout, stderr io.Writer) int {
	fs := cli.NewFlagSet("explain", explainSynopsis, stderr)
	var pf cli.PolicyFlags
	pf.Register(fs)
	isolation := fs.String("isolation", "namespaces", "the backend whose plan to print: namespaces, landlock (no namespaces), or microvm (the plan its guest applies)")
	if err := cli.Parse(fs, args, stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0 // -h and --help print the usage and succeed
		}
		return cli.ExitUsage
	}
	if *isolation != sandbox.IsolationNamespaces && *isolation != sandbox.IsolationLandlock && *isolation != sandbox.IsolationMicroVM {
		fmt.Fprintf(stderr, "airlock explain: --isolation %q: use namespaces, landlock or microvm\n", termtext.Field(*isolation))
		return cli.ExitUsage
	}
	p, err := pf.Build()
	if err != nil {
		fmt.Fprintf(stderr, "airlock explain: %s\n", cli.ErrText(err))
		return cli.ExitFailed
	}
	argv := fs.Args()
	if len(argv) == 0 {
		argv = []string{"sh"}
	}
	dir, err := pf.Cwd(p)
	if err != nil {
		fmt.Fprintf(stderr, "airlock explain: %s\n", cli.ErrText(err))
		return cli.ExitFailed
	}
	// The plan compiled for the backend, as its init gets it (the landlock
	// backend's scratch folder is named airlock-scratch-RANDOM).
	cmd := &sandbox.Cmd{Config: sandbox.Config{Policy: p, Isolation: *isolation}, Args: argv, Dir: dir, CommandIsGranted: true}
	pl, err := cmd.Explain()
	if err != nil {
		fmt.Fprintf(stderr, "airlock explain: %s\n", cli.ErrText(err))
		return cli.ExitFailed
	}
	fmt.Fprintf(stdout, "policy:   %s\n", termtext.Escape(p.Summary(), termtext.LineMax))
	if *isolation == sandbox.IsolationMicroVM {
		fmt.Fprint(stdout, "microvm:  a guest kernel of its own (QEMU microvm, software emulation) applies the plan below in its namespaces;\n"+
			"          its root is a 9p share of the plan's bind sources, the VMM runs in airlock's namespace sandbox on the host,\n"+
			"          the proxy's ports are carried over a virtio-serial port, and a host cgroup holds the VM (max_cpu counts its CPU)\n")
	}
	// Escaped field by field, so that a newline in a value cannot start a
	// line of its own, and the whole text once more for what a later field
	// of the plan adds.
	fmt.Fprint(stdout, termtext.Lines(escapePlan(pl).String(), termtext.LineMax))
	return cli.ExitOK
}

// escapePlan returns a copy of pl whose printed strings are escaped for a
// terminal: the plan quotes host paths and link texts, the tool paths
// found on the host, and the values of the host's environment variables
// that the policy passes.
func escapePlan(pl *plan.Plan) *plan.Plan {
	f := termtext.Field
	each := func(s []string) []string {
		out := make([]string, len(s))
		for i, v := range s {
			out[i] = f(v)
		}
		return out
	}
	out := *pl
	out.Argv, out.Env, out.NetHosts, out.Tools = each(pl.Argv), each(pl.Env), each(pl.NetHosts), each(pl.Tools)
	out.Cwd, out.Hostname = f(pl.Cwd), f(pl.Hostname)
	out.Mounts = append([]plan.Mount(nil), pl.Mounts...)
	for i, m := range out.Mounts {
		out.Mounts[i].Source, out.Mounts[i].Target = f(m.Source), f(m.Target)
	}
	out.Rules = append([]plan.Rule(nil), pl.Rules...)
	for i, r := range out.Rules {
		out.Rules[i].Path = f(r.Path)
	}
	out.Rlimits = append([]plan.Rlimit(nil), pl.Rlimits...)
	for i, r := range out.Rlimits {
		out.Rlimits[i].Resource, out.Rlimits[i].Why = f(r.Resource), f(r.Why)
	}
	return &out
}
