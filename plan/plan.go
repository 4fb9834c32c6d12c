// Package plan compiles a validated policy plus a run request into the
// complete, printable description of a sandbox: its namespaces and id
// mapping, the root filesystem (system base, grants, scratch, with each
// bind's device and recursion flags), the masked and read-only /proc
// paths, the Landlock rights, the capabilities and no_new_privs, the
// seccomp profile as data (syscalls_default.go), the rlimits, the limits
// the runtime enforces (cgroup memory, pids and CPU, deadline, output,
// ops, writes, scratch), the egress ports, the environment and the tools.
//
// Every consumer reads it and derives nothing: nsinit applies it, the
// supervisor clones and limits by it, export/oci and export/k8s translate
// it, doctor probes with its namespaces, and `airlock explain` prints it,
// so what an operator reads is what the kernel gets, in either backend.
//
// It imports only policy/..., the plan's data types (plan/spec) and the
// standard library: facts about the host filesystem (symlinks, where a tool
// lives) come in through the Host interface, so Compile is pure and
// testable. A Plan is plain data and survives JSON, which is how people and
// tools read it; nsinit receives its binary form. The types are defined in
// plan/spec, which the sandbox's init imports without this package and so
// without the policy parser; every one of them keeps its name here
// (spec.go).
package plan

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/pathspec"
)

// Host answers the questions Compile must ask about the host filesystem.
// The sandbox package implements it with lstat and readlink. For a policy
// with a rootfs, LookTool and Loader answer inside that root filesystem
// (symlinks resolved within it) and Lstat answers host paths, the rootfs's
// own included: Compile asks about ROOTFS/usr/lib for the system base.
type Host interface {
	// Lstat reports whether path exists, whether it is a directory, and the
	// link text when it is a symlink.
	Lstat(path string) (exists, dir bool, link string, err error)
	// LookTool finds an executable: name is a bare tool name (searched on
	// SandboxPath) or an absolute path. It returns where it appears in the
	// sandbox (symlinked directories resolved) and the real host file to bind.
	LookTool(name string) (inside, real string, err error)
	// Loader returns the dynamic loaders (real host paths) that ELF tools need.
	Loader() []string
	// Env returns the caller's value of an environment variable.
	Env(name string) (string, bool)
}

// SandboxPath is PATH inside the sandbox, and where bare tool names are
// looked up on the host.
const SandboxPath = "/usr/local/bin:/usr/bin:/bin"

// Request is one run: the command and what the caller of airlock run adds.
type Request struct {
	Argv []string // the command; Argv[0] is a bare name or an absolute path
	Cwd  string   // working directory inside the sandbox; "" = first fs_write grant, else /tmp
	// CommandIsGranted makes the command executable even when it is not in
	// allowed_tools (the CLI: the operator named it). Sessions leave it false.
	CommandIsGranted bool
	// Session compiles a long-lived sandbox with no command: each exec
	// names an allowed tool. Argv must be empty.
	Session bool
	// Rootfs is the folder the environment is bound from when the
	// policy's rootfs is an image: where it was unpacked, with
	// RootfsDigest its digest. Empty means the policy's rootfs as it is.
	Rootfs, RootfsDigest string
	// Target is the backend the plan is for and what the run adds to it;
	// the zero Target is the namespaces backend's plan without a trust
	// bundle.
	Target Target
}

// ErrBadRequest wraps problems with the request (not the policy).
var ErrBadRequest = errors.New("plan: bad request")

// Compile turns a policy and a request into a plan. It fails when a tool
// cannot be found or the working directory is outside the grants.
func Compile(p *policy.Policy, req Request, h Host) (*Plan, error) {
	if req.Session && (len(req.Argv) > 0 || req.CommandIsGranted) {
		return nil, fmt.Errorf("%w: a session has no command; each exec names an allowed tool", ErrBadRequest)
	}
	if !req.Session && (len(req.Argv) == 0 || req.Argv[0] == "") {
		return nil, fmt.Errorf("%w: no command given: put it after --", ErrBadRequest)
	}
	pl := &Plan{Hostname: "airlock", RequireLandlock: !p.AcceptsDowngrade(policy.DowngradeLandlock), ProcFallback: p.AcceptsDowngrade(policy.DowngradeProc), Session: req.Session,
		Namespaces: DefaultNamespaces(), IDMap: DefaultIDMap(), MaskedPaths: DefaultMaskedPaths(), ReadonlyPaths: DefaultReadonlyPaths(),
		Capabilities: []string{}, NoNewPrivileges: true, Seccomp: DefaultSeccomp(), Limits: limitsOf(p)}
	lim := p.Budget()

	pl.Rootfs = p.Rootfs()
	if req.Rootfs != "" {
		if pl.Rootfs == "" {
			return nil, fmt.Errorf("%w: an unpacked environment for a policy without rootfs", ErrBadRequest)
		}
		pl.Rootfs, pl.RootfsImage = req.Rootfs, p.Rootfs()+"@"+req.RootfsDigest
	}
	base, err := systemBase(h, pl.Rootfs)
	if err != nil {
		return nil, err
	}
	pl.Mounts = append(pl.Mounts, base...)
	pl.Mounts = append(pl.Mounts,
		Mount{Kind: KindProc, Target: "/proc", Origin: OriginSandbox},
		Mount{Kind: KindTmpfs, Target: "/tmp", Writable: true, Size: lim.Scratch, Origin: OriginSandbox},
	)
	pl.Mounts = append(pl.Mounts, synthesized()...)

	// Tools: the command first, then allowed_tools.
	names := p.AllowedTools()
	seen := map[string]bool{}
	var toolMounts []Mount
	addTool := func(name string, origin Origin) (string, error) {
		inside, real, err := h.LookTool(name)
		if err != nil {
			return "", err
		}
		if inside != real && slices.ContainsFunc(base, func(m Mount) bool {
			return m.Kind == KindBind && !m.File && pathspec.Within(m.Target, inside)
		}) {
			// A symlink inside a folder the base binds whole (git's
			// /usr/lib/git-core/git-remote-https -> git-remote-http): the
			// link is already there and cannot be a mountpoint; the file
			// it leads to is the tool.
			inside = real
		}
		if !seen[inside] {
			seen[inside] = true
			pl.Tools = append(pl.Tools, inside)
			toolMounts = append(toolMounts, Mount{Kind: KindBind, Source: real, Target: inside, Exec: true, File: true, Origin: origin})
			pl.Rules = append(pl.Rules, Rule{Path: inside, Access: Read | Execute, Origin: origin})
		}
		return inside, nil
	}
	var cmdPath string
	if !req.Session {
		if !req.CommandIsGranted && !p.AllowsTool(req.Argv[0]) {
			return nil, &policy.DenyError{Cap: policy.AllowedTools, Op: "exec", Subject: req.Argv[0], Reason: req.Argv[0] + " is not in allowed_tools"}
		}
		origin := OriginTool
		if req.CommandIsGranted && !p.AllowsTool(req.Argv[0]) {
			origin = OriginCommand
		}
		var err error
		if cmdPath, err = addTool(req.Argv[0], origin); err != nil {
			return nil, fmt.Errorf("command %q: %w", req.Argv[0], err)
		}
	}
	for _, n := range names {
		if _, err := addTool(n, OriginTool); err != nil {
			return nil, fmt.Errorf("allowed_tools %q: %w", n, err)
		}
	}
	for _, ld := range h.Loader() {
		pl.Rules = append(pl.Rules, Rule{Path: ld, Access: Read | Execute, Origin: OriginBase})
	}

	// Grants: parents before children so nested grants stack correctly.
	var grants []Mount
	for _, r := range p.FSRead() {
		// Only to know whether the grant is a file; the bind itself
		// refuses what is wrong with the path when the sandbox starts.
		exists, dir, link, err := h.Lstat(r)
		file := err == nil && exists && !dir && link == ""
		grants = append(grants, Mount{Kind: KindBind, Source: r, Target: r, IDMap: true, File: file, Origin: OriginFSRead})
		pl.Rules = append(pl.Rules, Rule{Path: r, Access: Read, Origin: OriginFSRead})
	}
	stage, staged, err := stageSteps(p, h)
	if err != nil {
		return nil, err
	}
	for _, w := range p.FSWrite() {
		pl.Rules = append(pl.Rules, Rule{Path: w, Access: Read | Write, Origin: OriginFSWrite})
	}
	grants = append(grants, staged...)
	grants = append(grants, toolMounts...)
	sort.SliceStable(grants, func(i, j int) bool { return depth(grants[i].Target) < depth(grants[j].Target) })
	if len(staged) > 0 {
		pl.Mounts = append(pl.Mounts, stage)
	}
	pl.Mounts = append(pl.Mounts, grants...)
	narrow, protected, err := narrowSteps(p, h)
	if err != nil {
		return nil, err
	}
	pl.Mounts = append(pl.Mounts, narrow...)
	pl.Protected = protected

	// Landlock rules for the base and sandbox-owned paths.
	for _, m := range base {
		if m.Kind == KindBind {
			pl.Rules = append(pl.Rules, Rule{Path: m.Target, Access: Read, Origin: OriginBase})
		}
	}
	pl.Rules = append(pl.Rules,
		Rule{Path: "/etc", Access: Read, Origin: OriginSandbox},
		Rule{Path: "/proc", Access: Read, Origin: OriginSandbox},
		Rule{Path: "/tmp", Access: Read | Write, Origin: OriginSandbox},
		Rule{Path: "/dev", Access: Read, Origin: OriginSandbox},
	)
	for _, d := range devices {
		pl.Rules = append(pl.Rules, Rule{Path: d, Access: Read | Write, Origin: OriginSandbox})
	}

	cwd, err := Workdir(p, req.Cwd)
	if err != nil {
		return nil, err
	}
	if req.Cwd == "" {
		if exists, dir, _, err := h.Lstat(cwd); err == nil && exists && !dir {
			cwd = "/tmp" // the first fs_write grant is a file: a command cannot start in it
		}
	}
	pl.Cwd = cwd
	if !req.Session {
		pl.Argv = append([]string{cmdPath}, req.Argv[1:]...)
	}
	pl.Env = environment(p, h)
	for _, h := range p.NetHosts() {
		pl.NetHosts = append(pl.NetHosts, h.String())
	}
	for _, c := range p.Credentials() {
		pl.Credentials = append(pl.Credentials, c.String())
	}
	if len(pl.NetHosts) > 0 {
		pl.Proxy = true
		extra := ""
		env := pl.Env[:0]
		for _, e := range pl.Env {
			if v, ok := strings.CutPrefix(e, "NO_PROXY="); ok {
				extra = v // the policy's extension (policy validation allows only NO_PROXY=list)
				continue
			}
			env = append(env, e)
		}
		pl.Env = append(env, proxyEnv(extra)...)
		withTransparentEgress(pl)
	}
	fsize := uint64(max(lim.Scratch, 1<<30))
	cpu := uint64((lim.CPU + 999_999_999) / 1_000_000_000)
	pl.Rlimits = []Rlimit{
		{Resource: "core", Value: 0, Hard: 0, Why: "no core dumps of sandboxed memory"},
		{Resource: "nofile", Value: 1024, Hard: 1024, Why: "bounded file descriptors"},
		{Resource: "fsize", Value: fsize, Hard: fsize, Why: "no single file larger than the scratch or 1 GiB"},
		{Resource: "cpu", Value: cpu, Hard: cpu + 1, Why: "max_cpu, per process (the cgroup counts the whole tree); SIGXCPU, then SIGKILL a second later"},
	}
	for i := range pl.Mounts {
		// Every step that binds a host path brings the mounts below it.
		pl.Mounts[i].Recursive = pl.Mounts[i].Cloned()
	}
	if err := forTarget(pl, p, req.Target); err != nil {
		return nil, err
	}
	return pl, nil
}

func depth(p string) int { return strings.Count(pathspec.Clean(p), "/") }

// Workdir returns the folder inside the sandbox a command under p starts
// in: dir, cleaned, when p lets the command read it or it is below /tmp;
// for "" the first fs_write grant, else /tmp. A relative dir is taken
// from /. Every run and every session exec decides its folder here.
func Workdir(p *policy.Policy, dir string) (string, error) {
	if dir == "" {
		if w := p.FSWrite(); len(w) > 0 {
			return w[0], nil
		}
		return "/tmp", nil
	}
	c, err := pathspec.Abs("/", dir)
	if err != nil {
		return "", fmt.Errorf("%w: working directory %q: %v", ErrBadRequest, dir, err)
	}
	if c == "/tmp" || pathspec.Within("/tmp", c) || p.CanRead(c) {
		return c, nil
	}
	return "", fmt.Errorf("%w: working directory %q is outside fs_read, fs_write and /tmp: grant it or pick a directory inside a grant", ErrBadRequest, dir)
}

// ExecEnv returns the plan's environment with a session exec's additions
// (NAME=value) on top. What airlock sets itself cannot be changed per
// exec: PATH, the proxy variables and the dynamic loader's variables. (It
// is a function, not a method of Plan, because it asks package policy
// which names are proxy variables, and Plan is defined in plan/spec,
// which does not link the policy parser.)
func ExecEnv(pl *Plan, extra []string) ([]string, error) {
	env := slices.Clone(pl.Env)
	for _, kv := range extra {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.ContainsRune(kv, 0) {
			return nil, fmt.Errorf("%w: exec env %q: want NAME=value", ErrBadRequest, kv)
		}
		if u := strings.ToUpper(k); u == "PATH" || strings.HasPrefix(u, "LD_") || policy.IsProxyVar(k) {
			return nil, fmt.Errorf("%w: exec env %q: %s is set by airlock and cannot be changed per exec", ErrBadRequest, kv, k)
		}
		env = slices.DeleteFunc(env, func(e string) bool { return strings.HasPrefix(e, k+"=") })
		env = append(env, kv)
	}
	return env, nil
}

func environment(p *policy.Policy, h Host) []string {
	env := []string{"PATH=" + SandboxPath, "HOME=/tmp", "LANG=C.UTF-8", "TMPDIR=/tmp", "USER=sandbox"}
	set := func(k, v string) {
		for i, e := range env {
			if strings.HasPrefix(e, k+"=") {
				env[i] = k + "=" + v
				return
			}
		}
		env = append(env, k+"="+v)
	}
	for _, e := range p.Env() {
		if e.HasValue {
			set(e.Name, e.Value)
		} else if v, ok := h.Env(e.Name); ok {
			set(e.Name, v)
		}
	}
	return env
}

// DefaultNoProxy is what clients inside reach without the proxy: the
// sandbox's own loopback, where its own servers listen (a policy's env
// NO_PROXY=... extends it).
const DefaultNoProxy = "localhost,127.0.0.1,::1"

func proxyEnv(extra string) []string {
	httpURL := fmt.Sprintf("http://127.0.0.1:%d", HTTPProxyPort)
	socksURL := fmt.Sprintf("socks5h://127.0.0.1:%d", SOCKSProxyPort)
	noProxy := DefaultNoProxy
	if extra != "" {
		noProxy += "," + extra
	}
	return []string{
		"HTTP_PROXY=" + httpURL, "http_proxy=" + httpURL,
		"HTTPS_PROXY=" + httpURL, "https_proxy=" + httpURL,
		"ALL_PROXY=" + socksURL, "all_proxy=" + socksURL,
		"NO_PROXY=" + noProxy, "no_proxy=" + noProxy,
	}
}
