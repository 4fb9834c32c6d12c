// Package guard is the in-process capability check that the HTTP API and
// the MCP server put in front of every file operation (read, write, list,
// remove) they make for an agent (the "in-process check" column of DESIGN
// §1). Network access is not the guard's: every connection goes through the
// egress proxy, which admits it (package egress).
//
// Every operation runs the same three steps in this order: it charges one
// op to the budget meter, it canonicalizes its target and checks the grant
// with the policy's Check methods, and only then does it touch the
// filesystem. A refused operation has no effect and leaves an audit event
// that names the grant that would have allowed it.
//
// A string check alone is not enough for files: a symlink inside a granted
// root can point outside it, and a parent directory can be swapped after the
// check. On Linux every path is therefore resolved relative to an open fd of
// its grant root with openat2(2) RESOLVE_BENEATH, writes never follow a
// symlink in their final component, and files with more than one hard link
// are refused because a hard link can alias a file outside the grant. Other
// systems refuse every file operation (errors.ErrUnsupported).
//
// It stops symlink, hard-link and ".." escapes from granted paths, "/work"
// being taken for "/workshop", and runs past max_ops, max_output_bytes or
// max_wall.
//
// It imports policy/..., audit, the standard library and golang.org/x/sys.
// It must not import sandbox, egress, server, mcp or internal/enforce: the
// guard is a leaf that those layers build on, not the other way round.
package guard
