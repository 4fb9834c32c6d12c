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
	if !strings.HasPrefix(p, "/") {
		p = "/" + p // also turns "" into "/" rather than path.Clean's "."
	}
	return path.Clean(p)
}

// Abs resolves p against base (which must be absolute when p is relative)
// and returns its Clean form. It returns ErrInvalid for an empty p or a NUL
// byte in p or base, and ErrRelative for a relative p with a relative or
// empty base.
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
// both are cleaned. "/work" contains "/work/a" but not "/workshop". It
// fails closed: an empty or relative root or p, or one containing a NUL
// byte, is within nothing, so a mistaken "" grant cannot become "/".
func Within(root, p string) bool {
	if !valid(root) || !valid(p) {
		return false
	}
	root, p = Clean(root), Clean(p)
	if root == "/" {
		return true
	}
	return p == root || len(p) > len(root) && p[len(root)] == '/' && p[:len(root)] == root
}

// valid reports whether s is absolute and free of NUL bytes.
func valid(s string) bool {
	return strings.HasPrefix(s, "/") && strings.IndexByte(s, 0) < 0
}

// Join returns Clean(root + "/" + rel) for a canonical root and a relative
// path rel. Join never leaves root for a rel without ".." elements; callers
// that join untrusted rel must check Within afterwards.
func Join(root, rel string) string { return Clean(root + "/" + rel) }
