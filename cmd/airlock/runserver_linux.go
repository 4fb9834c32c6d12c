package main

import (
	"os"
	"strconv"
	"syscall"
)

// execFile executes the program open as f in place of this process, with
// args after its own path as argv[0], and the environment unchanged. It
// goes through /proc/self/fd (as the sandbox starts airlock-init), so the
// file executed is the one checked; syscall.Exec also gives it the
// RLIMIT_NOFILE this process started with. It returns only on failure.
func execFile(f *os.File, args []string) error {
	argv := append([]string{f.Name()}, args...)
	err := syscall.Exec("/proc/self/fd/"+strconv.Itoa(int(f.Fd())), argv, os.Environ())
	return &os.PathError{Op: "execute", Path: f.Name(), Err: err}
}
