package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

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
			return 2
		}
		return 0
	}
	if args[0] != "check" || len(args) != 2 {
		fmt.Fprintf(stderr, "airlock policy: expected 'check FILE'\nusage: %s\n", policySynopsis)
		return 2
	}
	file := args[1]
	data, err := os.ReadFile(file)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %s\n", termtext.Field(file), errText(err))
		return 1
	}
	abs, err := filepath.Abs(file)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %s\n", termtext.Field(file), errText(err))
		return 1
	}
	p, err := policy.Parse(data, policy.ParseOptions{File: file, BaseDir: filepath.Dir(abs)})
	if err != nil {
		printErrors(stderr, err)
		return 1
	}
	fmt.Fprintf(stdout, "%s: %s\n", termtext.Field(file), termtext.Escape(p.Summary(), termtext.LineMax))
	return 0
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
	fmt.Fprintln(w, errText(err))
}
