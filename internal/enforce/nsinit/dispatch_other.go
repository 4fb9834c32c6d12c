//go:build !linux

package nsinit

// Dispatch returns at once: there is no sandbox init, OCI launcher or
// pause program on this OS.
func Dispatch() {}
