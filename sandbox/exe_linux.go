package sandbox

import (
	"fmt"
	"os"

	"github.com/airlock-sandbox/airlock/internal/image"
	"github.com/airlock-sandbox/airlock/internal/sibling"
)

// InitBinary is the name of the small init binary (cmd/airlock-init) that
// the supervisor prefers to re-executing itself.
const InitBinary = "airlock-init"

// openInit opens the binary to re-execute as the sandbox's init and
// returns nil when the supervisor should re-execute itself
// (/proc/self/exe). Config.Executable wins when set; otherwise airlock-init
// next to this executable is used when it is trustworthy: a regular file
// (not a symlink), executable, owned by this binary's owner or root, and
// writable by nobody else. The file is opened once and executed through
// its fd, so it cannot be swapped after the check and the sandbox's
// unprivileged uid never has to walk the host's directories to find it.
// Every choice runs the same init code: the fallback changes speed, not
// enforcement. Re-executing this program needs Init to have been called
// in it (errNoInit otherwise).
func openInit(configured string) (*os.File, error) {
	if configured != "" {
		return os.Open(configured)
	}
	self, err := os.Executable()
	var f *os.File
	if err == nil {
		f = openInitNextTo(self)
	}
	if f == nil && !initCalled.Load() {
		return nil, errNoInit
	}
	return f, nil
}

// checkInit refuses, before anything is made, a start whose init cannot
// be found (errNoInit), so that the refusal names the missing
// sandbox.Init() rather than whatever a later step lacks.
func checkInit(configured string) error {
	if configured == "" && initCalled.Load() {
		return nil // re-executing this program is always possible: nothing to open twice
	}
	f, err := openInit(configured)
	if f != nil {
		f.Close()
	}
	return err
}

// openInitNextTo applies openInit's rules to the binary at self: the
// checks are internal/sibling's, which airlock's CLI applies to
// airlock-server too. A refused or missing airlock-init is not an error:
// the supervisor re-executes itself instead.
func openInitNextTo(self string) *os.File {
	f, err := sibling.Open(self, InitBinary)
	if err != nil {
		return nil
	}
	return f
}

// unpackImage unpacks the image src below cache (image.Unpack) in a child
// that re-executes this program: Init dispatches it. airlock-init does not
// hold the unpack (its start is on the path of every sandbox), so neither
// Config.Executable nor a sibling airlock-init is used for it.
func unpackImage(src, cache string) (*image.Unpacked, error) {
	if !initCalled.Load() {
		return nil, fmt.Errorf("image %s: the unpack re-executes this program, which never called sandbox.Init(): call sandbox.Init() first thing in main", src)
	}
	return image.Unpack(src, cache, image.Options{})
}
