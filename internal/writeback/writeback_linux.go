package writeback

import (
	"errors"
	"fmt"
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

// WriteBack copies the stage to the host and returns what it did, with
// the rule (RuleProtect, RuleMaxWrite) behind each entry of
// Result.Refused. It must run once the sandbox has stopped writing (every
// process of it is dead). Each grant is copied on a thread of its own
// acting as the grant's owner (owner_linux.go).
func WriteBack(cfg Config) (Result, []string) {
	w := &writer{cfg: cfg, res: result{Result: Result{Complete: true}}, max: cfg.MaxListed, c: &creds{}}
	if w.max <= 0 {
		w.max = 50
	}
	for _, g := range cfg.Grants {
		var st unix.Stat_t
		if err := unix.Fstat(g.HostFD, &st); err != nil {
			w.res.fail(w.max, g.Host, fmt.Errorf("stat the grant: %w", err))
			continue
		}
		err := asOwner(owner{UID: st.Uid, GID: st.Gid}, func(c *creds) {
			w.c = c
			w.grant(g)
		})
		if err != nil {
			w.res.fail(w.max, g.Host, err)
		}
	}
	return w.res.Result, w.res.rules
}

type writer struct {
	cfg Config
	res result
	max int
	// c raises the stage-reading capability around lookups on the stage
	// (owner_linux.go).
	c *creds
	// used is the bytes the copy back has put on the host's disk so far,
	// against cfg.MaxBytes (budget_linux.go).
	used int64
	// bsize is the block size of the current grant's file system, and
	// holes whether it keeps holes.
	bsize int64
	holes bool
}

func (w *writer) refused(path string) string {
	if w.cfg.Refuse == nil {
		return ""
	}
	return w.cfg.Refuse(path)
}

func (w *writer) grant(g Grant) {
	w.measure(g.HostFD)
	if g.File {
		w.file(g)
		return
	}
	upper, err := w.openStageDir(w.cfg.StageFD, g.Stage+"/upper")
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
	grown := blocks(host)
	for _, name := range names {
		child := path + "/" + name
		var st unix.Stat_t
		if err := w.statStage(upper, name, &st); err != nil {
			w.res.fail(w.max, child, fmt.Errorf("stat staged entry: %w", err))
			continue
		}
		typ := st.Mode & unix.S_IFMT
		reason := w.refused(child)
		switch {
		case reason == "" && !isWhiteout(&st) && !printable(name):
			reason = "its name " + unprintable
		case reason == "" && gitDir && gitDirNames[strings.ToLower(name)]:
			reason = "git configuration or hooks (in a folder git treats as a repository): git would run what is planted there"
		case reason == "" && typ != unix.S_IFDIR && policy.GitdirPointer(name) && !isWhiteout(&st):
			reason = "a .git file or symlink: it would point git at another folder, possibly with planted hooks"
		case reason == "" && pinned(w.cfg.Pinned, child) && (typ != unix.S_IFDIR || w.opaque(upper, name)):
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
		// A new name may grow the host folder by a block: it is charged too.
		grown = w.chargeGrowth(host, grown)
	}
}

func (w *writer) subdir(upper, host int, name, path string, st *unix.Stat_t, depth int) {
	if w.hasXattr(upper, name, "user.overlay.redirect") {
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
		if !w.mkdir(host, name, path) {
			return
		}
	} else if herr != nil {
		w.res.fail(w.max, path, fmt.Errorf("stat: %w", herr))
		return
	}
	sub, err := w.openStageDir(upper, name)
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
	if herr == nil && hst.Mode&0o300 != 0o300 && st.Mode&0o300 == 0o300 {
		// Made writable inside (a read-only folder of the owner's, as Go's
		// module cache keeps them): so it is first, or nothing goes in.
		w.setMode(hsub, st.Mode, path)
	}
	if w.opaque(upper, name) {
		// Deleted and made anew inside the sandbox: what the host has and
		// the stage does not is gone.
		w.clearExcept(sub, hsub, path)
	}
	w.dir(sub, hsub, path, depth+1)
	w.setMode(hsub, st.Mode, path)
}

// mkdir creates host folder name, charged for the blocks it takes, and
// reports whether it did.
func (w *writer) mkdir(host int, name, path string) bool {
	if !w.fits(0) {
		w.overBudget(path, 0)
		return false
	}
	if err := unix.Mkdirat(host, name, 0o700); err != nil {
		w.res.fail(w.max, path, fmt.Errorf("mkdir: %w", err))
		return false
	}
	var st unix.Stat_t
	if err := unix.Fstatat(host, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || !w.fits(st.Blocks*512) {
		_ = unix.Unlinkat(host, name, unix.AT_REMOVEDIR) // just made, empty: undoing it is best effort
		if err != nil {
			w.res.fail(w.max, path, fmt.Errorf("stat the new folder: %w", err))
		} else {
			w.overBudget(path, st.Blocks*512)
		}
		return false
	}
	w.charge(st.Blocks * 512)
	w.res.Dirs++
	return true
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
	var st unix.Stat_t
	if unix.Fstat(sub, &st) == nil && st.Mode&0o300 != 0o300 {
		// A read-only folder of the owner's, deleted inside: the owner
		// may make it writable to empty it (and nobody else may).
		_ = unix.Fchmod(sub, st.Mode&0o777|0o300) // when it fails, the removals below say why
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
// sticky, when they differ from fd's: a folder of another user that the
// sandbox did not change is left alone (its owner alone may chmod it).
func (w *writer) setMode(fd int, mode uint32, path string) {
	if mode&(unix.S_ISUID|unix.S_ISGID|unix.S_ISVTX) != 0 {
		w.res.ModesDropped++
	}
	var st unix.Stat_t
	if unix.Fstat(fd, &st) == nil && st.Mode&0o7777 == mode&0o777 {
		return
	}
	// fchmod needs a real fd; O_PATH fds are refused with EBADF.
	if err := unix.Fchmod(fd, mode&0o777); err != nil {
		if err := unix.Fchmodat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), mode&0o777, 0); err != nil {
			w.res.fail(w.max, path, fmt.Errorf("chmod: %w", err))
		}
	}
}
