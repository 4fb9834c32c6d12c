//go:build !linux

package connbroker

import (
	"errors"
	"fmt"
	"runtime"
)

// Serve answers a seccomp filter's connect notifications. Seccomp exists
// only on Linux, so elsewhere it returns an error wrapping
// errors.ErrUnsupported and answers nothing; it does not close listener,
// which cannot be a seccomp listener here.
func Serve(listener int, decide func(Request) Verdict, stop <-chan struct{}) error {
	return Handler{Decide: decide}.Serve(listener, stop)
}

// Serve is the package's Serve with h: elsewhere than Linux it returns an
// error wrapping errors.ErrUnsupported.
func (h Handler) Serve(listener int, stop <-chan struct{}) error {
	return fmt.Errorf("connbroker: serve on %s: %w: the connect broker needs seccomp user notification; run the sandbox on Linux", runtime.GOOS, errors.ErrUnsupported)
}

// Probe reports that the broker cannot run here: it needs Linux.
func Probe() error {
	return fmt.Errorf("connbroker: %w on %s: the connect broker needs Linux", errors.ErrUnsupported, runtime.GOOS)
}

// broker is the Linux broker's state, which a Call points to; it has none
// elsewhere.
type broker struct{}
