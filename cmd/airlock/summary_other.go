//go:build !linux

package main

// isTerminal reports false: airlock runs sandboxes only on Linux, and
// elsewhere its summary stays plain.
func isTerminal(fd int) bool { return false }

// saveTerminal does nothing where airlock runs no sandbox.
func saveTerminal(fd int) (restore func()) { return func() {} }
