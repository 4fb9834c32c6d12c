// Package image unpacks a container image into a folder that an
// environment (the policy's rootfs) can use as its root filesystem: an OCI
// image layout (a folder with index.json, or a tar of one, which is what
// `docker save` writes since Docker 25 and `podman save --format oci-archive`
// writes) or a Docker archive (`docker save` before 25, `podman save`).
// Nothing is fetched: the image is a local file or folder.
//
// The image is hostile input, and it is never parsed or unpacked by the
// caller: Unpack re-executes airlock (ChildArg0, dispatched by
// sandbox.Init) twice, each child in new user, mount, pid, network and IPC
// namespaces, mapped to an unprivileged uid, whose root is a read-only
// tmpfs holding only a folder of the cache, under Landlock where the
// kernel has it, without capabilities; where user namespaces are missing
// it runs under Landlock alone, and with neither it refuses.
//
// The first child, the resolver, reads the image's documents (the index,
// the manifest and the config, or a Docker archive's manifest.json) from
// the archive's fd or from files the caller opens for it beneath the
// layout's folder, no symlink followed, and proposes where the config and
// the layers' blobs are and their digests. Nothing it says is trusted: the
// caller checks the proposal's form and bounds, reads the config's blob
// and checks it against its digest, and makes the key from those digests
// alone. The second child, the unpacker, is given nothing of the image but
// the diff_ids and the layers' blobs, which the caller streams to it
// through pipes, hashing each as it goes; the unpacker's done counts only
// once every blob was the one the key names. It checks every layer
// against its diff_id and resolves every name beneath the entry's root
// with openat2 (RESOLVE_BENEATH, no symlinks): an entry cannot leave the
// folder or pass through a symlink, device nodes are not made, set-id bits
// are dropped, and bytes, entries, names, depth and layers are bounded.
// Both children are killed at a deadline (MaxDuration). The caller then
// checks what the unpacker made (types, owner, modes), gives it to itself,
// writes the done marker (O_EXCL|O_NOFOLLOW, beside the root, not in it)
// and renames the entry into place. A child taken over by what it read
// can thus at worst make the entry of the very bytes it was given.
//
// The cache key is the digest of what is unpacked: the input's kind, its
// config's digest and, for each layer in order, its blob's digest and
// diff_id (Key), so that two different contents never share an entry,
// and Unpacked.Digest (the report's rootfs_digest) names that same thing.
// An existing entry is used only when it, its root and its marker are
// owned by this user, writable by no one else, and the marker holds the
// key's document. An entry being made is a folder .unpack-<random>,
// locked (flock) while its unpack runs; the next Unpack into the cache
// removes those left unlocked by an unpack that was killed, by fd, with no
// symlink followed and no mount crossed.
//
// The package links no network code and no other airlock package but the
// Landlock one and the plan's id map: the child is airlock's own binary,
// and what it runs is this package alone.
package image
