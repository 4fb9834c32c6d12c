//go:build !linux

package main

import (
	"fmt"
	"runtime"
)

// hybridCgroups is false: there are no cgroups here.
func hybridCgroups() bool { return false }

// copyInit refuses: the bundle's init is a Linux binary.
func copyInit(string) (string, error) {
	return "", fmt.Errorf("the bundle's init is a Linux binary and this airlock is built for %s: export on Linux, or pass --no-init", runtime.GOOS)
}
