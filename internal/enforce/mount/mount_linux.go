package mount

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/plan"
)

// ErrSymlink is wrapped when a bind source has a symlink in its path.
var ErrSymlink = errors.New("a path component is a symlink")

// Clone returns a detached mount fd of exactly the host path src (open_tree
// OPEN_TREE_CLONE, with submounts) carrying the attributes of m: read-only
// unless m.Writable, noexec unless m.Exec, nosuid, and nodev except for
// binds under /dev. Staged grants (KindOverlay, KindStagedFile) are cloned
// read-only: they are the lower layer, never written. When
// usernsFD >= 0 the clone is idmapped through that user namespace, so files
// the sandbox creates keep the caller's ownership on disk.
//
// Preconditions:
//   - the caller holds CAP_SYS_ADMIN over the current mount namespace
//   - idmapping (usernsFD >= 0) needs CAP_SYS_ADMIN in the initial user namespace
func Clone(m plan.Mount, usernsFD int) (int, error) {
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
	flags := uint(unix.OPEN_TREE_CLONE | unix.OPEN_TREE_CLOEXEC | unix.AT_EMPTY_PATH | unix.AT_RECURSIVE)
	tree, err := unix.OpenTree(fd, "", flags)
	if err != nil {
		return -1, fmt.Errorf("open_tree %q: %w", m.Source, err)
	}
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	if m.Kind == plan.KindBind && strings.HasPrefix(m.Target, "/dev/") {
		attr.Attr_set = unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NOEXEC
	}
	if !m.Writable || m.Kind == plan.KindOverlay || m.Kind == plan.KindStagedFile {
		attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
	}
	if !m.Exec {
		attr.Attr_set |= unix.MOUNT_ATTR_NOEXEC
	}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
		unix.Close(tree)
		return -1, fmt.Errorf("mount_setattr %q: %w", m.Source, err)
	}
	if usernsFD >= 0 {
		idm := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(usernsFD)}
		if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &idm); err != nil {
			unix.Close(tree)
			return -1, fmt.Errorf("idmap %q (the filesystem must support idmapped mounts, kernel 5.12+): %w", m.Source, err)
		}
	}
	return tree, nil
}

// Builder assembles a new root directory.
type Builder struct {
	Root   string // absolute directory the root tmpfs is mounted on
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
func (b *Builder) Place(m plan.Mount, tree int) error {
	pfd, name, err := b.parent(m.Target)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	switch m.Kind {
	case plan.KindSymlink:
		if err := unix.Symlinkat(m.Source, pfd, name); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("symlink %s: %w", m.Target, err)
		}
		return nil
	case plan.KindDir:
		return mkdirat(pfd, name)
	case plan.KindFile:
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
	case plan.KindTmpfs:
		if err := mkdirat(pfd, name); err != nil {
			return err
		}
		return unix.Mount("tmpfs", b.Root+m.Target, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC,
			fmt.Sprintf("size=%d,mode=1777,nr_inodes=%d", m.Size, max(m.Size/4096, 1024)))
	case plan.KindProc:
		if err := mkdirat(pfd, name); err != nil {
			return err
		}
		return b.proc(b.Root + m.Target)
	case plan.KindBind:
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

func mkdirat(fd int, name string) error {
	if err := unix.Mkdirat(fd, name, 0o755); err != nil && !errors.Is(err, unix.EEXIST) && !errors.Is(err, unix.EROFS) {
		return fmt.Errorf("mkdir %s: %w", name, err)
	}
	return nil
}

// proc mounts a fresh procfs and makes the kernel-tunable parts read-only.
func (b *Builder) proc(target string) error {
	if err := unix.Mount("proc", target, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount proc: %w", err)
	}
	for _, p := range []string{"sys", "irq", "bus", "fs"} {
		full := target + "/" + p
		if _, err := os.Lstat(full); err != nil {
			continue
		}
		if err := unix.Mount(full, full, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind /proc/%s: %w", p, err)
		}
		if err := unix.Mount("", full, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			return fmt.Errorf("make /proc/%s read-only: %w", p, err)
		}
	}
	return maskProc(target)
}

// maskProc hides the /proc entries that describe the host kernel rather
// than the sandbox (the list runc masks): files get /dev/null bound over
// them, directories an empty read-only tmpfs.
//
// Preconditions:
//   - the host's /dev/null is still reachable (before pivot_root)
func maskProc(target string) error {
	for _, p := range []string{"kcore", "keys", "latency_stats", "timer_list", "timer_stats", "sched_debug", "kallsyms", "kmsg", "sysrq-trigger", "acpi", "scsi", "firmware"} {
		full := target + "/" + p
		fi, err := os.Lstat(full)
		if err != nil {
			continue
		}
		if fi.IsDir() {
			err = unix.Mount("tmpfs", full, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=0,mode=0555")
		} else {
			err = unix.Mount("/dev/null", full, "", unix.MS_BIND, "")
		}
		if err != nil {
			return fmt.Errorf("mask /proc/%s: %w", p, err)
		}
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
