//go:build !linux

package main

import (
	"fmt"
	"os"
	"runtime"
	"strings"
)

// execFile refuses: only Linux executes a checked file through its fd
// (/proc/self/fd), and executing it by name again would run whatever the
// name holds by then.
func execFile(f *os.File, args []string) error {
	return fmt.Errorf("on %s airlock does not execute %s for you: run it directly: %s %s", runtime.GOOS, f.Name(), f.Name(), strings.Join(args, " "))
}
