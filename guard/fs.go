package guard

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
	"github.com/airlock-sandbox/airlock/policy/pathspec"
)

// refusal is a filesystem operation that the grant check admitted but the
// resolution beneath the grant root refused: a symlink escape, a hard link,
// a device. The exported form is a *policy.DenyError.
type refusal struct {
	reason string // DenyError.Reason
	hint   string // DenyError.Hint: what to do instead, within the grants
	// escaped is set when the kernel said the path leaves the root (EXDEV):
	// a shorter grant root that also contains the path may still allow it.
	escaped bool
}

func (r *refusal) Error() string { return r.reason }

// Read returns the content of a regular file inside fs_read or fs_write.
// Relative symlinks are followed only while they stay beneath a grant root
// that contains the path; absolute symlinks are always refused, because
// openat2 RESOLVE_BENEATH cannot tell where they land. Files with more than
// one hard link, devices, fifos and sockets are refused. The
// content counts against max_output_bytes; a file larger than what is left
// halts the meter and returns the *budget.ExhaustedError with no data.
func (g *Guard) Read(path string) ([]byte, error) {
	var data []byte
	err := g.fsOp("read", policy.FSRead, path, func(root heldRoot, rel string) error {
		var err error
		data, err = g.readAt(root, rel)
		return err
	})
	if err != nil {
		return nil, err
	}
	return data, nil
}

// ReadTo is Read that copies the file to w as it reads it, in chunks of at
// most 32 KiB, instead of returning it: memory stays small whatever the
// file's size. Each chunk counts against max_output_bytes before it is
// written to w. It returns the bytes written to w; an error of w ends the
// copy and is returned, wrapped.
func (g *Guard) ReadTo(path string, w io.Writer) (int64, error) {
	var n int64
	err := g.fsOp("read", policy.FSRead, path, func(root heldRoot, rel string) error {
		var err error
		n, err = g.copyAt(root, rel, w)
		return err
	})
	return n, err
}

// Write creates or truncates a regular file inside fs_write and writes data
// to it with mode 0644 (before umask). Missing parent directories beneath the
// grant root are created with mode 0755. It never writes through a symlink
// and refuses files with more than one hard link.
func (g *Guard) Write(path string, data []byte) error {
	_, err := g.WriteFrom(path, bytes.NewReader(data))
	return err
}

// WriteFrom is Write with the content read from r to its end, in chunks of
// at most 32 KiB. The file is checked and truncated before r is read, so
// an error of r (returned, wrapped) leaves it holding what was read so
// far: give r a complete local copy (a spooled upload), not a network
// stream. It returns the bytes written.
func (g *Guard) WriteFrom(path string, r io.Reader) (int64, error) {
	var n int64
	err := g.fsOp("write", policy.FSWrite, path, func(root heldRoot, rel string) error {
		var err error
		n, err = writeAt(root, rel, r)
		return err
	})
	return n, err
}

// List returns the entries of a directory inside fs_read or fs_write,
// sorted by name. The entry names count against max_output_bytes.
func (g *Guard) List(dir string) ([]Entry, error) {
	entries, _, err := g.ListN(dir, 0)
	return entries, err
}

// ListN is List of at most max entries (all when max <= 0): the first max
// the directory gives, sorted by name, and whether any were left out. The
// memory it takes is bounded by max, however many entries the sandbox
// made; only the names returned count against max_output_bytes.
func (g *Guard) ListN(dir string, max int) ([]Entry, bool, error) {
	var entries []Entry
	var more bool
	err := g.fsOp("list", policy.FSRead, dir, func(root heldRoot, rel string) error {
		var err error
		entries, more, err = g.listAt(root, rel, max)
		return err
	})
	if err != nil {
		return nil, false, err
	}
	return entries, more, nil
}

// Remove deletes a file, a symlink (not its target) or an empty directory
// inside fs_write. A grant root itself cannot be removed.
func (g *Guard) Remove(path string) error {
	return g.fsOp("remove", policy.FSWrite, path, removeAt)
}

// fsOp runs the budget, the grant check and then do for the most specific
// grant root containing path, falling back to shorter roots only when the
// kernel says the path escapes the longer one.
func (g *Guard) fsOp(op string, c policy.Capability, path string, do func(root heldRoot, rel string) error) error {
	if err := g.charge(op, path); err != nil {
		return err
	}
	done, err := g.begin()
	if err != nil {
		return err
	}
	defer done()
	canon, err := pathspec.Abs(g.cwd, path)
	if err != nil {
		return g.deny(audit.LayerFS, &policy.DenyError{Cap: c, Op: op, Subject: path, Reason: err.Error()}, "give an absolute path or a path relative to the working directory")
	}
	roots := g.readRoots
	check := g.policy.CheckRead
	if c == policy.FSWrite {
		roots, check = g.writeRoots, g.policy.CheckWrite
	}
	if err := check("/", canon); err != nil {
		var de *policy.DenyError
		if !errors.As(err, &de) {
			return err
		}
		de.Op = op
		if c == policy.FSWrite && op == "write" {
			// Write creates the file and its folders: the grant to suggest
			// is the nearest folder that exists, since a grant must.
			de.Fix = g.policy.SuggestWrite(canon, existingAncestor(canon))
		}
		return g.deny(audit.LayerFS, de, "")
	}

	var ref *refusal
	ran := false
	for _, root := range roots {
		if !pathspec.Within(root, canon) {
			continue
		}
		ran, ref = true, nil
		held, ok := g.roots[root]
		if !ok {
			return errors.New("airlock bug: guard: grant " + root + " has no root fd")
		}
		err = g.as(func() error { return do(held, relTo(root, canon)) })
		if !errors.As(err, &ref) || !ref.escaped {
			break
		}
	}
	if !ran {
		// Check admitted a path that no grant root contains: the policy and
		// the root lists disagree. Fail closed.
		return errors.New("airlock bug: guard: " + op + " " + canon + ": admitted path is in no grant root")
	}
	if ref != nil {
		de := &policy.DenyError{Cap: c, Op: op, Subject: canon, Reason: ref.reason}
		return g.deny(audit.LayerFS, de, ref.hint)
	}
	var ee *budget.ExhaustedError
	if errors.As(err, &ee) {
		return g.exhausted(op, canon, err)
	}
	msg := ""
	if err != nil {
		msg = err.Error()
		err = &fs.PathError{Op: op, Path: canon, Err: err}
	}
	g.allow(audit.LayerFS, op, canon, c, msg)
	return err
}

// relTo returns canon relative to root, "." for the root itself. Both are
// canonical and root contains canon.
func relTo(root, canon string) string {
	switch {
	case root == canon:
		return "."
	case root == "/":
		return canon[1:]
	}
	return canon[len(root)+1:]
}

// ErrClosed is returned by operations on a closed guard (the session it
// belonged to has ended).
var ErrClosed = errors.New("guard: closed: the session has ended")

// begin registers an operation so that Close waits for it; done ends it.
func (g *Guard) begin() (done func(), err error) {
	g.closeMu.Lock()
	defer g.closeMu.Unlock()
	if g.closed {
		return nil, ErrClosed
	}
	g.opsWG.Add(1)
	return g.opsWG.Done, nil
}

// existingAncestor returns path when it exists on the host, else its
// nearest ancestor that is a folder, for the operator's suggestion only;
// "" when that would be "/". It never follows a symlink (a grant must not
// run through one), so a symlink on the way gives "".
func existingAncestor(path string) string {
	for p := path; p != "/" && p != "."; p = filepath.Dir(p) {
		fi, err := os.Lstat(p)
		switch {
		case err == nil && fi.Mode()&fs.ModeSymlink != 0:
			return ""
		case err == nil && (p == path || fi.IsDir()):
			return p
		case err == nil, !errors.Is(err, fs.ErrNotExist):
			return ""
		}
	}
	return ""
}
