// Package sandbox is airlock's public library: run a command under a policy
// with every kernel layer on (namespaces, a root made of grants, Landlock,
// seccomp, no capabilities, cgroups, a deadline, an output cap and the
// egress proxy) and get a Report back. Programs that use it call Init first
// thing in main: the supervisor re-executes its own binary as the sandbox's
// init, and Init is where that child takes over.
//
// On Linux the work is in *_linux.go; elsewhere Run returns ErrUnsupported.
package sandbox

import (
	"errors"
	"fmt"
)

// ErrUnsupported wraps errors.ErrUnsupported: the host cannot enforce the policy.
var ErrUnsupported = fmt.Errorf("sandbox: %w", errors.ErrUnsupported)
