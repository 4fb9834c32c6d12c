package writeback

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// The filesystem helpers of the copy back: every lookup by fd and name,
// nothing followed.

// isGitDir reports whether a folder is one git treats as a repository: it
// holds HEAD and objects (on the host or the stage).
func isGitDir(upper, host int, names []string) bool {
	has := func(n string) bool {
		if slices.Contains(names, n) {
			return true
		}
		var st unix.Stat_t
		return unix.Fstatat(host, n, &st, unix.AT_SYMLINK_NOFOLLOW) == nil
	}
	return has("HEAD") && (has("objects") || has("refs"))
}

func isWhiteout(st *unix.Stat_t) bool {
	return st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0
}

// opaque reports whether staged folder dir/name is opaque: deleted and
// made anew inside the sandbox.
func (w *writer) opaque(dir int, name string) bool {
	v, ok := w.xattr(dir, name, "user.overlay.opaque")
	return ok && v == "y"
}

func (w *writer) hasXattr(dir int, name, attr string) bool {
	_, ok := w.xattr(dir, name, attr)
	return ok
}

// The lookups on the stage: with CAP_DAC_READ_SEARCH raised, since the
// sandbox chose the modes there (owner_linux.go).

func (w *writer) xattr(dir int, name, attr string) (string, bool) {
	w.c.raise()
	defer w.c.lower()
	return xattr(dir, name, attr)
}

func (w *writer) statStage(dir int, name string, st *unix.Stat_t) error {
	w.c.raise()
	defer w.c.lower()
	return unix.Fstatat(dir, name, st, unix.AT_SYMLINK_NOFOLLOW)
}

func (w *writer) openStageDir(dir int, name string) (int, error) {
	w.c.raise()
	defer w.c.lower()
	return openDir(dir, name)
}

// openStage opens staged file dir/name for reading, beneath dir.
func (w *writer) openStage(dir int, name string) (int, error) {
	w.c.raise()
	defer w.c.lower()
	return unix.Openat2(dir, name, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC, Resolve: beneath})
}

func (w *writer) readlinkStage(dir int, name string) (string, error) {
	w.c.raise()
	defer w.c.lower()
	return readlinkat(dir, name)
}

// xattr reads attr of dir/name without following a symlink.
func xattr(dir int, name, attr string) (string, bool) {
	fd, err := unix.Openat(dir, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", false
	}
	defer unix.Close(fd)
	buf := make([]byte, 256)
	// The magic link leads to the entry itself (the fd was opened O_NOFOLLOW).
	n, err := unix.Getxattr("/proc/self/fd/"+strconv.Itoa(fd), attr, buf)
	if err != nil {
		return "", false
	}
	return string(buf[:n]), true
}

// openDir opens dir/name as a folder, beneath dir, following no symlink.
func openDir(dir int, name string) (int, error) {
	return unix.Openat2(dir, name, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: beneath})
}

// reopenDir turns an O_PATH fd of a folder into one that can be listed.
func reopenDir(fd int) (int, error) { return openDir(fd, ".") }

// readNames lists a folder, without "." and "..".
func readNames(fd int) ([]string, error) {
	// A dup shares the offset, so rewind it; the File closes only the dup.
	dup, err := unix.Dup(fd)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), "dir")
	defer f.Close()
	if _, err := unix.Seek(dup, 0, io.SeekStart); err != nil {
		return nil, err
	}
	return f.Readdirnames(-1)
}

func readlinkat(dir int, name string) (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(dir, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// tempName is the temporary name a file is written under before it is
// renamed into place.
func tempName(name string) string {
	var b [6]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand); O_EXCL refuses a clash anyway
	base := name
	if len(base) > 200 {
		cut := 200
		for cut > 0 && !utf8.RuneStart(base[cut]) {
			cut-- // do not split a UTF-8 sequence
		}
		base = base[:cut]
	}
	return ".airlock-" + strconv.FormatUint(uint64(b[0])|uint64(b[1])<<8|uint64(b[2])<<16|uint64(b[3])<<24|uint64(b[4])<<32|uint64(b[5])<<40, 36) + "-" + base
}

// createTemp creates a new file beside name in host, with O_EXCL.
func createTemp(host int, name string, mode uint32) (string, int, error) {
	for range 8 {
		tmp := tempName(name)
		fd, err := unix.Openat(host, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
		if errors.Is(err, unix.EEXIST) {
			continue
		}
		if err != nil {
			return "", -1, fmt.Errorf("create: %w", err)
		}
		return tmp, fd, nil
	}
	return "", -1, errors.New("create: no free temporary name")
}

// sameContent reports whether two files of the given sizes hold the same
// bytes (so an unchanged single-file grant is not rewritten).
func sameContent(a, b int, sa, sb int64) (bool, error) {
	if sa != sb {
		return false, nil
	}
	bufA, bufB := make([]byte, 64<<10), make([]byte, 64<<10)
	for off := int64(0); off < sa; {
		na, err := unix.Pread(a, bufA, off)
		if err != nil {
			return false, err
		}
		nb, err := unix.Pread(b, bufB[:na], off)
		if err != nil {
			return false, err
		}
		if na == 0 || nb != na || string(bufA[:na]) != string(bufB[:nb]) {
			return false, nil
		}
		off += int64(na)
	}
	return true, nil
}
