package nsinit

import "github.com/airlock-sandbox/airlock/internal/enforce/seccomp"

// installSeccomp builds the default allow-list for this architecture and
// installs it on every thread (TSYNC).
//
// Preconditions:
//   - no_new_privs is set
//   - it is the last restriction before the command is forked and executed
func installSeccomp() error {
	prog, err := seccomp.Build(seccomp.Options{})
	if err != nil {
		return err
	}
	return seccomp.Install(prog)
}
