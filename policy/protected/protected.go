// Package protected lists the paths that stay read-only, and cannot be
// created, at the top of every fs_write grant. Code that can write a folder
// can plant code that the host runs later, outside any sandbox: a git hook
// runs at the next checkout, a core.fsmonitor line in .git/config at the
// next `git status`, an .envrc when direnv enters the folder, a shell rc
// file at the next login, an editor's or agent's configuration when the
// project is next opened. These paths therefore stay read-only inside every
// fs_write grant, unless the policy's fs_unprotect names them. The list
// follows srt's mandatory deny paths and adds what those files' owners
// execute.
//
// The list lives here, below package policy, so that the plan's data
// (plan/spec), whose explanation names it, does not link the policy parser:
// the sandbox's init decodes a plan on every start. It imports nothing.
package protected

// Entry is one entry of the built-in protected list, as a path relative to
// an fs_write grant. policy.ProtectedEntry is this type.
type Entry struct {
	Name string // relative path, e.g. ".git/hooks"
	Dir  bool   // whether it is a directory (the placeholder's type when absent)
	Why  string // what runs it
}

// Builtin lists the paths that stay read-only at the top of every fs_write
// grant. Entries under .git/ apply only where .git exists.
var Builtin = []Entry{
	{".git/hooks", true, "git runs hooks at checkout, commit, merge and push"},
	{".git/config", false, "git runs core.fsmonitor, core.hooksPath, filter and alias commands from it"},
	{".gitmodules", false, "git clones submodule URLs from it"},
	{".gitconfig", false, "git's configuration when this folder is a home directory"},
	{".hg/hgrc", false, "Mercurial runs hooks and the pager named in it at every command"},
	{".hg/sharedpath", false, "Mercurial reads the configuration of the repository it names"},
	{".jj/repo/config.toml", false, "Jujutsu runs the pager, editor and diff tools named in it"},
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
	{".pnpmfile.cjs", false, "pnpm runs its hooks at every install"},
	{"mise.toml", false, "mise runs the hooks and env scripts in it when a shell enters the folder"},
	{".mise.toml", false, "mise runs the hooks and env scripts in it when a shell enters the folder"},
	{".mise", true, "mise's configuration: hooks and env scripts"},
	{".Rprofile", false, "R runs it at every start in the folder"},
	{".pdbrc", false, "Python's debugger runs it at every start in the folder"},
	{".cargo/config", false, "cargo runs rustc-wrapper, linker and runner from it"},
	{".cargo/config.toml", false, "cargo runs rustc-wrapper, linker and runner from it"},
	{".pre-commit-config.yaml", false, "pre-commit installs and runs the hooks it names"},
	{".husky", true, "husky's git hooks"},
	{".devcontainer", true, "editors run its postCreateCommand"},
	{".vscode", true, "tasks, launch settings and extensions recommendations that editors run"},
	{".zed", true, "Zed's settings and tasks, which name the language servers and commands it runs"},
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
