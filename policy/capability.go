package policy

import (
	"errors"
	"strconv"
)

// Capability names one grant of a policy. Its String form is the key used in
// policy files, audit events, API errors and exports, and is defined only here.
type Capability int

// The capabilities a policy grants. The zero Capability is invalid.
const (
	FSRead Capability = iota + 1
	FSWrite
	NetHosts
	AllowedTools
	Budget
	Env
)

var capNames = [...]string{
	FSRead:       "fs_read",
	FSWrite:      "fs_write",
	NetHosts:     "net_hosts",
	AllowedTools: "allowed_tools",
	Budget:       "budget",
	Env:          "env",
}

// String returns the policy-file key of c, such as "fs_read".
func (c Capability) String() string {
	if c > 0 && int(c) < len(capNames) {
		return capNames[c]
	}
	return "capability(" + strconv.Itoa(int(c)) + ")"
}

// ErrDenied is matched (errors.Is) by every *DenyError.
var ErrDenied = errors.New("policy: operation denied")

// DenyError reports an operation that the policy does not grant.
type DenyError struct {
	Cap     Capability // the grant that would have allowed the operation
	Op      string     // what was attempted: "read", "write", "list", "connect", "exec"
	Subject string     // canonical path, host:port, or tool name
	Reason  string     // optional detail, e.g. "resolves to a private address"
	// Protected marks a write refused because the path is on the
	// protected list: widening fs_write would not allow it.
	Protected bool
	// Hint, when set, says what the program can do instead within its
	// grants, such as "use the real path instead of the symlink". It never
	// widens the policy, so it is safe to show the sandboxed program. ""
	// means there is nothing to say beyond Reason.
	Hint string
	// Fix, when set, is the policy change that would allow the operation,
	// computed by the denier because it knows more than the policy does
	// (which folder exists on the host, say). It is advice for the
	// operator, never for the program (see Suggestion). The zero Fix
	// leaves it to (*Policy).Suggest.
	Fix Suggestion
}

func (e *DenyError) Error() string {
	s := "policy: " + e.Cap.String() + " not granted for " + e.Subject
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	return s
}

// Is reports whether target is ErrDenied.
func (e *DenyError) Is(target error) bool { return target == ErrDenied }
