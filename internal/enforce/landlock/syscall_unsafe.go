//go:build linux

package landlock

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// rulesetAttr is struct landlock_ruleset_attr up to .scoped (ABI 6).
type rulesetAttr struct {
	handledAccessFS  uint64 // ABI 1
	handledAccessNet uint64 // ABI 4
	scoped           uint64 // ABI 6
}

// netPortAttr is struct landlock_net_port_attr (ABI 4).
type netPortAttr struct {
	allowedAccess uint64
	port          uint64
}

// ruleNetPort is LANDLOCK_RULE_NET_PORT (ABI 4), missing from x/sys/unix.
const ruleNetPort = 2

// createRuleset calls landlock_create_ruleset(2) and returns the ruleset fd
// (close-on-exec). It passes only the attribute fields rs.ABI knows, so the
// size always matches what that kernel expects.
func createRuleset(rs *Ruleset) (int, error) {
	attr := rulesetAttr{
		handledAccessFS:  rs.HandledFS,
		handledAccessNet: rs.HandledNet,
		scoped:           rs.Scoped,
	}
	size := unsafe.Sizeof(attr)
	switch {
	case rs.ABI < 4:
		size = unsafe.Offsetof(attr.handledAccessNet)
	case rs.ABI < 6:
		size = unsafe.Offsetof(attr.scoped)
	}
	fd, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), size, 0)
	if errno != 0 {
		return -1, errno
	}
	return int(fd), nil
}

// addPathRule calls landlock_add_rule(2) with LANDLOCK_RULE_PATH_BENEATH
// (ABI 1): allowed rights beneath the file open as parentFD.
func addPathRule(rulesetFD, parentFD int, allowed uint64) error {
	attr := unix.LandlockPathBeneathAttr{Allowed_access: allowed, Parent_fd: int32(parentFD)}
	_, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(rulesetFD),
		unix.LANDLOCK_RULE_PATH_BENEATH, uintptr(unsafe.Pointer(&attr)), 0, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// addPortRule calls landlock_add_rule(2) with LANDLOCK_RULE_NET_PORT
// (ABI 4): allowed rights on one TCP port.
func addPortRule(rulesetFD int, r PortRule) error {
	attr := netPortAttr{allowedAccess: r.Allowed, port: uint64(r.Port)}
	_, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(rulesetFD),
		ruleNetPort, uintptr(unsafe.Pointer(&attr)), 0, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}
