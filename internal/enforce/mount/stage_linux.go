package mount

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/plan/spec"
)

// Writable grants are staged (see plan/stage.go): folder grants
// become overlays whose upper layer is on the stage tmpfs, file grants a
// copy on the stage bound in place. The stage is mounted at a hidden
// folder of the new root while the root is assembled and detached before
// the sandbox starts; the supervisor keeps an fd of it to copy the writes
// back.

// stageDir is the folder of staged grant n on the stage.
func stageDir(n int) string { return strconv.Itoa(n) }

// MountStage mounts the stage tmpfs for m (KindStage). extra is added to
// m.Size: the bytes of staged files copied in, which are not the run's own
// writes. The tmpfs has at most one inode per 4 KiB of its size (tmpfs
// charges a page per file anyway), at least 4096.
func (b *Builder) MountStage(m spec.Mount, extra int64) error {
	pfd, name, err := b.parent(m.Target)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if err := mkdirat(pfd, name); err != nil {
		return err
	}
	size := m.Size + extra
	opts := fmt.Sprintf("size=%d,nr_inodes=%d,mode=0700", size, max(size/4096, 4096))
	if err := unix.Mount("tmpfs", b.Root+m.Target, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, opts); err != nil {
		return fmt.Errorf("mount stage tmpfs (%s): %w", opts, err)
	}
	b.stage = b.Root + m.Target
	return nil
}

// PlaceOverlay mounts staged folder grant m at its target: tree (the clone
// of the host folder, read-only) becomes the lower layer, folder m.Stage
// of the stage holds the upper and work folders.
//
// Preconditions:
//   - MountStage ran
func (b *Builder) PlaceOverlay(m spec.Mount, tree int) error {
	if b.stage == "" {
		return errors.New("airlock bug: overlay before the stage is mounted")
	}
	dir := b.stage + "/" + stageDir(m.Stage)
	for _, d := range []string{dir, dir + "/lower", dir + "/upper", dir + "/work"} {
		if err := unix.Mkdir(d, 0o700); err != nil {
			return fmt.Errorf("stage folder %s: %w", d, err)
		}
	}
	if err := unix.MoveMount(tree, "", unix.AT_FDCWD, dir+"/lower", unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("move_mount %s onto the stage: %w", m.Source, err)
	}
	pfd, name, err := b.parent(m.Target)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if err := mkdirat(pfd, name); err != nil {
		return fmt.Errorf("mountpoint %s: %w", m.Target, err)
	}
	// userxattr: overlay keeps its whiteout and opaque markers in user.*
	// xattrs, the only ones it may set in a user namespace (overlayfs.rst,
	// "Permission model"; Linux 5.11). The paths are airlock's own (the
	// stage under the new root), so they hold no ',' or ':'.
	opts := "userxattr,lowerdir=" + dir + "/lower,upperdir=" + dir + "/upper,workdir=" + dir + "/work"
	if err := unix.Mount("overlay", b.Root+m.Target, "overlay", MountFlags(m), opts); err != nil {
		return fmt.Errorf("mount overlay for fs_write %s: %w (needs overlayfs in user namespaces, Linux 5.11+, and a filesystem it can layer)", m.Source, err)
	}
	return nil
}

// StagedFileSize returns the size of the regular file behind tree, the
// clone of a staged file grant, so the stage can make room for its copy.
func StagedFileSize(tree int) (int64, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(tree, "", &st, unix.AT_EMPTY_PATH); err != nil {
		return 0, fmt.Errorf("stat staged file: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return 0, errors.New("an fs_write grant that is not a folder must be a regular file")
	}
	return st.Size, nil
}

// PlaceStagedFile copies the file behind tree (the clone of the host file)
// to folder m.Stage of the stage and binds the copy at m.Target.
//
// Preconditions:
//   - MountStage ran
func (b *Builder) PlaceStagedFile(m spec.Mount, tree int) error {
	if b.stage == "" {
		return errors.New("airlock bug: staged file before the stage is mounted")
	}
	dir := b.stage + "/" + stageDir(m.Stage)
	if err := unix.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("stage folder %s: %w", dir, err)
	}
	copyPath := dir + "/file"
	if err := copyTree(tree, copyPath); err != nil {
		return fmt.Errorf("stage fs_write file %s: %w", m.Source, err)
	}
	pfd, name, err := b.parent(m.Target)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	fd, err := unix.Openat(pfd, name, unix.O_RDONLY|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil && !errors.Is(err, unix.EROFS) && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("mountpoint %s: %w", m.Target, err)
	}
	if err == nil {
		unix.Close(fd)
	}
	return bindRW(copyPath, b.Root+m.Target, MountFlags(m))
}

// copyTree copies the regular file that the mount fd tree shows to dst.
func copyTree(tree int, dst string) error {
	// A detached mount of a file opens through its fd's magic link (the
	// host's /proc is still mounted: this runs before pivot_root).
	src, err := unix.Open("/proc/self/fd/"+strconv.Itoa(tree), unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOCTTY|unix.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	in := os.NewFile(uintptr(src), "staged-source")
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	st, err := in.Stat()
	if err == nil {
		err = out.Chmod(st.Mode().Perm())
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// bindRW binds src at dst with the flags flags (MountFlags).
func bindRW(src, dst string, flags uintptr) error {
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s: %w", dst, err)
	}
	if err := unix.Mount("", dst, "", unix.MS_BIND|unix.MS_REMOUNT|flags, ""); err != nil {
		return fmt.Errorf("restrict %s: %w", dst, err)
	}
	return nil
}

// PlaceNarrowing applies a KindReadonly or KindHide step. It returns false
// when the path is not in this root (it was removed since the plan was
// made, or it lies under a grant that is not there).
func (b *Builder) PlaceNarrowing(m spec.Mount) (bool, error) {
	pfd, name, err := b.parent(m.Target)
	if errors.Is(err, unix.EROFS) || errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	err = unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("stat %s: %w", m.Target, err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		// A mount cannot cover a symlink; the plan protects where it leads.
		return false, nil
	}
	target := b.Root + m.Target
	if m.Kind == spec.KindHide {
		return true, b.hide(target, st.Mode&unix.S_IFMT == unix.S_IFDIR)
	}
	// Bind the path onto itself, then make that mount read-only: the
	// sandbox can neither change it nor (it being a mountpoint) remove or
	// rename it (rename(2), EBUSY). Protected paths lie inside staged
	// grants, overlays with no mounts below them, so the plan does not ask
	// for a recursive bind.
	flags := uintptr(unix.MS_BIND)
	if m.Recursive {
		flags |= unix.MS_REC
	}
	if err := unix.Mount(target, target, "", flags, ""); err != nil {
		return false, fmt.Errorf("bind protected %s: %w", m.Target, err)
	}
	// Read-only whatever the step says: that is what it is for.
	if err := unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|MountFlags(m), ""); err != nil {
		return false, fmt.Errorf("make protected %s read-only: %w", m.Target, err)
	}
	return true, nil
}

// hide covers target with an empty read-only folder (a fresh tmpfs) or an
// empty read-only file.
func (b *Builder) hide(target string, dir bool) error {
	if dir {
		if err := unix.Mount("tmpfs", target, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k,nr_inodes=2,mode=0555"); err != nil {
			return fmt.Errorf("hide %s: %w", target, err)
		}
		return nil
	}
	empty, err := b.emptyFile()
	if err != nil {
		return err
	}
	if err := unix.Mount(empty, target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("hide %s: %w", target, err)
	}
	if err := unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("hide %s read-only: %w", target, err)
	}
	return nil
}

// emptyFile returns an empty file on a small tmpfs outside the new root,
// created on first use; binds of it hide fs_deny files.
func (b *Builder) emptyFile() (string, error) {
	if b.empty != "" {
		return b.empty, nil
	}
	dir := b.Root + "/.airlock-empty"
	if err := unix.Mkdir(dir, 0o700); err != nil {
		return "", fmt.Errorf("hide: %w", err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k,nr_inodes=4,mode=0700"); err != nil {
		return "", fmt.Errorf("hide: %w", err)
	}
	fd, err := unix.Open(dir+"/empty", unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o444)
	if err != nil {
		return "", fmt.Errorf("hide: %w", err)
	}
	unix.Close(fd)
	b.empty = dir + "/empty"
	b.hidden = append(b.hidden, dir)
	return b.empty, nil
}

// DetachStage opens the stage's root for the supervisor and detaches the
// stage (and the helper tmpfs of hidden files) from the new root, so the
// sandbox never sees them; the overlays and binds hold their own
// references. It returns -1 when there is no stage.
func (b *Builder) DetachStage() (int, error) {
	fd := -1
	if b.stage != "" {
		var err error
		fd, err = unix.Open(b.stage, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, fmt.Errorf("open stage: %w", err)
		}
		b.hidden = append(b.hidden, b.stage)
	}
	for _, d := range b.hidden {
		if err := unix.Unmount(d, unix.MNT_DETACH); err != nil {
			if fd >= 0 {
				unix.Close(fd)
			}
			return -1, fmt.Errorf("detach %s: %w", d, err)
		}
		if err := unix.Rmdir(d); err != nil {
			if fd >= 0 {
				unix.Close(fd)
			}
			return -1, fmt.Errorf("remove %s: %w", d, err)
		}
	}
	b.hidden = nil
	return fd, nil
}

// OpenGrant opens the root of a grant as the sandbox will see it (the
// overlay for staged folders), as an O_PATH fd for the supervisor's file
// API. It must run before Finish.
func (b *Builder) OpenGrant(target string) (int, error) {
	fd, err := unix.Openat2(b.rootFD, target[1:], &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS})
	if err != nil {
		return -1, fmt.Errorf("open grant %s: %w", target, err)
	}
	return fd, nil
}
