// Package fsaudit reports the filesystem (and TCP, scope) operations that
// Landlock refused inside a sandbox, so that the run report can name the
// grant that would have allowed them: `"/root/.aws/credentials" is
// outside fs_read`, `"/usr/bin/curl" is not in allowed_tools`.
//
// It closes the reporting gap of kernel enforcement: the egress proxy and
// the in-process checks see their own refusals, but a Landlock denial is
// only an EACCES inside the sandbox, which the program may swallow or
// misreport. Without this package an agent whose read of a credential
// file was stopped cannot tell a denial from a missing file, and an
// operator cannot see the attempt.
//
// # Where records come from
//
// From Landlock ABI 7 (Linux 6.15, CONFIG_AUDIT) the kernel writes an
// AUDIT_LANDLOCK_ACCESS record (1423) for each denial,
//
//	domain=1c5474024 blockers=fs.read_file path="/etc/hostname" dev="vda" ino=611
//
// and, once per domain, right after its first logged denial, an
// AUDIT_LANDLOCK_DOMAIN record (1424) naming the thread that created the
// domain with landlock_restrict_self(2), and another when the domain is
// freed with the number of denials the kernel counted:
//
//	domain=1c5474024 status=allocated mode=enforcing pid=5340 uid=0 exe="/x" comm="x"
//	domain=1c5474024 status=deallocated denials=3
//
// Paths are as the denied process saw them (its root and mounts): inside
// the sandbox, which is what the agent knows. Untrusted strings are hex
// when they hold spaces or unprintable bytes (audit_log_untrustedstring);
// the parser decodes them. See Documentation/admin-guide/LSM/landlock.rst
// and the "Logging" section of Documentation/userspace-api/landlock.rst.
//
// The kernel logs only while audit is enabled, and by default only denials
// made before the restricted process calls execve(2): the sandbox init
// must restrict itself with landlock.Config.LogNewExec (nsinit does) for
// the command's own denials to be logged.
//
// # How they are read
//
// Start opens a NETLINK_AUDIT socket (netlink(7)) bound to the multicast
// group AUDIT_NLGRP_READLOG (Linux 3.16), a read-only copy of the audit
// log for any number of readers with CAP_AUDIT_READ. Unlike registering as
// the audit daemon (AUDIT_SET pid), it never displaces auditd or journald.
// Records also go to auditd when one runs, or to the kernel log (printk,
// rate-limited) when none does.
//
// Start turns the kernel's audit on (AUDIT_SET enabled=1, which needs
// CAP_AUDIT_CONTROL) when it is off, unless Options.NoEnable is set. That
// is host-wide: every audit source (Landlock in any process, seccomp,
// AppArmor, audit rules) starts logging, records without a daemon are
// printed to the kernel log, and the kernel then gives every task created
// afterwards an audit context (audit_ever_enabled stays set until reboot),
// a small per-syscall cost. Close turns audit off again only when this
// Collector turned it on, no other reader is joined to an audit multicast
// group (any process, listed in /proc/net/netlink) and no audit daemon has
// registered meanwhile.
//
// # How records are attributed
//
// A record carries a domain id, not a process. The domain record names the
// host thread id of the task that created the domain; the Collector maps
// it to its process (/proc/<tid>/status Tgid) while that thread lives, and
// Collector.Track(pid) claims every domain created by the sandbox init's
// host pid. Processes the init forks inherit its domain, so their records
// carry the same id. A domain a sandboxed program stacks on top of ours is
// its own business: its denials name a process we do not track and are
// not reported. The init's Landlock self-test denial (Options.SelfTestPath)
// is dropped.
//
// # Limits
//
// Denials may be incomplete: the kernel drops records when its backlog
// (audit_backlog_limit, 64 by default) overflows or a rate limit is set,
// and the socket may overflow too. Run.Stats compares the records seen
// with the kernel's own count from the release records and says when
// something is missing. Identical denials (same op, target and rule) are
// reported once with a count. Create, remove and rename are checked on the
// parent directory, so their target is the directory.
//
// Reading needs root on the host: CAP_AUDIT_READ and CAP_AUDIT_CONTROL in
// the initial user and pid namespaces, and the initial network namespace,
// the only one the kernel multicasts audit records to. Rootless runs cannot
// report filesystem denials; Available says why, for the run report and
// `airlock doctor`.
//
// The portable half (record.go, denial.go, tracker.go) parses records,
// maps them to denials and attributes them, and is tested as data; the
// Linux half (collector_linux.go, netlink_linux.go) talks to the kernel.
// This package must not import net/http, egress, server or mcp; it
// depends on the standard library, golang.org/x/sys/unix, policy and audit.
package fsaudit
