//go:build !linux

package sandbox

import (
	"context"
)

// Init returns at once: there is no sandbox init on this OS.
func Init() {}

// Run returns ErrUnsupported: airlock's kernel enforcement needs Linux.
func (c *Cmd) Run(ctx context.Context) (*Report, error) { return nil, ErrUnsupported }
