package metabroker

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Config says what the broker may change, and as whom.
type Config struct {
	// Grants are the canonical absolute paths beneath which the sandbox may
	// change metadata: its fs_write grants and its scratch folder. Each
	// must exist; New opens them (O_PATH), and a grant replaced afterwards
	// is no longer one.
	Grants []string

	// Identity is the sandbox's uid and gid: every call runs under them
	// (see Identity.Do).
	Identity Identity

	// Protected, when set, returns why the path beneath a grant must keep
	// its metadata (a protected path: git hooks, shell rc files), or "".
	Protected func(path string) string

	// Deny, when set, is told about every refusal. It must not block.
	Deny func(Denial)
}

// Denial is one call the broker refused.
type Denial struct {
	Op      string // the syscall: "chmod", "fchownat", "lsetxattr", ...
	Path    string // the host path of the file it would have changed, as the broker found it; "" when it found none
	Message string // what was refused and why
	Hint    string // what the program can do instead
}

// Broker answers a landlock sandbox's metadata calls. It is safe for
// concurrent use.
type Broker struct {
	cfg    Config
	grants []grant
	pool   *pool
}

// grant is one path of Config.Grants and the broker's O_PATH fd of it.
type grant struct {
	path string
	fd   int
}

// New opens the grants and starts the threads that carry out the calls.
// The caller calls Close once every call Handle took is answered (once
// connbroker's Serve has returned).
func New(cfg Config) (*Broker, error) {
	b := &Broker{cfg: cfg}
	for _, g := range cfg.Grants {
		if !strings.HasPrefix(g, "/") {
			b.closeGrants()
			return nil, fmt.Errorf("metabroker: airlock bug: grant %q is not an absolute path", g)
		}
		fd, err := unix.Open(g, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			b.closeGrants()
			return nil, fmt.Errorf("metabroker: open grant %s: %w", g, err)
		}
		b.grants = append(b.grants, grant{path: strings.TrimSuffix(g, "/"), fd: fd})
	}
	// Longest first: a path beneath nested grants is checked against the
	// innermost first (any that holds it will do).
	slices.SortFunc(b.grants, func(x, y grant) int { return len(y.path) - len(x.path) })
	p, err := startPool(cfg.Identity)
	if err != nil {
		b.closeGrants()
		return nil, err
	}
	b.pool = p
	return b, nil
}

// Close stops the broker's threads and closes its grants.
func (b *Broker) Close() {
	b.pool.close()
	b.closeGrants()
}

func (b *Broker) closeGrants() {
	for _, g := range b.grants {
		unix.Close(g.fd)
	}
	b.grants = nil
}

// beneath reports the host path of the open file obj and whether it is
// linked beneath a grant: its path (d_path, readlink of the fd in
// /proc/thread-self/fd) starts with a grant's, and that path, opened again
// beneath the grant's own fd with RESOLVE_BENEATH and no symlinks at all,
// is the same inode. The path alone proves nothing (a file named "x
// (deleted)", a grant renamed since); the inode found beneath the grant's
// fd does. It runs on a pool thread, so the walk is the sandbox's.
func (b *Broker) beneath(obj int) (string, bool) {
	buf := make([]byte, unix.PathMax+1)
	n, err := unix.Readlink("/proc/thread-self/fd/"+strconv.Itoa(obj), buf)
	if err != nil || n > unix.PathMax || n == 0 || buf[0] != '/' {
		return "", false // a pipe, socket or anonymous inode has no path
	}
	p := string(buf[:n])
	var st unix.Stat_t
	if unix.Fstat(obj, &st) != nil {
		return p, false
	}
	for _, g := range b.grants {
		rel, ok := under(g.path, p)
		if !ok {
			continue
		}
		var gst unix.Stat_t
		if rel == "" {
			err = unix.Fstat(g.fd, &gst)
		} else {
			var fd int
			fd, err = unix.Openat2(g.fd, rel, &unix.OpenHow{Flags: unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
				Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS})
			if err == nil {
				err = unix.Fstat(fd, &gst)
				unix.Close(fd)
			}
		}
		if err == nil && gst.Dev == st.Dev && gst.Ino == st.Ino {
			return p, true
		}
	}
	return p, false
}

// under returns p relative to root ("" for root itself) when p is root or
// beneath it, comparing whole path elements.
func under(root, p string) (string, bool) {
	if root == "" {
		return strings.TrimPrefix(p, "/"), true // the grant "/"
	}
	rest, ok := strings.CutPrefix(p, root)
	switch {
	case !ok:
		return "", false
	case rest == "":
		return "", true
	case rest[0] == '/':
		return rest[1:], true
	}
	return "", false
}

// deny reports a refusal and returns EPERM, the errno every refusal of the
// broker's own fails with.
func (b *Broker) deny(name, path, msg, hint string) unix.Errno {
	if b.cfg.Deny != nil {
		b.cfg.Deny(Denial{Op: name, Path: path, Message: msg, Hint: hint})
	}
	return unix.EPERM
}

// errno returns err's errno, or EPERM for an error without one.
func errno(err error) unix.Errno {
	var e unix.Errno
	switch {
	case err == nil:
		return 0
	case errors.As(err, &e):
		return e
	}
	return unix.EPERM
}
