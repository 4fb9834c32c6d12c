// Package cgroup confines a sandbox's process tree in a control group: it
// detects the host's cgroup layout (cgroup v1, pure cgroup v2 with delegated
// controllers, or hybrid v1 plus a controller-less cgroup2 mount), turns a
// Config into a plan of control-file writes (data, see NewPlan), applies it,
// reports usage and limit events, and kills and removes the group.
//
// It stops the resource attacks a sandboxed program can mount against the
// host: fork bombs (pids.max), memory exhaustion (memory limit with swap
// kept out of it, so the OOM killer fires inside the group), CPU runaways
// (CFS quota), and escaped daemons (double-forked, setsid'd or SIGTERM-
// ignoring processes all stay in the group and die with cgroup.kill, or by
// freeze-and-SIGKILL where cgroup.kill is missing). Janitor removes groups
// left behind by supervisors that were killed before they could clean up.
//
// The portable files hold the layout parsing and the write plan; the
// *_linux.go files make the filesystem writes. On other systems every
// operation returns an error wrapping errors.ErrUnsupported.
//
// Like every internal/enforce package it must not import net/http, egress,
// server or mcp, and it imports nothing from airlock but the standard library
// and golang.org/x/sys.
package cgroup
