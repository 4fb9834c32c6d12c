package writeback

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/policy"
)

// beneath confines every host lookup to the grant: no "..", no symlink
// (RESOLVE_NO_SYMLINKS also refuses absolute ones), no /proc magic link.
// See openat2(2); Linux 5.6.
const beneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// maxDepth bounds the recursion: a path deeper than this is refused.
const maxDepth = 256

// OpenHost opens a grant's host path for Grant.HostFD: O_PATH, with no
// symlink anywhere in the path, so what is opened is exactly the path the
// policy names.
func OpenHost(path string) (int, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS})
	if err != nil {
		return -1, fmt.Errorf("open fs_write grant %s: %w", path, err)
	}
	return fd, nil
}

// Usage returns the bytes in use on the stage and whether it is full (no
// block or no inode left), from statfs(2) on its fd.
func Usage(stageFD int) (used int64, full bool, err error) {
	var st unix.Statfs_t
	if err := unix.Fstatfs(stageFD, &st); err != nil {
		return 0, false, fmt.Errorf("statfs stage: %w", err)
	}
	used = int64(st.Blocks-st.Bfree) * st.Bsize
	return used, st.Bavail == 0 || st.Ffree == 0, nil
}

// Moved reports whether the grant's host path no longer leads to the
// folder or file opened at the start (it was renamed, replaced or turned
// into a symlink on the host during the run).
func Moved(g Grant) bool {
	fd, err := OpenHost(g.Host)
	if err != nil {
		return true
	}
	defer unix.Close(fd)
	var a, b unix.Stat_t
	if unix.Fstat(fd, &a) != nil || unix.Fstat(g.HostFD, &b) != nil {
		return true
	}
	return a.Dev != b.Dev || a.Ino != b.Ino
}

// WriteBack copies the stage to the host. It must run once the sandbox has
// stopped writing (every process of it is dead).
func WriteBack(cfg Config) Result {
	w := &writer{cfg: cfg, res: result{Result{Complete: true}}, max: cfg.MaxListed}
	if w.max <= 0 {
		w.max = 50
	}
	for _, g := range cfg.Grants {
		w.grant(g)
	}
	return w.res.Result
}

type writer struct {
	cfg Config
	res result
	max int
}

func (w *writer) refused(path string) string {
	if w.cfg.Refuse == nil {
		return ""
	}
	return w.cfg.Refuse(path)
}

func (w *writer) grant(g Grant) {
	if g.File {
		w.file(g)
		return
	}
	upper, err := openDir(w.cfg.StageFD, g.Stage+"/upper")
	if err != nil {
		w.res.fail(w.max, g.Host, fmt.Errorf("open the staged writes: %w", err))
		return
	}
	defer unix.Close(upper)
	host, err := reopenDir(g.HostFD)
	if err != nil {
		w.res.fail(w.max, g.Host, fmt.Errorf("open the grant: %w", err))
		return
	}
	defer unix.Close(host)
	w.dir(upper, host, g.Host, 0)
}

// file writes back a single-file grant in place: the file is the grant, so
// it keeps its inode (the parent folder is not granted, and nothing is
// created there).
func (w *writer) file(g Grant) {
	src, err := unix.Openat(w.cfg.StageFD, g.Stage+"/file", unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
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
	dst, err := unix.Open("/proc/self/fd/"+strconv.Itoa(g.HostFD), unix.O_WRONLY|unix.O_NOCTTY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
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
	if err := unix.Ftruncate(dst, 0); err != nil {
		w.res.fail(w.max, g.Host, fmt.Errorf("truncate: %w", err))
		return
	}
	n, err := copyFD(dst, src)
	w.res.Bytes += n
	if err != nil {
		w.res.fail(w.max, g.Host, fmt.Errorf("write (the file may be incomplete): %w", err))
		return
	}
	w.res.Files++
	w.setMode(dst, st.Mode, g.Host)
}

// dir copies the upper folder upper onto the host folder host (path is
// the host path of both).
func (w *writer) dir(upper, host int, path string, depth int) {
	if depth > maxDepth {
		w.res.fail(w.max, path, fmt.Errorf("nested more than %d folders deep", maxDepth))
		return
	}
	names, err := readNames(upper)
	if err != nil {
		w.res.fail(w.max, path, fmt.Errorf("list staged folder: %w", err))
		return
	}
	gitDir := isGitDir(upper, host, names)
	for _, name := range names {
		child := path + "/" + name
		var st unix.Stat_t
		if err := unix.Fstatat(upper, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			w.res.fail(w.max, child, fmt.Errorf("stat staged entry: %w", err))
			continue
		}
		typ := st.Mode & unix.S_IFMT
		reason := w.refused(child)
		switch {
		case reason == "" && gitDir && gitDirNames[strings.ToLower(name)]:
			reason = "git configuration or hooks (in a folder git treats as a repository): git would run what is planted there"
		case reason == "" && typ != unix.S_IFDIR && policy.GitdirPointer(name) && !isWhiteout(&st):
			reason = "a .git file or symlink: it would point git at another folder, possibly with planted hooks"
		case reason == "" && pinned(w.cfg.Pinned, child) && (typ != unix.S_IFDIR || isOpaque(upper, name)):
			reason = "another grant lies at or beneath it: it stays as it is"
		}
		if reason != "" {
			w.res.refuse(w.max, child, reason)
			continue
		}
		switch {
		case isWhiteout(&st):
			w.remove(host, name, child)
		case typ == unix.S_IFDIR:
			w.subdir(upper, host, name, child, &st, depth)
		case typ == unix.S_IFREG:
			w.regular(upper, host, name, child, &st)
		case typ == unix.S_IFLNK:
			w.symlink(upper, host, name, child)
		default:
			w.res.refuse(w.max, child, "not a regular file, folder or symlink (a device, fifo or socket)")
		}
	}
}

func (w *writer) subdir(upper, host int, name, path string, st *unix.Stat_t, depth int) {
	if hasXattr(upper, name, "user.overlay.redirect") {
		w.res.fail(w.max, path, errors.New("a renamed folder that overlayfs redirected: not supported, nothing of it was copied"))
		return
	}
	var hst unix.Stat_t
	herr := unix.Fstatat(host, name, &hst, unix.AT_SYMLINK_NOFOLLOW)
	if herr == nil && hst.Mode&unix.S_IFMT != unix.S_IFDIR {
		if err := w.removeEntry(host, name, path); err != nil {
			w.res.fail(w.max, path, err)
			return
		}
		herr = unix.ENOENT
	}
	if errors.Is(herr, unix.ENOENT) {
		if err := unix.Mkdirat(host, name, 0o700); err != nil {
			w.res.fail(w.max, path, fmt.Errorf("mkdir: %w", err))
			return
		}
		w.res.Dirs++
	} else if herr != nil {
		w.res.fail(w.max, path, fmt.Errorf("stat: %w", herr))
		return
	}
	sub, err := openDir(upper, name)
	if err != nil {
		w.res.fail(w.max, path, fmt.Errorf("open staged folder: %w", err))
		return
	}
	defer unix.Close(sub)
	hsub, err := openDir(host, name)
	if err != nil {
		w.res.fail(w.max, path, fmt.Errorf("open folder: %w", err))
		return
	}
	defer unix.Close(hsub)
	if isOpaque(upper, name) {
		// Deleted and made anew inside the sandbox: what the host has and
		// the stage does not is gone.
		w.clearExcept(sub, hsub, path)
	}
	w.dir(sub, hsub, path, depth+1)
	w.setMode(hsub, st.Mode, path)
}

// clearExcept removes the entries of host folder hsub that the staged
// folder sub does not have.
func (w *writer) clearExcept(sub, hsub int, path string) {
	keep, err := readNames(sub)
	if err != nil {
		w.res.fail(w.max, path, fmt.Errorf("list staged folder: %w", err))
		return
	}
	have, err := readNames(hsub)
	if err != nil {
		w.res.fail(w.max, path, fmt.Errorf("list folder: %w", err))
		return
	}
	for _, n := range have {
		if slices.Contains(keep, n) {
			continue
		}
		w.remove(hsub, n, path+"/"+n)
	}
}

func (w *writer) regular(upper, host int, name, path string, st *unix.Stat_t) {
	if hasXattr(upper, name, "user.overlay.metacopy") {
		w.res.fail(w.max, path, errors.New("a metadata-only copy up: not supported, the file was not copied"))
		return
	}
	src, err := unix.Openat(upper, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		w.res.fail(w.max, path, fmt.Errorf("open staged file: %w", err))
		return
	}
	defer unix.Close(src)
	tmp, fd, err := createTemp(host, name, 0o600)
	if err != nil {
		w.res.fail(w.max, path, err)
		return
	}
	n, err := copyFD(fd, src)
	w.res.Bytes += n
	if err == nil {
		w.keepOwner(host, name, fd)
		w.setMode(fd, st.Mode, path)
		ts := []unix.Timespec{unix.NsecToTimespec(unix.TimespecToNsec(st.Atim)), unix.NsecToTimespec(unix.TimespecToNsec(st.Mtim))}
		_ = unix.UtimesNanoAt(fd, "", ts, unix.AT_EMPTY_PATH) // times are a courtesy, not a guarantee
	}
	if cerr := unix.Close(fd); err == nil && cerr != nil {
		err = cerr
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
	target, err := readlinkat(upper, name)
	if err != nil {
		w.res.fail(w.max, path, fmt.Errorf("read staged symlink: %w", err))
		return
	}
	tmp := tempName(name)
	if err := unix.Symlinkat(target, host, tmp); err != nil {
		w.res.fail(w.max, path, fmt.Errorf("symlink: %w", err))
		return
	}
	if err := w.replace(host, tmp, name, path); err != nil {
		_ = unix.Unlinkat(host, tmp, 0) // best effort: the temporary name is airlock's
		w.res.fail(w.max, path, err)
		return
	}
	w.res.Symlinks++
}

// replace renames tmp over name in host. A folder in the way is removed
// first (a rename cannot replace a non-empty folder with a file).
func (w *writer) replace(host int, tmp, name, path string) error {
	var hst unix.Stat_t
	if err := unix.Fstatat(host, name, &hst, unix.AT_SYMLINK_NOFOLLOW); err == nil && hst.Mode&unix.S_IFMT == unix.S_IFDIR {
		if err := w.removeEntry(host, name, path); err != nil {
			return err
		}
	}
	if err := unix.Renameat(host, tmp, host, name); err != nil {
		return fmt.Errorf("rename into place: %w", err)
	}
	return nil
}

// remove deletes host entry name (a whiteout on the stage), reporting
// what it cannot.
func (w *writer) remove(host int, name, path string) {
	if reason := w.refused(path); reason != "" {
		w.res.refuse(w.max, path, reason)
		return
	}
	if pinned(w.cfg.Pinned, path) {
		w.res.refuse(w.max, path, "another grant lies at or beneath it: it stays as it is")
		return
	}
	if err := w.removeEntry(host, name, path); err != nil {
		w.res.fail(w.max, path, err)
	}
}

// removeEntry deletes host entry name, a folder with everything in it,
// without following symlinks. Protected or pinned paths inside stay, and
// so does the folder that holds them.
func (w *writer) removeEntry(host int, name, path string) error {
	err := unix.Unlinkat(host, name, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err == nil {
		w.res.Removed++
		return nil
	}
	if !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EPERM) {
		return fmt.Errorf("remove: %w", err)
	}
	sub, err := openDir(host, name)
	if err != nil {
		return fmt.Errorf("remove: %w", err)
	}
	names, err := readNames(sub)
	if err == nil {
		for _, n := range names {
			p := path + "/" + n
			if reason := w.refused(p); reason != "" || pinned(w.cfg.Pinned, p) {
				if reason == "" {
					reason = "another grant lies at or beneath it: it stays as it is"
				}
				w.res.refuse(w.max, p, reason)
				continue
			}
			if rerr := w.removeEntry(sub, n, p); rerr != nil {
				err = rerr
			}
		}
	}
	unix.Close(sub)
	if err != nil {
		return err
	}
	if err := unix.Unlinkat(host, name, unix.AT_REMOVEDIR); err != nil {
		if errors.Is(err, unix.ENOTEMPTY) {
			return nil // a refused entry keeps it; the refusal is reported
		}
		return fmt.Errorf("remove folder: %w", err)
	}
	w.res.Removed++
	return nil
}

// setMode applies the staged permission bits without setuid, setgid and
// sticky.
func (w *writer) setMode(fd int, mode uint32, path string) {
	if mode&(unix.S_ISUID|unix.S_ISGID|unix.S_ISVTX) != 0 {
		w.res.ModesDropped++
	}
	// fchmod needs a real fd; O_PATH fds are refused with EBADF.
	if err := unix.Fchmod(fd, mode&0o777); err != nil {
		if err := unix.Fchmodat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), mode&0o777, 0); err != nil {
			w.res.fail(w.max, path, fmt.Errorf("chmod: %w", err))
		}
	}
}

// keepOwner gives the new file fd the owner of the entry it replaces, when
// the supervisor may (root): a file of the user stays the user's.
func (w *writer) keepOwner(host int, name string, fd int) {
	if os.Geteuid() != 0 {
		return
	}
	var old unix.Stat_t
	if unix.Fstatat(host, name, &old, unix.AT_SYMLINK_NOFOLLOW) != nil {
		// New: owned like the folder it is in.
		if unix.Fstat(host, &old) != nil {
			return
		}
	}
	_ = unix.Fchown(fd, int(old.Uid), int(old.Gid)) // keeping the owner is a courtesy; root's file is still safe
}
