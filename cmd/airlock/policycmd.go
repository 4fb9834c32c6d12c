package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"

	"github.com/airlock-sandbox/airlock/internal/cli"
	"github.com/airlock-sandbox/airlock/internal/termtext"
	"github.com/airlock-sandbox/airlock/policy"
)

const policySynopsis = `airlock policy check FILE

Validates a policy file completely. On success prints a one-line summary
and exits 0; otherwise prints every problem as FILE:LINE:COL: message and
exits 1.`

func cmdPolicy(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "--help" || args[0] == "-h" {
		fmt.Fprintln(stderr, "usage: "+policySynopsis)
		if len(args) == 0 {
			return cli.ExitUsage
		}
		return cli.ExitOK
	}
	if args[0] != "check" || len(args) != 2 {
		fmt.Fprintf(stderr, "airlock policy: expected 'check FILE'\nusage: %s\n", policySynopsis)
		return cli.ExitUsage
	}
	file := args[1]
	p, err := cli.ReadPolicyFile(file)
	var pathErr *fs.PathError
	switch {
	case errors.As(err, &pathErr):
		fmt.Fprintf(stderr, "%s: %s\n", termtext.Field(file), cli.ErrText(pathErr.Err)) // the file, as the user named it
		return cli.ExitFailed
	case err != nil:
		printErrors(stderr, err)
		return cli.ExitFailed
	}
	fmt.Fprintf(stdout, "%s: %s\n", termtext.Field(file), termtext.Escape(p.Summary(), termtext.LineMax))
	return cli.ExitOK
}

// printErrors prints each joined error on its own line, escaped: a
// message may quote the file's name or its content.
func printErrors(w io.Writer, err error) {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			printErrors(w, e)
		}
		return
	}
	var pe *policy.ParseError
	if errors.As(err, &pe) {
		fmt.Fprintln(w, termtext.Escape(pe.Error(), termtext.LineMax))
		return
	}
	fmt.Fprintln(w, cli.ErrText(err))
}
