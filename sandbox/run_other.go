//go:build !linux

package sandbox

import (
	"context"

	"github.com/airlock-sandbox/airlock/internal/image"
)

// Init returns at once: there is no sandbox init on this OS.
func Init() {}

// Run returns ErrUnsupported: airlock's kernel enforcement needs Linux.
func (c *Cmd) Run(ctx context.Context) (*Report, error) { return nil, ErrUnsupported }

// unpackImage refuses (image.Unpack): an image is unpacked only on Linux.
func unpackImage(src, cache string) (*image.Unpacked, error) {
	return image.Unpack(src, cache, image.Options{})
}
