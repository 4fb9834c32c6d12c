package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/airlock-sandbox/airlock/sandbox"
)

const runSynopsis = `airlock run [--policy FILE] [flags] -- COMMAND [ARG]...

Runs COMMAND in a fresh sandbox: it sees only the system base and its
grants, has no network but the egress proxy for net_hosts, holds no
capabilities, and is halted when a budget runs out.

examples:
  airlock run -- python3 -c 'print(2+2)'
  airlock run --fs-read ./data --fs-write ./out -- python3 analyse.py
  airlock run --policy examples/data-analysis.yaml --json -- python3 analyse.py`

func cmdRun(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("run", runSynopsis, stderr)
	var pf policyFlags
	pf.register(fs)
	asJSON := fs.Bool("json", false, "print the result report as JSON on stdout instead of streaming the output")
	if err := fs.Parse(args); err != nil {
		return 125
	}
	argv := fs.Args()
	if len(argv) == 0 {
		fmt.Fprintln(stderr, "airlock run: no command given: put it after --, e.g. airlock run -- python3 -c 'print(1)'")
		return 125
	}
	p, err := pf.build()
	if err != nil {
		fmt.Fprintf(stderr, "airlock run: %v\nnothing was started\n", err)
		return 125
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cmd := &sandbox.Cmd{Config: sandbox.Config{Policy: p}, Args: argv, Dir: pf.cwd, CommandIsGranted: true, Stdin: os.Stdin}
	if !*asJSON {
		cmd.Stdout, cmd.Stderr = stdout, stderr
	}
	rep, err := cmd.Run(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "airlock run: %v\n", err)
		return 125
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			fmt.Fprintf(stderr, "airlock run: write report: %v\n", err)
			return 125
		}
	} else {
		summarize(stderr, rep)
	}
	return rep.ExitCode
}

// summarize prints one line per denial and the halt reason for a person.
func summarize(w io.Writer, rep *sandbox.Report) {
	for _, d := range rep.Denials {
		line := fmt.Sprintf("airlock: denied %s %s (%s): %s", d.Op, d.Target, d.Rule, d.Message)
		if d.Suggestion != "" {
			line += "; to allow it: " + d.Suggestion
		}
		fmt.Fprintln(w, line)
	}
	if rep.HaltedBy != nil {
		fmt.Fprintf(w, "airlock: halted by %s after %d ms (exit 124)\n", *rep.HaltedBy, rep.DurationMS)
	}
	if rep.Error != "" {
		fmt.Fprintf(w, "airlock: %s\n", rep.Error)
	}
}
