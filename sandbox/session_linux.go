package sandbox

import (
	"context"
	"errors"

	"github.com/airlock-sandbox/airlock/guard"
	"github.com/airlock-sandbox/airlock/policy"
)

// ErrSessionClosed is returned by Exec after the session ended.
var ErrSessionClosed = errors.New("sandbox: session closed")

// Session is a long-lived sandbox. PLACEHOLDER: the lead is writing the implementation.
type Session struct{}

// NewSession starts a sandbox that stays up until Close, its deadline, or ctx ends.
func NewSession(ctx context.Context, cfg Config) (*Session, error) {
	return nil, errors.New("sandbox: sessions not implemented yet")
}

// ID returns the session's random identifier.
func (s *Session) ID() string { return "" }

// Exec runs one command inside the session.
func (s *Session) Exec(ctx context.Context, req ExecRequest) (*Report, error) {
	return nil, ErrSessionClosed
}

// Guard returns the in-process guard for file operations on the session's grants.
func (s *Session) Guard() *guard.Guard { return nil }

// Info describes the session.
func (s *Session) Info() SessionInfo { return SessionInfo{} }

// Policy returns the session's policy.
func (s *Session) Policy() *policy.Policy { return nil }

// Done is closed when the session has ended.
func (s *Session) Done() <-chan struct{} { return nil }

// Close ends the session and everything running in it.
func (s *Session) Close() error { return nil }
