//go:build !linux

package guard

import (
	"errors"
	"fmt"
	"io"
)

// errNoFS is returned for every file operation: without openat2(2)
// RESOLVE_BENEATH a path cannot be confined to its grant root, and a string
// check alone would let a symlink escape.
var errNoFS = fmt.Errorf("file access needs linux openat2 to confine paths to their grant: %w", errors.ErrUnsupported)

// heldRoot is a grant root; elsewhere than Linux none is ever opened.
type heldRoot struct{}

func holdRoots(grants []string, given map[string]int) (map[string]heldRoot, error) {
	held := make(map[string]heldRoot, len(grants))
	for _, g := range grants {
		held[g] = heldRoot{}
	}
	return held, nil
}

func releaseRoots(map[string]heldRoot) {}

func (g *Guard) readAt(root heldRoot, rel string) ([]byte, error)             { return nil, errNoFS }
func (g *Guard) copyAt(root heldRoot, rel string, w io.Writer) (int64, error) { return 0, errNoFS }
func writeAt(root heldRoot, rel string, r io.Reader) (int64, error)           { return 0, errNoFS }
func removeAt(root heldRoot, rel string) error                                { return errNoFS }
func (g *Guard) listAt(root heldRoot, rel string, max int) ([]Entry, bool, error) {
	return nil, false, errNoFS
}
