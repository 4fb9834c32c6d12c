package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/internal/cli"
	"github.com/airlock-sandbox/airlock/internal/termtext"
	"github.com/airlock-sandbox/airlock/policy/budget"
	"github.com/airlock-sandbox/airlock/sandbox"
)

const runSynopsis = `airlock run [--policy FILE] [flags] -- COMMAND [ARG]...

Runs COMMAND in a fresh sandbox: it sees only the system base and its
grants, has no network but the egress proxy for net_hosts, holds no
capabilities, and is halted when a budget runs out.

examples:
  airlock run -- python3 -c 'print(2+2)'
  airlock run --fs-read . --fs-write ./out -- python3 analyse.py
  cd examples/data && airlock run --policy ../data-analysis.yaml --json -- python3 analyze.py`

func cmdRun(args []string, stdout, stderr io.Writer) int {
	fs := cli.NewFlagSet("run", runSynopsis, stderr)
	var pf cli.PolicyFlags
	pf.Register(fs)
	asJSON := fs.Bool("json", false, "print the result report as JSON on stdout instead of streaming the output")
	isolation := fs.String("isolation", "", "enforcement: namespaces (default: airlock's own sandbox), landlock (no namespaces: Landlock, seccomp and the connect broker, for where user namespaces cannot be created; weaker, see the report), gvisor (the OCI bundle under gVisor's runsc: a user-space kernel; root only), microvm (a guest kernel of its own under QEMU's microvm machine, software emulation: seconds per boot; egress only through airlock's proxy; root only) or oci (the same policy as an OCI bundle under --runtime; root only)")
	rtName := fs.String("runtime", "", "OCI runtime for --isolation oci: runc (the default), crun or runsc")
	pty := fs.Bool("pty", false, "give the command a pseudo-terminal (interactive programs); output arrives merged on stdout")
	fsAudit := fs.Bool("fs-audit", false, "itemize filesystem denials from Landlock audit records (root, Linux 6.15+); turns the host's kernel audit on while the run lasts and adds ~40 ms")
	auditFile := fs.String("audit", "", "write every audit event (allow, deny, halt, exit) as JSON lines to `FILE` (created or truncated, mode 0600)")
	summaryFile := fs.String("summary-file", "", "also write the report, cut to 4096 bytes (what was cut is named in its truncated list), as JSON to `FILE`: a Pod's /dev/termination-log")
	argvFile := fs.String("argv-file", "", "wait until `FILE` holds the command as a JSON array of strings, then run it (a warm Pod of the airlock controller: FILE is a downward-API file the controller fills when it assigns the Pod); no command after --")
	if err := cli.Parse(fs, args, stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0 // -h and --help print the usage and succeed
		}
		return cli.ExitRunFailed
	}
	argv := fs.Args()
	if *argvFile != "" && len(argv) > 0 {
		fmt.Fprintln(stderr, "airlock run: --argv-file and a command after -- exclude each other: the command comes from the file")
		return cli.ExitRunFailed
	}
	if len(argv) == 0 && *argvFile == "" {
		fmt.Fprintln(stderr, "airlock run: no command given: put it after --, e.g. airlock run -- python3 -c 'print(1)'")
		return cli.ExitRunFailed
	}
	p, err := pf.Build()
	if err != nil {
		refusalSummary(*summaryFile, err)
		fmt.Fprintf(stderr, "airlock run: %s\nnothing was started\n", cli.ErrText(err))
		return cli.ExitRunFailed
	}
	dir, err := pf.Cwd(p)
	if err != nil {
		refusalSummary(*summaryFile, err)
		fmt.Fprintf(stderr, "airlock run: %s\nnothing was started\n", cli.ErrText(err))
		return cli.ExitRunFailed
	}
	var halt haltSink // only the halt, for the summary: a flood of other events must not grow memory
	sinks := audit.Tee{&halt}
	var jsonl *audit.JSONL
	if *auditFile != "" {
		// The log holds host paths and hosts the command tried: keep it private.
		f, err := os.OpenFile(*auditFile, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o600)
		if err != nil {
			fmt.Fprintf(stderr, "airlock run: --audit: %s\nnothing was started\n", cli.ErrText(err))
			return cli.ExitRunFailed
		}
		defer f.Close()
		jsonl = audit.NewJSONL(termtext.NewJSONWriter(f)) // an operator may cat it on a terminal
		sinks = append(sinks, jsonl)
	}
	in := newInterrupt()
	defer in.stop()
	if *argvFile != "" {
		// The policy is read and valid before the wait: a warm Pod with a
		// bad policy fails at once, not when it is assigned.
		if argv, err = waitArgv(in.ctx, *argvFile); err != nil {
			refusalSummary(*summaryFile, err)
			fmt.Fprintf(stderr, "airlock run: --argv-file: %s\nnothing was started\n", cli.ErrText(err))
			return cli.ExitRunFailed
		}
	}
	restoreTerminal := saveTerminal(int(os.Stdin.Fd()))
	defer restoreTerminal()
	// FSAudit is opt-in: it changes a host-wide setting (kernel audit) and costs time per run.
	cmd := &sandbox.Cmd{Config: sandbox.Config{Policy: p, Audit: sinks, FSAudit: *fsAudit, Isolation: *isolation, Runtime: *rtName}, Args: argv, Dir: dir, CommandIsGranted: true, Stdin: os.Stdin, PTY: *pty}
	if !*asJSON {
		cmd.Stdout, cmd.Stderr = stdout, stderr
	}
	rep, err := cmd.Run(in.ctx)
	restoreTerminal()
	if err != nil {
		refusalSummary(*summaryFile, err)
		fmt.Fprintf(stderr, "airlock run: %s\n", cli.ErrText(err))
		return cli.ExitRunFailed
	}
	if code := in.exitCode(); code != 0 && rep.HaltedBy != nil && *rep.HaltedBy == string(budget.Interrupted) {
		rep.ExitCode = code // what a shell reports for a command killed by that signal
	}
	if *summaryFile != "" {
		if err := writeSummary(*summaryFile, rep); err != nil {
			fmt.Fprintf(stderr, "airlock run: --summary-file: %s\n", cli.ErrText(err))
		}
	}
	if *asJSON {
		if err := cli.WriteJSON(stdout, rep); err != nil {
			fmt.Fprintf(stderr, "airlock run: write report: %s\n", cli.ErrText(err))
			return cli.ExitRunFailed
		}
	} else {
		summary{rep: rep, halt: halt.event(), color: colorFor(stderr, os.Getenv)}.write(stderr)
	}
	if rep.ExitCode != 0 {
		if h := pf.CwdHint(p, argv); h != "" {
			fmt.Fprintln(stderr, h)
		}
	}
	if jsonl != nil && jsonl.Err() != nil {
		fmt.Fprintf(stderr, "airlock run: --audit %s: %s: the audit log is incomplete\n", termtext.Field(*auditFile), cli.ErrText(jsonl.Err()))
	}
	return rep.ExitCode
}
