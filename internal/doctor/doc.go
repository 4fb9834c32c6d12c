// Package doctor inspects the host and says what `airlock run` can enforce
// on it: the kernel version, user namespaces (for root and for unprivileged
// users) and whether AppArmor restricts them (Ubuntu 23.10 and later, where
// airlock needs the profile in packaging/apparmor), the Landlock ABI,
// seccomp filter mode, the cgroup layout and its controllers, whether
// Landlock audit records can be read (so filesystem denials appear in the
// report), and idmapped mounts. It then turns those facts into a verdict
// per enforcement layer for a run with the default policy: enforced,
// refused (exit 125), or refused unless the policy lists the layer under
// allow_downgrade.
//
// The probes are func fields of Probes, so the verdict logic (Evaluate) is
// tested on fake hosts; a zero Probes probes the real one. Probing creates
// at most short-lived processes in fresh namespaces (where AppArmor
// restricts them, one marks its own mounts private there) and a detached
// mount that is never attached; it changes nothing on the host.
//
// It stops a quieter failure than an attack: an operator who believes a
// layer holds on a host where it cannot. It imports the enforcement
// packages only for their read-only detection (cgroup.Detect, landlock.ABI,
// mount.Clone of a temporary directory, fsaudit.Available) and never imports net/http, egress,
// server or mcp.
package doctor
