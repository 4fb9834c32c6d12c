//go:build !linux

package sandbox

import (
	"context"

	"github.com/airlock-sandbox/airlock/plan"
)

// Init returns at once: there is no sandbox init on this OS.
func Init() {}

// Plan returns ErrUnsupported: the plan depends on Linux mounts.
func (c *Cmd) Plan() (*plan.Plan, error) { return nil, ErrUnsupported }

// Run returns ErrUnsupported: airlock's kernel enforcement needs Linux.
func (c *Cmd) Run(ctx context.Context) (*Report, error) { return nil, ErrUnsupported }
