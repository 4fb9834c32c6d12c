package policy

import (
	"strings"

	"github.com/airlock-sandbox/airlock/policy/pathspec"
	"github.com/airlock-sandbox/airlock/policy/protected"
)

// Protected paths: code that can write a folder can plant code that the
// host runs later, outside any sandbox (a git hook, an .envrc, a shell rc
// file, an editor's or agent's configuration). The built-in list and why
// each entry is on it are in policy/protected.

// ProtectedEntry is one entry of the built-in protected list, as a path
// relative to an fs_write grant.
type ProtectedEntry = protected.Entry

// BuiltinProtected lists the paths that stay read-only at the top of every
// fs_write grant (protected.Builtin). Entries under .git/ apply only where
// .git exists.
var BuiltinProtected = protected.Builtin

// Protection is one path inside an fs_write grant that the sandbox sees
// read-only and cannot create.
type Protection struct {
	Path  string // canonical absolute path
	Grant string // the fs_write grant that contains it
	Dir   bool   // a directory (the placeholder's type when the path is absent)
	// Builtin is set for entries of BuiltinProtected, which apply only
	// where their parent exists (and .git/ entries only where .git does).
	Builtin bool
	Why     string
}

// Protections returns every protected path: the built-in list at the top
// of each fs_write grant, without the fs_unprotect entries, then the
// fs_protect entries.
func (p *Policy) Protections() []Protection {
	var out []Protection
	for _, g := range p.fsWrite {
		for _, e := range BuiltinProtected {
			path := pathspec.Join(g, e.Name)
			if p.unprotected(path) || !within(p.fsWrite, path) {
				continue
			}
			out = append(out, Protection{Path: path, Grant: g, Dir: e.Dir, Builtin: true, Why: e.Why})
		}
	}
	for _, f := range p.fsProtect {
		out = append(out, Protection{Path: f, Grant: grantOf(p.fsWrite, f), Dir: true, Why: "listed in fs_protect"})
	}
	return out
}

func (p *Policy) unprotected(path string) bool {
	for _, u := range p.fsUnprotect {
		if pathspec.Within(u, path) {
			return true
		}
	}
	return false
}

// grantOf returns the longest root in roots that contains path, or "".
func grantOf(roots []string, path string) string {
	best := ""
	for _, r := range roots {
		if pathspec.Within(r, path) && len(r) > len(best) {
			best = r
		}
	}
	return best
}

// WriteBackRefusal reports why a path written inside an fs_write grant may
// never be copied to the host, or "" when it may. path is canonical and
// absolute. Beyond Protections, which the kernel enforces at the top of each
// grant, it refuses the dangerous names at any depth: any hooks folder and
// any config, config.worktree or commondir file inside a git directory
// (.git, or a folder whose name ends in .git), any file named .git (a
// gitdir pointer that can redirect a repository to planted hooks), the
// built-in names anywhere, and everything under fs_protect and fs_deny.
// Names compare without regard to case, for case-insensitive filesystems.
func (p *Policy) WriteBackRefusal(path string) string {
	for _, f := range p.fsProtect {
		if pathspec.Within(f, path) {
			return "inside fs_protect " + f
		}
	}
	for _, f := range p.fsDeny {
		if pathspec.Within(f, path) {
			return "inside fs_deny " + f
		}
	}
	if p.unprotected(path) {
		return ""
	}
	g := grantOf(p.fsWrite, path)
	if g == "" {
		return "outside every fs_write grant"
	}
	rel := strings.TrimPrefix(strings.TrimPrefix(path, g), "/")
	if rel == "" {
		return ""
	}
	comps := strings.Split(strings.ToLower(rel), "/")
	for i, c := range comps {
		if c == ".git" || strings.HasSuffix(c, ".git") {
			for _, d := range comps[i+1:] {
				if d == "hooks" {
					return "a git hooks folder: git would run what is planted there"
				}
			}
			if i+1 < len(comps) {
				switch comps[len(comps)-1] {
				case "config", "config.worktree", "commondir":
					return "git configuration: git runs commands named in it"
				}
			}
		}
		if c == ".git" && i == len(comps)-1 {
			// Reached only for a path that is exactly a .git entry; whether
			// it is a file (a gitdir pointer) is the caller's to tell.
			continue
		}
		for _, e := range BuiltinProtected {
			if strings.HasPrefix(e.Name, ".git/") {
				continue // handled above, at any depth
			}
			en := strings.Split(strings.ToLower(e.Name), "/")
			if i+len(en) <= len(comps) && equalStrings(comps[i:i+len(en)], en) {
				return "protected: " + e.Why
			}
		}
	}
	return ""
}

// GitdirPointer reports whether name (one path component) is a .git entry,
// which must never be written back as a file: a .git file redirects the
// repository to another folder, possibly with planted hooks.
func GitdirPointer(name string) bool { return strings.EqualFold(name, ".git") }

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
