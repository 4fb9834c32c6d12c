// Package mount builds the sandbox's root filesystem from the plan's mount
// steps: a small tmpfs root holding only the system base, the grants (each
// a clone of exactly the named host path, read-only unless written in
// fs_write, noexec unless it is a library or tool), a fresh /proc, a
// size-capped /tmp, a minimal /dev and synthesized /etc files; then the
// plan's masked and read-only paths (ProtectPaths), and the root is made
// read-only and pivot_root detaches the host's tree. Every flag comes from
// the plan (plan.Mount.Flags): nodev unless the step is a device bind,
// recursive when the plan says so.
//
// Sources are opened with openat2(RESOLVE_NO_SYMLINKS) and cloned with
// open_tree(2), so a grant whose path contains a symlink is refused instead
// of binding whatever the link points at, and a path cannot be swapped
// between check and mount. Mountpoints are created beneath an fd of the new
// root (RESOLVE_IN_ROOT). It needs kernel 5.12 (mount_setattr).
//
// It imports plan and golang.org/x/sys only; never net/http,
// egress, server or mcp. It stops reads of anything the policy does not
// name: on the inside, the rest of the host does not exist.
package mount
