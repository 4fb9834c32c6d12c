package writeback

import (
	"errors"
	"fmt"
	"strconv"

	"golang.org/x/sys/unix"
)

// file writes back a single-file grant in place: the file is the grant, so
// it keeps its inode (the parent folder is not granted, and nothing is
// created there).
func (w *writer) file(g Grant) {
	src, err := w.openStage(w.cfg.StageFD, g.Stage+"/file")
	if err != nil {
		w.res.fail(w.max, g.Host, fmt.Errorf("open the staged copy: %w", err))
		return
	}
	defer unix.Close(src)
	var st unix.Stat_t
	if err := unix.Fstat(src, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		w.res.fail(w.max, g.Host, errors.New("the staged copy is not a regular file"))
		return
	}
	if reason := w.refused(g.Host); reason != "" {
		w.res.refuse(w.max, g.Host, reason)
		return
	}
	// Read and write, to leave an unchanged file alone; write only when the
	// owner may not read it.
	dst, err := unix.Open("/proc/self/fd/"+strconv.Itoa(g.HostFD), unix.O_RDWR|unix.O_NOCTTY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.EACCES) {
		dst, err = unix.Open("/proc/self/fd/"+strconv.Itoa(g.HostFD), unix.O_WRONLY|unix.O_NOCTTY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		w.res.fail(w.max, g.Host, fmt.Errorf("open the grant for writing: %w", err))
		return
	}
	defer unix.Close(dst)
	var dst0 unix.Stat_t
	if err := unix.Fstat(dst, &dst0); err != nil || dst0.Mode&unix.S_IFMT != unix.S_IFREG {
		w.res.fail(w.max, g.Host, errors.New("the granted file is no longer a regular file"))
		return
	}
	if same, err := sameContent(src, dst, st.Size, dst0.Size); err == nil && same {
		return // unchanged
	}
	ext, err := extents(src, st.Size)
	if err != nil {
		w.res.fail(w.max, g.Host, fmt.Errorf("read the staged copy: %w", err))
		return
	}
	// In place, the old blocks are freed: the file is charged what it grows by.
	old := dst0.Blocks * 512
	if need := w.cost(ext, st.Size) - old; !w.fits(need) {
		w.overBudget(g.Host, need)
		return
	}
	if err := unix.Ftruncate(dst, 0); err != nil {
		w.res.fail(w.max, g.Host, fmt.Errorf("truncate: %w", err))
		return
	}
	n, err := copyExtents(dst, src, ext, st.Size)
	w.res.Bytes += n
	var now unix.Stat_t
	if unix.Fstat(dst, &now) == nil {
		w.charge(max(now.Blocks*512-old, 0))
	}
	if err != nil {
		w.res.fail(w.max, g.Host, fmt.Errorf("write (the file may be incomplete): %w", err))
		return
	}
	w.res.Files++
	w.setMode(dst, st.Mode, g.Host)
}

func (w *writer) regular(upper, host int, name, path string, st *unix.Stat_t) {
	if w.hasXattr(upper, name, "user.overlay.metacopy") {
		w.res.fail(w.max, path, errors.New("a metadata-only copy up: not supported, the file was not copied"))
		return
	}
	src, err := w.openStage(upper, name)
	if err != nil {
		w.res.fail(w.max, path, fmt.Errorf("open staged file: %w", err))
		return
	}
	defer unix.Close(src)
	ext, err := extents(src, st.Size)
	if err != nil {
		w.res.fail(w.max, path, fmt.Errorf("read staged file: %w", err))
		return
	}
	if need := w.cost(ext, st.Size); !w.fits(need) {
		w.overBudget(path, need)
		return
	}
	tmp, fd, err := createTemp(host, name, 0o600)
	if err != nil {
		w.res.fail(w.max, path, err)
		return
	}
	n, err := copyExtents(fd, src, ext, st.Size)
	w.res.Bytes += n
	if err == nil {
		w.setMode(fd, st.Mode, path)
		ts := []unix.Timespec{unix.NsecToTimespec(unix.TimespecToNsec(st.Atim)), unix.NsecToTimespec(unix.TimespecToNsec(st.Mtim))}
		_ = unix.UtimesNanoAt(fd, "", ts, unix.AT_EMPTY_PATH) // times are a courtesy, not a guarantee
	}
	if cerr := unix.Close(fd); err == nil && cerr != nil {
		err = cerr
	}
	if err == nil && !w.admit(host, tmp, path) {
		_ = unix.Unlinkat(host, tmp, 0) // best effort: the temporary name is airlock's
		return
	}
	if err == nil {
		err = w.replace(host, tmp, name, path)
	}
	if err != nil {
		_ = unix.Unlinkat(host, tmp, 0) // best effort: the temporary name is airlock's
		w.res.fail(w.max, path, fmt.Errorf("write: %w", err))
		return
	}
	w.res.Files++
}

func (w *writer) symlink(upper, host int, name, path string) {
	target, err := w.readlinkStage(upper, name)
	if err != nil {
		w.res.fail(w.max, path, fmt.Errorf("read staged symlink: %w", err))
		return
	}
	if !printable(target) {
		w.res.refuse(w.max, path, "its symlink target "+unprintable)
		return
	}
	if !w.fits(0) {
		w.overBudget(path, 0)
		return
	}
	tmp := tempName(name)
	if err := unix.Symlinkat(target, host, tmp); err != nil {
		w.res.fail(w.max, path, fmt.Errorf("symlink: %w", err))
		return
	}
	if !w.admit(host, tmp, path) {
		_ = unix.Unlinkat(host, tmp, 0) // best effort: the temporary name is airlock's
		return
	}
	if err := w.replace(host, tmp, name, path); err != nil {
		_ = unix.Unlinkat(host, tmp, 0) // best effort: the temporary name is airlock's
		w.res.fail(w.max, path, err)
		return
	}
	w.res.Symlinks++
}
