package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/airlock-sandbox/airlock/internal/cli"
	"github.com/airlock-sandbox/airlock/internal/sibling"
	"github.com/airlock-sandbox/airlock/internal/termtext"
)

// serverBinary is the program (cmd/airlock-server) that holds serve, mcp
// and export k8s, whose dependencies (an HTTP API with Prometheus metrics,
// the MCP SDK, the Kubernetes API types) would otherwise be linked into
// airlock and initialized before every `airlock run` (medians here: 4.8
// against 2.4 ms for `airlock version`, 16.6 against 13.7 ms for `airlock
// run -- /bin/true`).
const serverBinary = "airlock-server"

// runServer runs `airlock COMMAND` (command as the user typed it: "serve",
// "mcp", "export k8s") by executing airlock-server with the same
// arguments in place of this process: the same pid, stdio, signals and
// exit status. airlock-server is taken from airlock's own folder under
// the rules the sandbox applies to airlock-init (internal/sibling), opened
// once and executed through its fd. runServer returns only when it cannot
// be run: it then says why and how to build it, and nothing is started.
func runServer(command string, args []string, stderr io.Writer) int {
	self, err := os.Executable()
	if err == nil {
		var f *os.File
		if f, err = sibling.Open(self, serverBinary); err == nil {
			err = execFile(f, args) // returns only on failure
			f.Close()
		}
	}
	fmt.Fprintln(stderr, serverRefusal(command, self, err))
	return cli.ExitFailed
}

// serverRefusal is the one line that says why `airlock COMMAND` could not
// run airlock-server (err), where airlock looked for it (next to self)
// and how to build it there.
func serverRefusal(command, self string, err error) string {
	dir := filepath.Dir(self)
	var why string
	var se *sibling.Error
	switch {
	case errors.As(err, &se) && errors.Is(err, fs.ErrNotExist):
		dir = filepath.Dir(se.Path)
		why = "which airlock runs from its own folder: " + termtext.Field(se.Error())
	case se != nil:
		dir = filepath.Dir(se.Path)
		why = "which airlock runs from its own folder, and it refuses the one there: " + termtext.Field(se.Error()) +
			"; airlock runs only a regular file (not a symlink), executable, owned by root or by airlock's owner, and writable by no one else (chmod go-w)"
	default:
		why = "which airlock cannot run: " + cli.ErrText(err)
	}
	return fmt.Sprintf("airlock %s: this command is in airlock-server, %s; build it there with: go build -o %s ./cmd/airlock-server (or every command: go build -o %[3]s ./cmd/...)",
		command, why, termtext.Field(dir))
}
