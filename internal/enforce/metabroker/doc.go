// Package metabroker is the supervisor side of the landlock backend's
// metadata calls: chmod, chown, utime and the extended-attribute calls, in
// every path and fd form. Landlock has no right for a file's mode, owner,
// times or extended attributes, so under Landlock alone a sandbox may
// change them on any file its uid owns, wherever it is: make a secret
// world-readable, a binary set-user-ID, plant an ACL. The landlock
// backend's seccomp filter therefore hands these calls to the supervisor
// (plan.WithoutNamespacesSeccomp sends them to the connect broker's
// listener, whose Handler.Syscall is Broker.Handle), and the broker
// carries each one out itself, or refuses it.
//
// It stops a sandboxed program from changing metadata outside its fs_write
// grants and scratch folder, and inside them from setting the set-user-ID
// or set-group-ID bits of a file, giving a file to another owner, setting
// any extended attribute but user.* and POSIX ACLs, and touching a
// protected path. It never lets the kernel run the target's own call after
// a check (SECCOMP_USER_NOTIF_FLAG_CONTINUE would read the path from the
// target's memory again, after the check, where another thread can have
// changed it): it reads the path once, resolves it to an open file itself,
// makes sure that file is linked beneath a grant (its path, opened again
// beneath the grant's fd with RESOLVE_BENEATH and no symlinks, is the same
// inode), and then changes that open file, never a path. An fd form acts
// on the broker's copy of the target's fd (pidfd_getfd), the very file the
// target holds, so swapping the fd number afterwards changes nothing.
//
// It acts with the sandbox's authority and no more: every resolution, check
// and change runs on a thread of its own whose real, effective, saved and
// file-system ids are the sandbox's, with no supplementary groups when the
// supervisor is root, and no capabilities. The kernel's own rules for the
// sandbox's uid (the owner alone chmods, a file goes to no other owner,
// trusted.* needs CAP_SYS_ADMIN) therefore hold as they would for the
// sandbox's own call; the broker's rules only take away.
//
// Fail closed: a call whose object cannot be found beneath a grant is
// refused with EPERM; when the supervisor dies the kernel fails every
// handed-over call with ENOSYS; a call the broker cannot read is refused.
// The Linux half needs what the connect broker needs, openat2(2) (Linux
// 5.6) and fchmodat2(2) (Linux 6.6); the landlock backend runs on Linux
// 6.12 or later (Landlock ABI 6).
package metabroker
