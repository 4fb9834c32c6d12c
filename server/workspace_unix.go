//go:build unix

package server

import (
	"io/fs"
	"os"
	"syscall"
)

// ownedByUs reports whether the file belongs to the server's effective user.
func ownedByUs(st fs.FileInfo) bool {
	sys, ok := st.Sys().(*syscall.Stat_t)
	return ok && int(sys.Uid) == os.Geteuid()
}
