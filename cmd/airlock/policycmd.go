package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/cli"
	"github.com/airlock-sandbox/airlock/internal/image"
	"github.com/airlock-sandbox/airlock/internal/termtext"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/sandbox"
)

const policySynopsis = `airlock policy check [--no-host] FILE

Validates a policy file completely, then checks it against this host:
every allowed_tools entry is an executable file where a run looks for it
(on /usr/local/bin:/usr/bin:/bin, or in the policy's rootfs folder), and
every fs_read and fs_write path exists and is named by its real path (no
symlink). The file's checks hold on any host; the host's checks are what
a run here would refuse (exit 127 or 125), and --no-host skips them (a
policy written for another machine).

On success prints a summary and exits 0. Otherwise prints every problem
of the file as FILE:LINE:COL: message, or every problem of the host as
FILE: host: message, and exits 1.`

func cmdPolicy(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && (args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
		fmt.Fprintln(stdout, "usage: "+policySynopsis)
		return cli.ExitOK
	}
	if len(args) == 0 || args[0] != "check" {
		fmt.Fprintf(stderr, "airlock policy: expected 'check FILE'\nusage: %s\n", policySynopsis)
		return cli.ExitUsage
	}
	fset := cli.NewFlagSet("policy check", policySynopsis, stderr)
	noHost := fset.Bool("no-host", false, "check the file only, not this host (its tools and paths)")
	if err := cli.Parse(fset, args[1:], stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return cli.ExitOK
		}
		return cli.ExitUsage
	}
	if fset.NArg() != 1 {
		fmt.Fprintf(stderr, "airlock policy: expected 'check FILE', one file\nusage: %s\n", policySynopsis)
		return cli.ExitUsage
	}
	file := fset.Arg(0)
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
	if !*noHost {
		problems, done := checkHost(p)
		if len(problems) > 0 {
			for _, pr := range problems {
				fmt.Fprintf(stderr, "%s: host: %s\n", termtext.Field(file), termtext.Escape(pr, termtext.LineMax))
			}
			fmt.Fprintf(stderr, "%s: the file is valid; a run on this host would fail on the problems above (--no-host checks the file alone)\n", termtext.Field(file))
			return cli.ExitFailed
		}
		fmt.Fprintf(stdout, "%s: %s\n", termtext.Field(file), termtext.Escape(p.Summary(), termtext.LineMax))
		fmt.Fprintf(stdout, "%s: this host: %s (host checks; --no-host skips them)\n", termtext.Field(file), done)
		return cli.ExitOK
	}
	fmt.Fprintf(stdout, "%s: %s\n", termtext.Field(file), termtext.Escape(p.Summary(), termtext.LineMax))
	return cli.ExitOK
}

// checkHost checks p against this host as a run would: each allowed tool
// is looked up by the sandbox's own lookup (a plan compiled with it as the
// command), and each fs_read and fs_write path is resolved. It returns
// every problem, and a summary of what it checked.
func checkHost(p *policy.Policy) (problems []string, done string) {
	var checked []string
	tools := p.AllowedTools()
	switch {
	case len(tools) == 0:
	case p.Rootfs() != "" && image.IsImage(p.Rootfs()):
		checked = append(checked, "allowed_tools not checked: they are looked up in the rootfs image when a run unpacks it")
	default:
		seen := map[string]bool{}
		for _, t := range tools {
			_, err := (&sandbox.Cmd{Config: sandbox.Config{Policy: p}, Args: []string{t}, CommandIsGranted: true}).Plan()
			var msg string
			switch {
			case err == nil:
				continue
			case strings.HasPrefix(err.Error(), "allowed_tools "):
				continue // another tool's: checked as the command in its own turn
			case errors.Is(err, sandbox.ErrNotFound):
				why := cli.ErrText(err)
				if _, after, ok := strings.Cut(why, sandbox.ErrNotFound.Error()+": "); ok {
					why = after // `"NAME" is not an executable file on PATH`
				}
				msg = fmt.Sprintf("allowed_tools: %s: install it, correct the name, or remove it", why)
			default:
				msg = fmt.Sprintf("allowed_tools %q: %s", t, cli.ErrText(err))
			}
			if !seen[msg] {
				seen[msg] = true
				problems = append(problems, msg)
			}
		}
		checked = append(checked, fmt.Sprintf("%d allowed_tools found", len(tools)))
	}
	paths := 0
	for _, g := range []struct {
		key   string
		paths []string
	}{{"fs_read", p.FSRead()}, {"fs_write", p.FSWrite()}} {
		for _, path := range g.paths {
			paths++
			real, err := filepath.EvalSymlinks(path)
			switch {
			case errors.Is(err, fs.ErrNotExist):
				problems = append(problems, fmt.Sprintf("%s %q: no such file or directory: create it before the run, or remove the grant", g.key, path))
			case err != nil:
				problems = append(problems, fmt.Sprintf("%s %q: %s", g.key, path, cli.ErrText(err)))
			case real != path:
				problems = append(problems, fmt.Sprintf("%s %q: a path component is a symlink (the path is %s): grant the real path instead (airlock never binds what a symlink points at)", g.key, path, real))
			}
		}
	}
	if paths > 0 {
		checked = append(checked, fmt.Sprintf("%d fs_read and fs_write paths exist", paths))
	}
	if len(checked) == 0 {
		checked = append(checked, "nothing to check (no allowed_tools, fs_read or fs_write)")
	}
	if root := p.Rootfs(); root != "" && !image.IsImage(root) {
		if _, err := os.Stat(root); err != nil {
			problems = append(problems, fmt.Sprintf("rootfs %q: %s", root, cli.ErrText(err)))
		}
	}
	return problems, strings.Join(checked, ", ")
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
