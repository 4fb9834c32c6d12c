package nsinit

import (
	"github.com/airlock-sandbox/airlock/internal/enforce/seccomp"
	"github.com/airlock-sandbox/airlock/plan/spec"
)

// installSeccomp compiles the plan's syscall profile for this architecture
// and installs it on every thread (TSYNC).
//
// Preconditions:
//   - no_new_privs is set
//   - it is the last restriction before the command is forked and executed
func installSeccomp(pl *spec.Plan) error {
	prog, err := seccomp.Build(pl.Seccomp, seccomp.Options{})
	if err != nil {
		return err
	}
	return seccomp.Install(prog)
}
