package main

import (
	"fmt"
	"io"

	"github.com/airlock-sandbox/airlock/sandbox"
)

const explainSynopsis = `airlock explain [--policy FILE] [flags] [-- COMMAND [ARG]...]

Prints the policy and the plan that 'airlock run' would enforce for it:
every mount of the sandbox's root (and the grant or system base behind it),
the Landlock rules, the network, the process restrictions, the environment
and the budget. Nothing is started. COMMAND defaults to sh.

example:
  airlock explain --policy examples/data-analysis.yaml -- python3 analyse.py`

func cmdExplain(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("explain", explainSynopsis, stderr)
	var pf policyFlags
	pf.register(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	p, err := pf.build()
	if err != nil {
		fmt.Fprintf(stderr, "airlock explain: %v\n", err)
		return 1
	}
	argv := fs.Args()
	if len(argv) == 0 {
		argv = []string{"sh"}
	}
	cmd := &sandbox.Cmd{Config: sandbox.Config{Policy: p}, Args: argv, Dir: pf.cwd, CommandIsGranted: true}
	pl, err := cmd.Plan()
	if err != nil {
		fmt.Fprintf(stderr, "airlock explain: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "policy:   %s\n", p.Summary())
	fmt.Fprint(stdout, pl.String())
	return 0
}
