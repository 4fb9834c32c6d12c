//go:build !linux

package fsaudit

import (
	"context"
	"errors"
	"fmt"
)

// Available returns an error wrapping ErrUnavailable and
// errors.ErrUnsupported: Landlock exists only on Linux.
func Available() error {
	return fmt.Errorf("%w: landlock is Linux only: %w", ErrUnavailable, errors.ErrUnsupported)
}

// Sync returns the error of Available.
func (c *Collector) Sync(ctx context.Context) error {
	return Available()
}

// Start returns the error of Available.
func Start(opts Options) (*Collector, error) {
	return nil, Available()
}
