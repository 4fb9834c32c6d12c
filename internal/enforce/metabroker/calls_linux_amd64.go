package metabroker

import "golang.org/x/sys/unix"

// archCalls are the calls only amd64 has: the forms arm64 dropped for
// their at-form.
var archCalls = map[int]call{
	unix.SYS_CHMOD:     {"chmod", opChmod, shapePath, -1, timesNone},
	unix.SYS_CHOWN:     {"chown", opChown, shapePath, -1, timesNone},
	unix.SYS_LCHOWN:    {"lchown", opChown, shapeLPath, -1, timesNone},
	unix.SYS_UTIME:     {"utime", opUtimes, shapePath, -1, timesUtimbuf},
	unix.SYS_UTIMES:    {"utimes", opUtimes, shapePath, -1, timesTimeval},
	unix.SYS_FUTIMESAT: {"futimesat", opUtimes, shapeAt, -1, timesTimeval},
}
