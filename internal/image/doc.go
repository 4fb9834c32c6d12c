// Package image unpacks a container image into a folder that an
// environment (the policy's rootfs) can use as its root filesystem: an OCI
// image layout (a folder with index.json, or a tar of one, which is what
// `docker save` writes since Docker 25 and `podman save --format oci-archive`
// writes) or a Docker archive (`docker save` before 25, `podman save`).
// Nothing is fetched: the image is a local file or folder.
//
// The image is hostile input, and it is never parsed or unpacked by the
// caller: Unpack re-executes airlock as a child (ChildArg0, dispatched by
// sandbox.Init) in new user, mount, pid, network and IPC namespaces,
// mapped to an unprivileged uid, whose root is a read-only tmpfs holding
// only the new cache entry's folder, under Landlock where the kernel has
// it, without capabilities; where user namespaces are missing it runs under
// Landlock alone, and with neither it refuses. The child reads the archive
// from an fd it is handed (a layout's files are opened for it by the
// caller, beneath the layout's folder, no symlink followed), checks every
// blob against its digest and every layer against the config's diff_ids,
// and resolves every name beneath the entry's root with openat2
// (RESOLVE_BENEATH, no symlinks): an entry cannot leave the folder or pass
// through a symlink, device nodes are not made, set-id bits are dropped,
// and bytes, entries, names, depth and layers are bounded. The caller then
// checks what the child made (types, owner, modes), gives it to itself,
// writes the done marker (O_EXCL|O_NOFOLLOW, beside the root, not in it)
// and renames the entry into place.
//
// The cache key is the digest of what is unpacked: the input's kind, its
// config's digest and its layers' diff_ids in order (Key), so that two
// different contents never share an entry, and Unpacked.Digest (the
// report's rootfs_digest) names that same thing. An existing entry is used
// only when it, its root and its marker are owned by this user, writable
// by no one else, and the marker holds the key's document.
//
// The package links no network code and no other airlock package but the
// Landlock one and the plan's id map: the child is airlock's own binary,
// and what it runs is this package alone.
package image
