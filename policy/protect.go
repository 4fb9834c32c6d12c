package policy

import (
	"strings"

	"github.com/airlock-sandbox/airlock/policy/pathspec"
)

// Protected paths. Code that can write a folder can plant code that the host
// runs later, outside any sandbox: a git hook runs at the next checkout, a
// core.fsmonitor line in .git/config at the next `git status`, an .envrc
// when direnv enters the folder, a shell rc file at the next login, an
// editor's or agent's configuration when the project is next opened. These
// paths therefore stay read-only, and cannot be created, inside every
// fs_write grant, unless fs_unprotect names them. The list follows srt's
// mandatory deny paths and adds what those files' owners execute.

// ProtectedEntry is one entry of the built-in protected list, as a path
// relative to an fs_write grant.
type ProtectedEntry struct {
	Name string // relative path, e.g. ".git/hooks"
	Dir  bool   // whether it is a directory (the placeholder's type when absent)
	Why  string // what runs it
}

// BuiltinProtected lists the paths that stay read-only at the top of every
// fs_write grant. Entries under .git/ apply only where .git exists.
var BuiltinProtected = []ProtectedEntry{
	{".git/hooks", true, "git runs hooks at checkout, commit, merge and push"},
	{".git/config", false, "git runs core.fsmonitor, core.hooksPath, filter and alias commands from it"},
	{".gitmodules", false, "git clones submodule URLs from it"},
	{".gitconfig", false, "git's configuration when this folder is a home directory"},
	{".envrc", false, "direnv runs it when a shell enters the folder"},
	{".bashrc", false, "bash runs it at every interactive start"},
	{".bash_profile", false, "bash runs it at login"},
	{".bash_login", false, "bash runs it at login"},
	{".bash_logout", false, "bash runs it at logout"},
	{".profile", false, "login shells run it"},
	{".zshrc", false, "zsh runs it at every interactive start"},
	{".zshenv", false, "zsh runs it at every start"},
	{".zprofile", false, "zsh runs it at login"},
	{".zlogin", false, "zsh runs it at login"},
	{".config", true, "autostart entries, systemd user units, fish, git and tool configuration that run code"},
	{".ssh", true, "authorized_keys admits logins; config runs ProxyCommand"},
	{".local/bin", true, "often first on PATH: a planted file shadows a command"},
	{".aws", true, "credential_process runs a command"},
	{".kube", true, "exec credential plugins run commands"},
	{".docker", true, "credential helpers run commands"},
	{".npmrc", false, "npm runs script-shell and node-options from it"},
	{".yarnrc", false, "yarn runs yarn-path from it"},
	{".yarnrc.yml", false, "yarn runs yarnPath from it"},
	{".cargo/config", false, "cargo runs rustc-wrapper, linker and runner from it"},
	{".cargo/config.toml", false, "cargo runs rustc-wrapper, linker and runner from it"},
	{".pre-commit-config.yaml", false, "pre-commit installs and runs the hooks it names"},
	{".husky", true, "husky's git hooks"},
	{".devcontainer", true, "editors run its postCreateCommand"},
	{".vscode", true, "tasks, launch settings and extensions recommendations that editors run"},
	{".idea", true, "run configurations and settings of JetBrains IDEs"},
	{".exrc", false, "vim runs it when exrc is set"},
	{".nvimrc", false, "neovim runs it when exrc is set"},
	{".nvim.lua", false, "neovim runs it when exrc is set"},
	{".mcp.json", false, "agents start the MCP servers it lists"},
	{".claude", true, "Claude Code settings, hooks, commands and agents"},
	{".cursor", true, "Cursor rules, settings and MCP servers"},
	{".codex", true, "Codex configuration"},
	{".gemini", true, "Gemini CLI settings and MCP servers"},
	{"CLAUDE.md", false, "instructions every later agent session reads"},
	{"AGENTS.md", false, "instructions every later agent session reads"},
	{".github/workflows", true, "CI runs them with the repository's secrets"},
}

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
