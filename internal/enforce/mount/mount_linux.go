package mount

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/plan/spec"
)

// ErrSymlink is wrapped when a bind source has a symlink in its path.
var ErrSymlink = errors.New("a path component is a symlink")

// Clone returns a detached mount fd of exactly the host path m.Source
// (open_tree OPEN_TREE_CLONE, with the mounts below it when m.Recursive)
// carrying the attributes of m.Flags() on every mount of the tree:
// read-only unless m.Writable, noexec unless m.Exec, nosuid, and nodev
// unless m.Devices. Staged grants (KindOverlay, KindStagedFile) are cloned
// read-only: they are the lower layer, never written. When usernsFD >= 0
// the clone is idmapped through that user namespace, so files the sandbox
// creates keep the caller's ownership on disk.
//
// Preconditions:
//   - the caller holds CAP_SYS_ADMIN over the current mount namespace
//   - idmapping (usernsFD >= 0) needs CAP_SYS_ADMIN in the initial user namespace
func Clone(m spec.Mount, usernsFD int) (int, error) {
	attr, err := CloneAttr(m)
	if err != nil {
		return -1, err
	}
	recursive := uint(0)
	if m.Recursive {
		recursive = unix.AT_RECURSIVE
	}
	fd, err := unix.Openat2(unix.AT_FDCWD, m.Source, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ELOOP) {
		return -1, fmt.Errorf("%s %q: %w: grant the real path instead (airlock never binds what a symlink points at)", m.Origin, m.Source, ErrSymlink)
	}
	if err != nil {
		return -1, fmt.Errorf("%s %q: %w", m.Origin, m.Source, err)
	}
	defer unix.Close(fd)
	tree, err := unix.OpenTree(fd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH|recursive)
	if err != nil {
		return -1, fmt.Errorf("open_tree %q: %w", m.Source, err)
	}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH|recursive, &unix.MountAttr{Attr_set: attr}); err != nil {
		unix.Close(tree)
		return -1, fmt.Errorf("mount_setattr %q: %w", m.Source, err)
	}
	if usernsFD >= 0 {
		idm := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(usernsFD)}
		if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH|recursive, &idm); err != nil {
			unix.Close(tree)
			return -1, fmt.Errorf("idmap %q (the filesystem must support idmapped mounts, kernel 5.12+): %w", m.Source, err)
		}
	}
	return tree, nil
}

// CloneAttr returns the MOUNT_ATTR_* bits (mount_setattr(2)) Clone sets on
// the clone of m: m.Flags(), and read-only for the lower layer of a staged
// grant. Only binds of host paths are cloned, and only binds under /dev
// (Origin sandbox) may keep device nodes.
func CloneAttr(m spec.Mount) (uint64, error) {
	if !m.Cloned() {
		return 0, fmt.Errorf("airlock bug: mount %s at %s is not a bind of a host path", m.Kind, m.Target)
	}
	f := m.Flags()
	if !f.NoDev && (m.Kind != spec.KindBind || m.Origin != spec.OriginSandbox) {
		return 0, fmt.Errorf("airlock bug: %s %s at %s would keep device nodes: only the sandbox's device binds may", m.Origin, m.Kind, m.Target)
	}
	if m.Kind == spec.KindOverlay || m.Kind == spec.KindStagedFile {
		f.ReadOnly = true // the lower layer, never written
	}
	var attr uint64
	for _, b := range []struct {
		on  bool
		bit uint64
	}{{f.ReadOnly, unix.MOUNT_ATTR_RDONLY}, {f.NoSuid, unix.MOUNT_ATTR_NOSUID}, {f.NoDev, unix.MOUNT_ATTR_NODEV}, {f.NoExec, unix.MOUNT_ATTR_NOEXEC}} {
		if b.on {
			attr |= b.bit
		}
	}
	return attr, nil
}

// MountFlags returns the MS_* flags (mount(2)) a step that is not a clone
// gets from m.Flags(): the overlay of a staged folder, the bind of a
// staged file's copy, a read-only narrowing.
func MountFlags(m spec.Mount) uintptr {
	f := m.Flags()
	var ms uintptr
	for _, b := range []struct {
		on  bool
		bit uintptr
	}{{f.ReadOnly, unix.MS_RDONLY}, {f.NoSuid, unix.MS_NOSUID}, {f.NoDev, unix.MS_NODEV}, {f.NoExec, unix.MS_NOEXEC}} {
		if b.on {
			ms |= b.bit
		}
	}
	return ms
}

// Builder assembles a new root directory.
type Builder struct {
	Root string // absolute directory the root tmpfs is mounted on
	// ProcFallback lets the proc step bind the /proc this process sees,
	// read-only and recursively, when the kernel refuses a fresh procfs
	// (plan.ProcFallback); ProcShared says it did.
	ProcFallback bool
	ProcShared   bool

	rootFD int
	stage  string   // where the stage is mounted while the root is built; "" if none
	empty  string   // an empty file that hides fs_deny files; "" until needed
	hidden []string // helper mounts DetachStage removes
}

// MountRoot mounts the root tmpfs at b.Root and makes it private.
func (b *Builder) MountRoot() error {
	if err := unix.Mount("tmpfs", b.Root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=4m,mode=0755,nr_inodes=4096"); err != nil {
		return fmt.Errorf("mount root tmpfs on %s: %w", b.Root, err)
	}
	if err := unix.Mount("", b.Root, "", unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make root private: %w", err)
	}
	fd, err := unix.Open(b.Root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open new root: %w", err)
	}
	b.rootFD = fd
	return nil
}

// parent returns an fd of target's parent directory beneath the root
// (created as needed) and target's last element.
func (b *Builder) parent(target string) (int, string, error) {
	dir, name := path.Split(path.Clean(target))
	if name == "" {
		return -1, "", fmt.Errorf("mount target %q: no name", target)
	}
	fd, err := unix.Dup(b.rootFD)
	if err != nil {
		return -1, "", err
	}
	for _, el := range strings.Split(strings.Trim(dir, "/"), "/") {
		if el == "" {
			continue
		}
		err := unix.Mkdirat(fd, el, 0o755)
		if err != nil && !errors.Is(err, unix.EEXIST) {
			unix.Close(fd)
			return -1, "", fmt.Errorf("mkdir %s in new root: %w", el, err)
		}
		next, err := unix.Openat2(fd, el, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT})
		unix.Close(fd)
		if err != nil {
			return -1, "", fmt.Errorf("open %s in new root: %w", el, err)
		}
		fd = next
	}
	return fd, name, nil
}

// Place creates the step m in the new root; for binds, tree is the fd from Clone.
func (b *Builder) Place(m spec.Mount, tree int) error {
	pfd, name, err := b.parent(m.Target)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	switch m.Kind {
	case spec.KindSymlink:
		if err := unix.Symlinkat(m.Source, pfd, name); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("symlink %s: %w", m.Target, err)
		}
		return nil
	case spec.KindDir:
		return mkdirat(pfd, name)
	case spec.KindFile:
		fd, err := unix.Openat(pfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
		if err != nil {
			return fmt.Errorf("create %s: %w", m.Target, err)
		}
		_, err = unix.Write(fd, []byte(m.Data))
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("write %s: %w", m.Target, err)
		}
		return nil
	case spec.KindTmpfs:
		if err := mkdirat(pfd, name); err != nil {
			return err
		}
		return unix.Mount("tmpfs", b.Root+m.Target, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC,
			fmt.Sprintf("size=%d,mode=1777,nr_inodes=%d", m.Size, m.Inodes()))
	case spec.KindProc:
		if err := mkdirat(pfd, name); err != nil {
			return err
		}
		err := unix.Mount("proc", b.Root+m.Target, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
		if err == nil {
			return nil
		}
		refused := errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES)
		if !refused {
			return fmt.Errorf("mount proc: %w", err)
		}
		if !b.ProcFallback {
			// mount_too_revealing (fs/namespace.c): a user namespace gets a
			// new procfs only where the /proc it can see is not partly
			// covered, which a container's masks are.
			return fmt.Errorf("mount proc: %w: the kernel refuses this sandbox a /proc of its own, as inside a container that masks parts of its /proc; "+
				"add \"proc\" to allow_downgrade (--allow-downgrade proc) to show the container's /proc read-only instead (airlock doctor says what that shows)", err)
		}
		if err := b.bindProc(pfd, name); err != nil {
			return fmt.Errorf("mount proc: %w; and binding the container's /proc read-only failed: %w", unix.EPERM, err)
		}
		b.ProcShared = true
		return nil
	case spec.KindBind:
		var st unix.Stat_t
		if err := unix.Fstatat(tree, "", &st, unix.AT_EMPTY_PATH); err != nil {
			return fmt.Errorf("stat %s: %w", m.Source, err)
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			err = mkdirat(pfd, name)
		} else {
			var fd int
			fd, err = unix.Openat(pfd, name, unix.O_RDONLY|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
			if errors.Is(err, unix.EROFS) || errors.Is(err, unix.EEXIST) {
				err = nil // the mountpoint already exists inside a read-only bind
			} else if err == nil {
				unix.Close(fd)
			}
		}
		if err != nil {
			return fmt.Errorf("mountpoint %s: %w", m.Target, err)
		}
		if err := unix.MoveMount(tree, "", pfd, name, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fmt.Errorf("move_mount %s onto %s: %w", m.Source, m.Target, err)
		}
		return nil
	}
	return fmt.Errorf("airlock bug: unknown mount kind %q", m.Kind)
}

// bindProc binds the /proc this process sees (a container's) at name in
// pfd, read-only, nosuid, nodev and noexec, with every mount below it: the
// container's own masks come along, locked (they cannot be unmounted from
// inside), and ProtectPaths adds the plan's on top.
func (b *Builder) bindProc(pfd int, name string) error {
	tree, err := unix.OpenTree(unix.AT_FDCWD, "/proc", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return fmt.Errorf("open_tree /proc: %w", err)
	}
	defer unix.Close(tree)
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC, Propagation: unix.MS_PRIVATE}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, attr); err != nil {
		return fmt.Errorf("make the /proc bind read-only: %w", err)
	}
	if err := unix.MoveMount(tree, "", pfd, name, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("move_mount /proc: %w", err)
	}
	return nil
}

func mkdirat(fd int, name string) error {
	if err := unix.Mkdirat(fd, name, 0o755); err != nil && !errors.Is(err, unix.EEXIST) && !errors.Is(err, unix.EROFS) {
		return fmt.Errorf("mkdir %s: %w", name, err)
	}
	return nil
}

// ProtectPaths makes each of readonly read-only and hides each of masked
// (the plan's ReadonlyPaths and MaskedPaths, absolute paths inside the
// sandbox): a folder gets an empty read-only tmpfs over it, a file the
// host's /dev/null bound read-only. A path the root does not have is
// skipped; any other failure to look at one fails the build.
//
// Preconditions:
//   - every plan step is placed (what it protects exists)
//   - the host's /dev/null is still reachable (before Finish)
func (b *Builder) ProtectPaths(readonly, masked []string) error {
	for _, p := range readonly {
		full, ok, err := b.existing(p)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		if err := unix.Mount(full, full, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind %s: %w", p, err)
		}
		if err := unix.Mount("", full, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			return fmt.Errorf("make %s read-only: %w", p, err)
		}
	}
	for _, p := range masked {
		full, ok, err := b.existing(p)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		fi, err := os.Lstat(full)
		if err != nil {
			return fmt.Errorf("mask %s: %w", p, err)
		}
		if fi.IsDir() {
			err = unix.Mount("tmpfs", full, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=0,mode=0555")
		} else {
			err = unix.Mount("/dev/null", full, "", unix.MS_BIND, "")
		}
		if err != nil {
			return fmt.Errorf("mask %s: %w", p, err)
		}
	}
	return nil
}

// existing returns where the sandbox path p is while the root is built,
// and whether it exists there.
func (b *Builder) existing(p string) (string, bool, error) {
	if !path.IsAbs(p) || path.Clean(p) != p {
		return "", false, fmt.Errorf("airlock bug: protected path %q is not absolute and clean", p)
	}
	full := b.Root + p
	if _, err := os.Lstat(full); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", false, nil
		}
		return "", false, fmt.Errorf("protect %s: %w", p, err)
	}
	return full, true, nil
}

// Abandon undoes MountRoot: the root tmpfs, with every step placed on
// it, is detached from b.Root, and b is done. An init that mounted steps
// ahead for a plan that then began otherwise starts over with a new
// Builder.
//
// Preconditions:
//   - only MountRoot and Place were called (no stage, no helper mounts)
func (b *Builder) Abandon() error {
	unix.Close(b.rootFD)
	b.rootFD = -1
	if err := unix.Unmount(b.Root, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the root mounted ahead from %s: %w", b.Root, err)
	}
	return nil
}

// Finish makes the root tmpfs read-only, pivots into it and detaches the
// host's tree. Afterwards the old root is unreachable.
func (b *Builder) Finish() error {
	if err := unix.Mount("", b.Root, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("make root read-only: %w", err)
	}
	unix.Close(b.rootFD)
	if err := unix.Chdir(b.Root); err != nil {
		return err
	}
	// pivot_root(".", ".") stacks the old root on top of the new one;
	// detaching it leaves only the new root (pivot_root(2), NOTES).
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach old root: %w", err)
	}
	return unix.Chdir("/")
}
