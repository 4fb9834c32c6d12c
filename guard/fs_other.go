//go:build !linux

package guard

import (
	"errors"
	"fmt"
)

// errNoFS is returned for every file operation: without openat2(2)
// RESOLVE_BENEATH a path cannot be confined to its grant root, and a string
// check alone would let a symlink escape.
var errNoFS = fmt.Errorf("file access needs linux openat2 to confine paths to their grant: %w", errors.ErrUnsupported)

func (g *Guard) readAt(root, rel string) ([]byte, error)  { return nil, errNoFS }
func writeAt(root, rel string, data []byte) error         { return errNoFS }
func removeAt(root, rel string) error                     { return errNoFS }
func (g *Guard) listAt(root, rel string) ([]Entry, error) { return nil, errNoFS }
