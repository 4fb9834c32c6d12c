package k8stest

import "syscall"

// sysProcAttr makes the child die with the test binary: a test killed by
// go test -timeout runs no Cleanup.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
