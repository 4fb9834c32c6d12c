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

// controllerBinary is the program (cmd/airlock-controller) that holds
// `airlock controller`: client-go and controller-runtime, which would
// slow the start of every airlock-server command if they were there.
const controllerBinary = "airlock-controller"

// runServer runs `airlock COMMAND` (command as the user typed it: "serve",
// "mcp", "export k8s") by executing airlock-server with the same
// arguments in place of this process: the same pid, stdio, signals and
// exit status. airlock-server is taken from airlock's own folder under
// the rules the sandbox applies to airlock-init (internal/sibling), opened
// once and executed through its fd. runServer returns only when it cannot
// be run: it then says why and how to build it, and nothing is started.
func runServer(command string, args []string, stderr io.Writer) int {
	return runSibling(serverBinary, command, args, stderr)
}

// runSibling is runServer for the program binary of airlock's folder.
func runSibling(binary, command string, args []string, stderr io.Writer) int {
	self, err := os.Executable()
	if err == nil {
		var f *os.File
		if f, err = sibling.Open(self, binary); err == nil {
			err = execFile(f, args) // returns only on failure
			f.Close()
		}
	}
	fmt.Fprintln(stderr, siblingRefusal(binary, command, self, err))
	return cli.ExitFailed
}

// siblingRefusal is the one line that says why `airlock COMMAND` could
// not run binary (err), where airlock looked for it (next to self)
// and how to build it there.
func siblingRefusal(binary, command, self string, err error) string {
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
	return fmt.Sprintf("airlock %s: this command is in %s, %s; build it there with: go build -o %s ./cmd/%[2]s (or every command: go build -o %[4]s ./cmd/...)",
		command, binary, why, termtext.Field(dir))
}
