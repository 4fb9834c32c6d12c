//go:build !linux

package doctor

import (
	"errors"
	"fmt"
)

// errNeedsLinux is what every probe reports off Linux.
var errNeedsLinux = fmt.Errorf("doctor: %w: airlock enforces only on Linux", errors.ErrUnsupported)

func kernelRelease() (string, error) { return "", errNeedsLinux }
func isRoot() bool                   { return false }
func isContainerRoot() bool          { return false }
func probeProc() error               { return errNeedsLinux }
func probeUserNS() error             { return errNeedsLinux }
func probeUnprivilegedUserNS() error { return errNeedsLinux }
func probeAppArmor() AppArmor        { return AppArmor{Err: errNeedsLinux} }
func probeSeccomp() error            { return errNeedsLinux }
func probeWritable(string) error     { return errNeedsLinux }
func probeAudit() Audit              { return Audit{Err: errNeedsLinux, Collector: errNeedsLinux} }
func probeIDMap() error              { return errNeedsLinux }
func probeMicroVM() MicroVM          { return MicroVM{Err: errNeedsLinux} }
