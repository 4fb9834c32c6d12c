//go:build !linux

package seccomp

import (
	"errors"
	"fmt"
	"runtime"
)

// Install loads prog as the process's seccomp filter. seccomp exists only
// on Linux, so elsewhere it returns an error wrapping errors.ErrUnsupported
// and installs nothing.
func Install(prog []Insn) error {
	return fmt.Errorf("seccomp: install filter on %s: %w: run the sandbox on Linux", runtime.GOOS, errors.ErrUnsupported)
}
