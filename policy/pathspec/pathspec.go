// Package pathspec canonicalizes policy paths lexically and answers containment
// questions. It never consults the filesystem: symlinks are resolved at
// enforcement time relative to an open directory fd, so a checked path cannot
// be swapped before use. It stops "/work/../etc" and "/workshop" being taken
// for "/work".
package pathspec

import (
	"errors"
	"path"
	"strings"
)

// ErrRelative is returned by Abs when a relative path has no absolute base.
var ErrRelative = errors.New("pathspec: relative path with no absolute base")

// ErrInvalid is returned for empty paths and paths containing NUL bytes.
var ErrInvalid = errors.New("pathspec: empty path or NUL byte")

// Clean returns the lexical canonical form of an absolute path: one slash
// between elements, no ".", no "..", no trailing slash (except "/"). A ".."
// at the root stays at the root, as the kernel does. A relative p is treated
// as if rooted at "/".
func Clean(p string) string {
	return path.Clean("/" + p)
}

// Abs resolves p against base (which must be absolute when p is relative)
// and returns its Clean form.
func Abs(base, p string) (string, error) {
	if p == "" || strings.IndexByte(p, 0) >= 0 || strings.IndexByte(base, 0) >= 0 {
		return "", ErrInvalid
	}
	if strings.HasPrefix(p, "/") {
		return Clean(p), nil
	}
	if !strings.HasPrefix(base, "/") {
		return "", ErrRelative
	}
	return Clean(base + "/" + p), nil
}

// Within reports whether path p is root itself or lies beneath it, after
// both are cleaned. "/work" contains "/work/a" but not "/workshop".
func Within(root, p string) bool {
	root, p = Clean(root), Clean(p)
	if root == "/" {
		return true
	}
	return p == root || strings.HasPrefix(p, root+"/")
}
