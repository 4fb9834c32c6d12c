package main

import "golang.org/x/sys/unix"

// isTerminal reports whether fd is a terminal: only a tty answers the
// TCGETS ioctl (ioctl_tty(2)).
func isTerminal(fd int) bool {
	_, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	return err == nil
}
