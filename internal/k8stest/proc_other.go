//go:build !linux

package k8stest

import "syscall"

// sysProcAttr is empty: only Linux has PR_SET_PDEATHSIG, so elsewhere a
// test killed by go test -timeout leaves its control plane running.
func sysProcAttr() *syscall.SysProcAttr { return nil }
