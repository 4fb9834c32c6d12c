// Package landlock confines the sandbox's processes with Landlock, the Linux
// security module that lets an unprivileged process drop its own access to
// the filesystem, to TCP ports and to processes outside its domain
// (landlock(7)).
//
// It is the second, independent filesystem layer: airlock's mount namespace
// already shows the sandbox only the paths it was granted, and Landlock still
// denies what was not granted if a mount is wrong, a bind is writable by
// mistake, or a granted directory holds a symlink or hard link to something
// else. It stops a sandboxed program from reading credentials, writing outside
// its fs_write paths, executing anything but its allowed tools, connecting to
// TCP ports other than the egress proxy's, and (ABI 6) signalling or
// reaching the abstract unix sockets of processes outside the sandbox.
//
// The package has a portable half and a Linux half. Compile (ruleset.go,
// access.go) turns a Config into a Ruleset: the kernel's handled-access
// masks, per-path and per-port rights and restrict_self flags, masked to
// what a given Landlock ABI supports, with every right the ABI cannot enforce
// listed in Dropped. It touches no OS API and is tested as data. Restrict
// (landlock_linux.go, syscall_unsafe.go) opens each path, adds the rules,
// sets no_new_privs, enforces the ruleset on every thread of the process and
// then proves it took effect with SelfTest; any failure is returned, never
// logged and skipped. Elsewhere Restrict returns an error wrapping
// errors.ErrUnsupported.
//
// Abstract rights map to Landlock access bits as follows (minimum ABI in
// parentheses; bits the kernel's ABI lacks are dropped and reported):
//
//	Read    dir:    READ_FILE|READ_DIR (1)
//	        file:   READ_FILE (1)
//	Write   dir:    WRITE_FILE|REMOVE_DIR|REMOVE_FILE|MAKE_DIR|MAKE_REG|MAKE_SYM|
//	                MAKE_FIFO|MAKE_SOCK (1), REFER (2), TRUNCATE (3)
//	        file:   WRITE_FILE (1), TRUNCATE (3)
//	        device: WRITE_FILE (1), TRUNCATE (3), IOCTL_DEV (5)
//	Execute any:    EXECUTE (1)
//
// MAKE_CHAR and MAKE_BLOCK are handled and never granted, so no device node
// can be created anywhere. Every right the ABI supports is handled, so
// whatever is not granted is denied. Device nodes are not special to
// Landlock: /dev/null, /dev/zero, /dev/tty and the like must be listed
// explicitly (Read|Write for /dev/null), and Write on a device also grants
// IOCTL_DEV so isatty(3) and terminal ioctls behave as usual.
//
// Limits the rest of airlock must cover:
//   - Landlock cannot restrict mmap(2) with PROT_EXEC: a readable file can be
//     mapped executable (that is how the dynamic loader loads libraries).
//     airlock compensates by mounting fs_write paths noexec and by not
//     mounting executables that were not granted at all.
//   - TCP rules (ABI 4) do not cover Multipath TCP sockets or UDP; seccomp
//     refuses IPPROTO_MPTCP and the empty network namespace covers the rest.
//   - Paths are resolved when the rule is added (symlinks followed): a rule
//     lands on an inode, so Restrict must run after pivot_root, with paths as
//     the sandbox sees them.
//   - Before ABI 8, landlock_restrict_self(2) confines only the calling
//     thread. Restrict therefore uses syscall.AllThreadsSyscall, which Go
//     supports only in binaries without cgo; see Config.ThreadOnly. Each
//     thread then holds its own copy of the domain, so until execve(2)
//     leaves a single thread, an abstract unix socket one thread of the Go
//     process made is out of scope for another: restrict just before
//     starting the command. ABI 8's LANDLOCK_RESTRICT_SELF_TSYNC would
//     remove both limits; this package stops at ABI 7 (MaxABI).
//
// Audit: from ABI 7 the kernel logs Landlock denials to the audit subsystem
// (AUDIT_LANDLOCK_ACCESS records). By default it logs only denials made
// before the restricted process calls execve(2); Config.LogNewExec asks it to
// log the command's denials too. Those records are how a later issue reports
// filesystem denials in the run report.
//
// This package must not import net/http, egress, server or mcp; it depends
// only on the standard library and golang.org/x/sys/unix.
package landlock
