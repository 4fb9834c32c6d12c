package sandbox

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/enforce/mount"
	"github.com/airlock-sandbox/airlock/internal/enforce/nsinit"
	"github.com/airlock-sandbox/airlock/plan"
)

// ociStage makes the stage for isolation oci: a detached tmpfs of
// max_write bytes (fsmount(2), never attached in the supervisor's mount
// namespace) holding, per staged grant, the overlay's upper and work
// folders or the staged file's copy, all owned by the container's host id.
// The launcher attaches it in its private mount namespace, where the
// runtime mounts the overlays; the supervisor reads it through the fd when
// the container is gone. It returns -1 when the plan stages nothing.
func ociStage(pl *plan.Plan, id int) (int, error) {
	var stage *plan.Mount
	var extra int64
	for i, m := range pl.Mounts {
		switch m.Kind {
		case plan.KindStage:
			stage = &pl.Mounts[i]
		case plan.KindStagedFile:
			fi, err := os.Lstat(m.Source)
			if err != nil || !fi.Mode().IsRegular() {
				return -1, fmt.Errorf("fs_write %s: an fs_write grant that is not a folder must be a regular file", m.Source)
			}
			extra += fi.Size() + 4096
		}
	}
	if stage == nil {
		return -1, nil
	}
	fsfd, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("stage: fsopen tmpfs: %w", err)
	}
	defer unix.Close(fsfd)
	size := stage.Size + extra
	for k, v := range map[string]string{"size": strconv.FormatInt(size, 10), "nr_inodes": strconv.FormatInt(max(size/4096, 4096), 10), "mode": "0711"} {
		if err := unix.FsconfigSetString(fsfd, k, v); err != nil {
			return -1, fmt.Errorf("stage: tmpfs %s=%s: %w", k, v, err)
		}
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return -1, fmt.Errorf("stage: create tmpfs: %w", err)
	}
	mfd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
	if err != nil {
		return -1, fmt.Errorf("stage: fsmount: %w", err)
	}
	for _, m := range pl.Mounts {
		if m.Kind != plan.KindOverlay && m.Kind != plan.KindStagedFile {
			continue
		}
		n := strconv.Itoa(m.Stage)
		dirs := []string{n}
		if m.Kind == plan.KindOverlay {
			dirs = append(dirs, n+"/upper", n+"/work", n+"/lower")
		}
		for _, d := range dirs {
			if err := unix.Mkdirat(mfd, d, 0o700); err != nil {
				unix.Close(mfd)
				return -1, fmt.Errorf("stage: mkdir %s: %w", d, err)
			}
			if err := unix.Fchownat(mfd, d, id, id, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				unix.Close(mfd)
				return -1, fmt.Errorf("stage: chown %s: %w", d, err)
			}
		}
		if m.Kind == plan.KindStagedFile {
			if err := copyInto(mfd, n+"/file", m.Source, id); err != nil {
				unix.Close(mfd)
				return -1, fmt.Errorf("stage fs_write file %s: %w", m.Source, err)
			}
		}
	}
	return mfd, nil
}

// copyInto copies the host file src (opened without following symlinks) to
// dir/name, owned by id.
func copyInto(dir int, name, src string, id int) error {
	in, err := unix.Openat2(unix.AT_FDCWD, src, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NONBLOCK | unix.O_NOCTTY, Resolve: unix.RESOLVE_NO_SYMLINKS})
	if err != nil {
		return err
	}
	fin := os.NewFile(uintptr(in), src)
	defer fin.Close()
	st, err := fin.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return errors.New("not a regular file")
	}
	out, err := unix.Openat(dir, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(st.Mode().Perm()))
	if err != nil {
		return err
	}
	fout := os.NewFile(uintptr(out), name)
	defer fout.Close()
	if _, err := io.Copy(fout, fin); err != nil {
		return err
	}
	return fout.Chown(id, id)
}

// ociLowers clones the host folder of every staged fs_write folder, read-only,
// for the overlays' lower layers, idmapped so that the grant's owner on disk
// is the container's root (host uid id) inside: existing files stay
// writable by the sandbox (through the overlay, copied up to the stage)
// whatever their mode, as in airlock's own isolation, and nothing needs to
// be made world-writable. It returns the stage indices, comma-separated
// ("-" for none), and the clones in that order.
func ociLowers(pl *plan.Plan, id int) (string, []*os.File, error) {
	var idx []string
	var files []*os.File
	users := map[[2]uint32]int{} // the grant owner's uid and gid -> its idmap user namespace
	defer func() {
		for _, fd := range users {
			unix.Close(fd)
		}
	}()
	fail := func(err error) (string, []*os.File, error) {
		for _, f := range files {
			f.Close()
		}
		return "", nil, err
	}
	for _, m := range pl.Mounts {
		if m.Kind != plan.KindOverlay {
			continue
		}
		var st unix.Stat_t
		if err := unix.Stat(m.Source, &st); err != nil {
			return fail(fmt.Errorf("fs_write %s: %w", m.Source, err))
		}
		owner := [2]uint32{st.Uid, st.Gid}
		ns, ok := users[owner]
		if !ok {
			var err error
			if ns, err = idmapUserns(owner, id); err != nil {
				return fail(err)
			}
			users[owner] = ns
		}
		fd, err := mount.Clone(m, ns)
		if err != nil {
			return fail(err)
		}
		idx = append(idx, strconv.Itoa(m.Stage))
		files = append(files, os.NewFile(uintptr(fd), "lower"))
	}
	if len(idx) == 0 {
		return "-", nil, nil
	}
	return strings.Join(idx, ","), files, nil
}

// idmapUserns returns a user namespace that maps the on-disk owner to
// host id id (uid and gid), for an idmapped mount: a short-lived child is
// made in it (the init binary's idle program) and killed once its
// namespace is open.
func idmapUserns(owner [2]uint32, id int) (int, error) {
	cmd := &exec.Cmd{Path: "/proc/self/exe", Args: []string{nsinit.PauseArg0}, SysProcAttr: &syscall.SysProcAttr{
		Cloneflags:  unix.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: int(owner[0]), HostID: id, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: int(owner[1]), HostID: id, Size: 1}},
		Pdeathsig:   unix.SIGKILL,
	}}
	if err := cmd.Start(); err != nil {
		return -1, fmt.Errorf("user namespace for the idmapped fs_write layers: %w", err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/user", cmd.Process.Pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open the idmap user namespace: %w", err)
	}
	return fd, nil
}
