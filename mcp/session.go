package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"time"

	"github.com/airlock-sandbox/airlock/guard"
	"github.com/airlock-sandbox/airlock/policy"
)

// Session is the part of a live sandbox session the tools use; cmd/airlock
// adapts *sandbox.Session to it. This package does not import sandbox,
// which reaches internal/enforce. Implementations must be safe for
// concurrent use.
type Session interface {
	// ID returns the session's random identifier.
	ID() string

	// Exec runs one command in the session and returns the JSON encoding
	// of its report (DESIGN §4). It returns an error only when the session
	// has ended (an error matching ErrSessionClosed) or the request is
	// misused; a command that fails or is refused is a report.
	Exec(ctx context.Context, req ExecRequest) (json.RawMessage, error)

	// Guard returns the guard for file operations on the session's
	// grants; it shares the session's budget meter.
	Guard() *guard.Guard

	// Info describes the session.
	Info() SessionInfo

	// Close ends the session and everything running in it. It may be
	// called more than once.
	Close() error
}

// NewSessionFunc starts a session under p that lives until it is closed,
// its max_wall deadline passes, or ctx ends.
type NewSessionFunc func(ctx context.Context, p *policy.Policy) (Session, error)

// ErrSessionClosed is matched (errors.Is) by the error Session.Exec returns
// once the session has ended.
var ErrSessionClosed = errors.New("mcp: session closed")

// ExecRequest is one command to run in a session. Its fields are those of
// sandbox.ExecRequest, so that cmd/airlock converts one into the other.
type ExecRequest struct {
	// Args is the command line; Args[0] must be in allowed_tools.
	Args []string

	// Dir is the working directory in the sandbox. Empty means the
	// session's workspace, else /tmp.
	Dir string

	// Stdin is the command's standard input. Nil means /dev/null.
	Stdin io.Reader

	// PTY gives the command a pseudo-terminal (sandbox.ExecRequest.PTY).
	PTY bool

	// Timeout bounds this exec. Zero means until the session's deadline.
	Timeout time.Duration
}

// SessionInfo describes a live session.
type SessionInfo struct {
	ID        string // as Session.ID
	Workspace string // first fs_write grant; "" when there is none
	Execs     int    // execs run so far
	Usage     Usage  // what the session has consumed so far
}
