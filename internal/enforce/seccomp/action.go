package seccomp

import "fmt"

// Action is a seccomp filter return value (SECCOMP_RET_* in
// linux/seccomp.h): the action in the high 16 bits, its data (an errno) in
// the low 16.
type Action uint32

// The actions the airlock filter uses. See seccomp(2).
const (
	// ActAllow lets the syscall run (SECCOMP_RET_ALLOW).
	ActAllow Action = 0x7fff0000
	// ActKillProcess kills the whole process with SIGSYS
	// (SECCOMP_RET_KILL_PROCESS, Linux 4.14). It is reserved for calls no
	// program built for this machine makes: a foreign architecture or the
	// x32 ABI. Older kernels treat the unknown value as SECCOMP_RET_KILL,
	// which kills the thread; either way the call does not run.
	ActKillProcess Action = 0x80000000

	// ActEPERM fails the syscall with EPERM: the default for a syscall the
	// filter does not allow. It is a clean error rather than a kill, so a
	// program can report it (and the sandbox can surface it) instead of
	// dying mid-write.
	ActEPERM = actErrno | errnoEPERM
	// ActENOSYS fails the syscall with ENOSYS, which programs read as "this
	// kernel is too old" and answer by falling back to an older syscall.
	ActENOSYS = actErrno | errnoENOSYS

	actErrno Action = 0x00050000 // SECCOMP_RET_ERRNO; the errno is in the low 16 bits
	actMask  Action = 0xffff0000 // SECCOMP_RET_ACTION_FULL
)

// Errno numbers used by the filter. They are the asm-generic values that
// amd64 and arm64 share, spelled out so the portable half needs no x/sys.
const (
	errnoEPERM  = 1  // EPERM: operation not permitted
	errnoENOSYS = 38 // ENOSYS: function not implemented
)

// Errno reports the errno an ERRNO action returns, and whether a is one.
func (a Action) Errno() (errno uint16, ok bool) {
	if a&actMask != actErrno {
		return 0, false
	}
	return uint16(a), true
}

// String names the action as seccomp(2) does, e.g. "allow" or "errno(1)".
func (a Action) String() string {
	if e, ok := a.Errno(); ok {
		return fmt.Sprintf("errno(%d)", e)
	}
	switch a {
	case ActAllow:
		return "allow"
	case ActKillProcess:
		return "kill_process"
	}
	return fmt.Sprintf("action(%#x)", uint32(a))
}
