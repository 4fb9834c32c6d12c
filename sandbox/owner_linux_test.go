package sandbox_test

import (
	"io/fs"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/policy/budget"
)

func fileOwner(fi fs.FileInfo) int {
	if fi == nil {
		return -1
	}
	return int(fi.Sys().(*syscall.Stat_t).Uid)
}

func spec20s() budget.Limits { return budget.Limits{Wall: 20 * time.Second} }
