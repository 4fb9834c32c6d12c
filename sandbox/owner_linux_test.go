package sandbox_test

import (
	"io/fs"
	"syscall"
)

func fileOwner(fi fs.FileInfo) int {
	if fi == nil {
		return -1
	}
	return int(fi.Sys().(*syscall.Stat_t).Uid)
}
