package main

import "golang.org/x/sys/unix"

// isTerminal reports whether fd is a terminal: only a tty answers the
// TCGETS ioctl (ioctl_tty(2)).
func isTerminal(fd int) bool {
	_, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	return err == nil
}

// saveTerminal records the settings of the terminal on fd, when it is one,
// and returns a func that puts them back: a command that read from the
// operator's terminal (its stdin) may have turned off echo or line
// editing, and must not leave it so after airlock exits.
func saveTerminal(fd int) (restore func()) {
	t, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return func() {}
	}
	return func() { _ = unix.IoctlSetTermios(fd, unix.TCSETS, t) } // the terminal may be gone; nothing to do then
}
