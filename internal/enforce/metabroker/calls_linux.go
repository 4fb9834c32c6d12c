package metabroker

import "golang.org/x/sys/unix"

// op is what a call changes.
type op uint8

const (
	opChmod op = iota
	opChown
	opUtimes
	opSetxattr
	opRemovexattr
)

// shape is where a call names its object: the arguments before the op's
// own.
type shape uint8

const (
	shapePath  shape = iota // (path, ...): symlinks followed
	shapeLPath              // (path, ...): a final symlink is the object
	shapeFD                 // (fd, ...)
	shapeAt                 // (dirfd, path, ...): the flags argument decides
)

// timesKind is the layout of a utime call's times argument.
type timesKind uint8

const (
	timesNone     timesKind = iota
	timesUtimbuf            // struct utimbuf: actime, modtime (time_t)
	timesTimeval            // struct timeval[2]: seconds, microseconds
	timesTimespec           // struct timespec[2]: seconds, nanoseconds, UTIME_NOW, UTIME_OMIT
)

// call describes one syscall the broker answers.
type call struct {
	name  string
	op    op
	shape shape
	// flags is the index of the AT_* flags argument of an at-form call,
	// or -1: none (symlinks followed, no empty path).
	flags int
	times timesKind
}

// at flags a call may take (linux/fcntl.h).
const atFlags = unix.AT_SYMLINK_NOFOLLOW | unix.AT_EMPTY_PATH

// commonCalls are the calls amd64 and arm64 share, by number.
var commonCalls = map[int]call{
	unix.SYS_FCHMOD:       {"fchmod", opChmod, shapeFD, -1, timesNone},
	unix.SYS_FCHMODAT:     {"fchmodat", opChmod, shapeAt, -1, timesNone},
	unix.SYS_FCHMODAT2:    {"fchmodat2", opChmod, shapeAt, 3, timesNone},
	unix.SYS_FCHOWN:       {"fchown", opChown, shapeFD, -1, timesNone},
	unix.SYS_FCHOWNAT:     {"fchownat", opChown, shapeAt, 4, timesNone},
	unix.SYS_UTIMENSAT:    {"utimensat", opUtimes, shapeAt, 3, timesTimespec},
	unix.SYS_SETXATTR:     {"setxattr", opSetxattr, shapePath, -1, timesNone},
	unix.SYS_LSETXATTR:    {"lsetxattr", opSetxattr, shapeLPath, -1, timesNone},
	unix.SYS_FSETXATTR:    {"fsetxattr", opSetxattr, shapeFD, -1, timesNone},
	unix.SYS_REMOVEXATTR:  {"removexattr", opRemovexattr, shapePath, -1, timesNone},
	unix.SYS_LREMOVEXATTR: {"lremovexattr", opRemovexattr, shapeLPath, -1, timesNone},
	unix.SYS_FREMOVEXATTR: {"fremovexattr", opRemovexattr, shapeFD, -1, timesNone},
}

// calls are the calls the broker answers on this architecture, by number:
// commonCalls and the architecture's own (archCalls).
var calls = func() map[int]call {
	m := make(map[int]call, len(commonCalls)+len(archCalls))
	for nr, c := range commonCalls {
		m[nr] = c
	}
	for nr, c := range archCalls {
		m[nr] = c
	}
	return m
}()

// Syscalls returns the names of the syscalls the broker answers on this
// architecture: the ones the landlock backend's filter must hand it.
func Syscalls() []string {
	names := make([]string, 0, len(calls))
	for _, c := range calls {
		names = append(names, c.name)
	}
	return names
}
