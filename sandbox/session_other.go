//go:build !linux

package sandbox

import (
	"context"
	"time"

	"github.com/airlock-sandbox/airlock/guard"
	"github.com/airlock-sandbox/airlock/policy"
)

// Session is a long-lived sandbox. Sessions need Linux: on this OS
// NewSession returns ErrUnsupported and no Session exists; the methods are
// here so that programs using them build everywhere.
type Session struct{}

// NewSession returns ErrUnsupported: airlock's kernel enforcement needs
// Linux.
func NewSession(ctx context.Context, cfg Config) (*Session, error) { return nil, ErrUnsupported }

// Exec returns ErrUnsupported.
func (s *Session) Exec(ctx context.Context, req ExecRequest) (*Report, error) {
	return nil, ErrUnsupported
}

// ID returns "".
func (s *Session) ID() string { return "" }

// Policy returns nil.
func (s *Session) Policy() *policy.Policy { return nil }

// Guard returns nil.
func (s *Session) Guard() *guard.Guard { return nil }

// Done returns a closed channel: there is no session.
func (s *Session) Done() <-chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}

// Info returns the zero SessionInfo.
func (s *Session) Info() SessionInfo { return SessionInfo{} }

// Writes returns nil.
func (s *Session) Writes() *Writes { return nil }

// Close returns ErrUnsupported.
func (s *Session) Close() error { return ErrUnsupported }

// Extend returns ErrUnsupported.
func (s *Session) Extend(d time.Duration) (time.Time, error) { return time.Time{}, ErrUnsupported }
