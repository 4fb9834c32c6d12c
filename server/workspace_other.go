//go:build !unix

package server

import (
	"io/fs"
	"os"
)

// ownedByUs reports whether the file belongs to the server's user. Without
// Unix owners there is nothing to compare; the mode check still applies.
func ownedByUs(fs.FileInfo) bool { return true }

// lockFolder locks nothing here: without flock, folders of killed servers
// are never swept.
func lockFolder(string) (*os.File, error) { return nil, nil }

// takeLock never succeeds here, so nothing is swept.
func takeLock(string) (*os.File, bool) { return nil, false }
