package server

import (
	"context"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/guard"
	"github.com/airlock-sandbox/airlock/policy"
)

// Session is the part of a live sandbox session the server uses, over the
// wire types of package api: *sandbox.Session satisfies it as it is.
// Implementations must be safe for concurrent use.
type Session interface {
	// ID returns the session's random identifier, used in URLs.
	ID() string

	// Exec runs one command in the session and returns its report. It
	// returns an error only when the session has ended (an error matching
	// api.ErrSessionClosed) or the request is misused; a command that
	// fails or is refused is a report.
	Exec(ctx context.Context, req api.ExecRequest) (*api.Report, error)

	// Guard returns the guard for file operations on the session's
	// grants; it shares the session's budget meter.
	Guard() *guard.Guard

	// Info describes the session; the server fills in IdleDeadline.
	Info() api.SessionInfo

	// Extend moves the session's end d past its current end (past now,
	// if that has passed), never beyond its maximum lifetime, and returns
	// the end in force; two calls of 30 minutes add an hour. It fails with
	// an error matching api.ErrSessionClosed once it ended.
	Extend(d time.Duration) (time.Time, error)

	// Done is closed when the session has ended, by Close, its deadline or
	// its context.
	Done() <-chan struct{}

	// Close ends the session and everything running in it. It may be
	// called more than once.
	Close() error
}

// NewSessionFunc starts a session under p that lives until it is closed,
// its lifetime ends, or ctx ends.
type NewSessionFunc func(ctx context.Context, p *policy.Policy) (Session, error)
