// Package oci turns a compiled airlock plan into an OCI runtime bundle
// (config.json plus the files it binds) that runc, crun or gVisor's runsc
// enforce without airlock: the same root filesystem (system base, grants,
// a size-capped /tmp), the same namespaces, no capabilities,
// no_new_privs, rlimits, cgroup limits from the budget and the same
// seccomp allow-list.
//
// Config is pure: plan in, runtime-spec Go types out; the policy is read
// only to embed it as an annotation. Everything the runtime is told comes
// from the plan, which is what nsinit applies too, so a bundle cannot drift
// from airlock's own sandbox (internal/enforce/nsinit's TestOCIParity
// checks it fact by fact). Facts about the host (where tools live, which base paths exist)
// are already in the plan, which the caller compiles (cmd/airlock uses
// sandbox.Cmd.Plan). Write puts a bundle on disk.
//
// # Imports
//
// It must not import sandbox or any internal/enforce package: the seccomp
// profile is the plan's data (plan.Seccomp), not the enforcement
// package's, so the exported filter is the installed one by construction
// (a bundle that looks like airlock's sandbox but lets io_uring or unshare
// through is the attack this package exists to prevent).
//
// # Seccomp without rule order
//
// airlock's profile is first-match per syscall ("EPERM if TIOCSTI, EPERM
// if TIOCLINUX, then allow"); OCI seccomp has no rule order, and runc
// turns two conditions on the same argument into two separate rules (OR,
// not AND). So the translation never relies on either: every entry has at
// most one condition per argument, all entries of one syscall share one
// action, and "allow unless the argument is one of these values" becomes
// SCMP_CMP_MASKED_EQ entries that cover exactly the other values. A
// profile that cannot be written that way is an error, never a weaker
// filter.
//
// # What a bundle cannot carry
//
// net_hosts: the bundle's network namespace is empty and nothing in it
// listens on the proxy ports the plan's HTTP_PROXY names, so every
// connection fails closed. max_wall, max_output_bytes and max_ops are
// enforced by whoever runs the bundle (a timeout around `runc run`), not
// by the runtime. max_cpu becomes RLIMIT_CPU per process only: cgroups have
// no total-CPU-time limit. fs_write directories must be writable by
// Options.HostID, because runc 1.1 and crun 1.8 have no idmapped mounts
// for binds. Binds are recursive, as in airlock's own init, with recursive
// attributes (see Version); crun 1.8 clones a bind in a user namespace
// without the mounts below it, so under crun those are hidden instead.
package oci
