package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"time"

	"github.com/airlock-sandbox/airlock/guard"
	"github.com/airlock-sandbox/airlock/policy"
)

// Session is the part of a live sandbox session the server uses; cmd/airlock
// adapts *sandbox.Session to it. Implementations must be safe for
// concurrent use.
type Session interface {
	// ID returns the session's random identifier, used in URLs.
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
	Info() Info

	// Done is closed when the session has ended, by Close, its deadline or
	// its context.
	Done() <-chan struct{}

	// Close ends the session and everything running in it. It may be
	// called more than once.
	Close() error
}

// NewSessionFunc starts a session under p that lives until it is closed,
// its max_wall deadline passes, or ctx ends.
type NewSessionFunc func(ctx context.Context, p *policy.Policy) (Session, error)

// ErrSessionClosed is matched (errors.Is) by the error Session.Exec returns
// once the session has ended.
var ErrSessionClosed = errors.New("server: session closed")

// ExecRequest is one command to run in a session. Its fields are those of
// sandbox.ExecRequest, so that cmd/airlock converts one into the other.
type ExecRequest struct {
	// Args is the command line; Args[0] must be in allowed_tools.
	Args []string

	// Dir is the working directory in the sandbox. Empty means the
	// session's workspace, else /tmp.
	Dir string

	// Env adds NAME=value pairs for this exec. Nil adds nothing.
	Env []string

	// Stdin is the command's standard input. Nil means /dev/null.
	Stdin io.Reader

	// Stdout and Stderr, when set, receive output as it is produced.
	Stdout, Stderr io.Writer

	// PTY gives the command a pseudo-terminal (sandbox.ExecRequest.PTY).
	PTY bool

	// Timeout bounds this exec. Zero means until the session's deadline.
	Timeout time.Duration
}

// Info describes a live session.
type Info struct {
	ID        string    // as Session.ID
	Created   time.Time // when the session started
	Deadline  time.Time // when max_wall ends it
	Workspace string    // first fs_write grant; "" when there is none
	Usage     Usage     // what the session has consumed so far
	Execs     int       // execs run so far

	// PendingDenials are the denials not yet in an exec's report (those
	// of background processes between execs), bounded like a report's.
	PendingDenials []Denial
	// DenialCounts counts every denial since the session started.
	DenialCounts DenialCounts
}

// Denial is one distinct refused operation. Its fields are those of
// sandbox.Denial, so that cmd/airlock converts one into the other.
type Denial struct {
	Layer   string `json:"layer"`
	Op      string `json:"op"`
	Target  string `json:"target"`
	Rule    string `json:"rule"`
	Message string `json:"message"`
	Hint    string `json:"hint,omitempty"` // what to do instead within the grants
	Count   int64  `json:"count"`
}

// DenialCounts counts denials, itemized or not. Its fields are those of
// sandbox.DenialCounts, so that cmd/airlock converts one into the other.
type DenialCounts struct {
	Total   int64            `json:"total"`
	ByLayer map[string]int64 `json:"by_layer"` // nil is sent as {}
	Dropped int64            `json:"dropped"`
}

// Usage is what a session has consumed. Its fields are those of
// sandbox.Usage, so that cmd/airlock converts one into the other.
type Usage struct {
	CPUMS          int64 `json:"cpu_ms"`
	MaxMemoryBytes int64 `json:"max_memory_bytes"`
	Ops            int64 `json:"ops"`
	OutputBytes    int64 `json:"output_bytes"`
	WriteBytes     int64 `json:"write_bytes"` // added to fs_write grants (max_write)
}
