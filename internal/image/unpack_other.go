//go:build !linux

package image

import (
	"errors"
	"fmt"
)

// Unpack refuses: an image is unpacked only by a confined child (user
// namespaces or Landlock), which needs Linux.
func Unpack(src, cache string, opt Options) (*Unpacked, error) {
	return nil, fmt.Errorf("image %s: unpacking an image needs Linux, where airlock confines the unpack: unpack it there, or give a root filesystem folder as rootfs: %w", src, errors.ErrUnsupported)
}
