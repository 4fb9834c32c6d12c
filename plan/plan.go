// Package plan compiles a validated policy plus a run request into the
// complete, printable description of a sandbox: its namespaces and id
// mapping, the root filesystem (system base, grants, scratch, with each
// bind's device and recursion flags), the masked and read-only /proc
// paths, the Landlock rights, the capabilities and no_new_privs, the
// seccomp profile as data (syscalls*.go), the rlimits, the limits the
// runtime enforces (cgroup memory, pids and CPU, deadline, output, ops,
// writes, scratch), the egress ports, the environment and the tools.
//
// Every consumer reads it and derives nothing: nsinit applies it, the
// supervisor clones and limits by it, export/oci and export/k8s translate
// it, doctor probes with its namespaces, and `airlock explain` prints it,
// so what an operator reads is what the kernel gets, in either backend.
//
// It imports only policy/... and the standard library: facts about the host
// filesystem (symlinks, where a tool lives) come in through the Host
// interface, so Compile is pure and testable. A Plan is plain data and
// survives JSON, which is how nsinit receives it.
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

// Kind says what a Mount step creates.
type Kind string

// Mount kinds, in the order nsinit usually meets them.
const (
	KindBind    Kind = "bind"    // bind Source (a host path) at Target
	KindTmpfs   Kind = "tmpfs"   // a size-capped tmpfs at Target
	KindProc    Kind = "proc"    // a fresh procfs for the sandbox's pid namespace
	KindFile    Kind = "file"    // a file written with Data
	KindSymlink Kind = "symlink" // a symlink Target -> Source
	KindDir     Kind = "dir"     // an empty directory
	// Writable grants and what narrows them (see stage.go).
	KindStage      Kind = "stage"       // the tmpfs of max_write bytes that holds staged writes
	KindOverlay    Kind = "overlay"     // an fs_write folder: an overlay of Source with its upper layer on the stage
	KindStagedFile Kind = "staged-file" // an fs_write file: a copy on the stage bound at Target
	KindReadonly   Kind = "readonly"    // a protected path inside a writable grant: read-only, cannot be created
	KindHide       Kind = "hide"        // an fs_deny path: an empty read-only folder or file over it
)

// Origin says why a step exists, for explain and audit.
type Origin string

// Origins.
const (
	OriginBase    Origin = "system base"
	OriginFSRead  Origin = "fs_read"
	OriginFSWrite Origin = "fs_write"
	OriginTool    Origin = "allowed_tools"
	OriginCommand Origin = "command"
	OriginSandbox Origin = "sandbox"
)

// Mount is one step of building the root filesystem.
type Mount struct {
	Kind     Kind   `json:"kind"`
	Source   string `json:"source,omitempty"` // host path for binds, link text for symlinks
	Target   string `json:"target"`           // path inside the sandbox
	Writable bool   `json:"writable,omitempty"`
	Exec     bool   `json:"exec,omitempty"`  // false = noexec
	Size     int64  `json:"size,omitempty"`  // tmpfs size in bytes
	Data     string `json:"data,omitempty"`  // content of a KindFile
	IDMap    bool   `json:"idmap,omitempty"` // a grant: files keep the caller's ownership on disk
	Origin   Origin `json:"origin"`
	Optional bool   `json:"optional,omitempty"` // base entries that may be absent on this host
	// Stage is the staged grant's index: its layers live in folder Stage of
	// the stage tmpfs (KindOverlay, KindStagedFile).
	Stage int `json:"stage,omitempty"`
	// Dir says a KindReadonly or KindHide target is a folder.
	Dir bool   `json:"dir,omitempty"`
	Why string `json:"why,omitempty"` // what the narrowing protects against
	// Devices keeps device nodes usable on a bind (no nodev): the device
	// binds under /dev, nothing else.
	Devices bool `json:"devices,omitempty"`
	// File says a bind's source is a file or a device, not a folder:
	// nothing can be mounted below it. Unknown (false) for a source that
	// was absent when the plan was compiled.
	File bool `json:"file,omitempty"`
	// Recursive brings the mounts below Source along (open_tree
	// AT_RECURSIVE, an OCI rbind), each with the same flags. Compile sets
	// it on every step that binds a host path: a grant shows what is on
	// the host at that path, and a mount below it can neither be writable
	// nor keep suid or device nodes.
	Recursive bool `json:"recursive,omitempty"`
}

// MountFlags are the mount attributes a bind step gets.
type MountFlags struct {
	ReadOnly, NoSuid, NoDev, NoExec bool
	// Recursive applies them to the mounts below the target too.
	Recursive bool
}

// Flags returns the attributes of a bind step (KindBind, KindOverlay,
// KindStagedFile, KindReadonly) as the sandbox sees it: read-only unless
// Writable, always nosuid, nodev unless Devices, noexec unless Exec. nsinit
// (internal/enforce/mount), export/oci and explain all read them here.
func (m Mount) Flags() MountFlags {
	return MountFlags{ReadOnly: !m.Writable, NoSuid: true, NoDev: !m.Devices, NoExec: !m.Exec, Recursive: m.Recursive}
}

// Access bits for Landlock rules.
type Access uint8

// Landlock rights per path.
const (
	Read Access = 1 << iota
	Write
	Execute
)

func (a Access) String() string {
	var s []string
	if a&Read != 0 {
		s = append(s, "read")
	}
	if a&Write != 0 {
		s = append(s, "write")
	}
	if a&Execute != 0 {
		s = append(s, "execute")
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, "+")
}

// Rule is one Landlock path rule, as the sandbox sees the path.
type Rule struct {
	Path   string `json:"path"`
	Access Access `json:"access"`
	Origin Origin `json:"origin"`
}

// Ports of the egress proxy inside the sandbox's network namespace.
const (
	HTTPProxyPort  = 3128
	SOCKSProxyPort = 1080
)

// Plan is everything nsinit needs, in order. It is plain data (JSON).
type Plan struct {
	// Namespaces are the new namespaces the sandbox's init is cloned into
	// (DefaultNamespaces).
	Namespaces []Namespace `json:"namespaces"`
	// IDMap is who root inside is on the host (DefaultIDMap).
	IDMap IDMap `json:"id_map"`

	Argv     []string `json:"argv"` // argv[0] is the absolute path inside the sandbox
	Env      []string `json:"env"`
	Cwd      string   `json:"cwd"`
	Hostname string   `json:"hostname"`
	Mounts   []Mount  `json:"mounts"`
	Rules    []Rule   `json:"landlock_rules"`
	// Proxy says whether egress listeners are created (net_hosts not empty).
	Proxy bool `json:"proxy"`
	// Transparent says whether connect(2) goes to the supervisor and
	// airlock's DNS answers inside (withTransparentEgress): on with Proxy
	// for the namespace backend, off for the others.
	Transparent bool `json:"transparent,omitempty"`
	// NetHosts are the net_hosts entries the proxy admits (for explain).
	NetHosts []string `json:"net_hosts,omitempty"`
	// Credentials are the policy's credentials, HOST:HEADER=ENV, for
	// explain: the proxy adds them; their values never reach the plan.
	Credentials []string `json:"credentials,omitempty"`
	// Rootfs is the environment (the policy's rootfs): the folder whose
	// system base and tools are bound in place of the host's; "" for the
	// host's own. For an image it is where the image was unpacked, and
	// RootfsImage is the image (the policy's rootfs) with its digest,
	// IMAGE@sha256:....
	Rootfs      string `json:"rootfs,omitempty"`
	RootfsImage string `json:"rootfs_image,omitempty"`
	// RequireLandlock is false only when the policy accepts the downgrade.
	RequireLandlock bool `json:"require_landlock"`
	// ProcFallback lets the init bind the /proc it sees (a container's)
	// read-only, recursively, when the kernel refuses a fresh procfs for
	// the sandbox's pid namespace (policy allow_downgrade: proc). The
	// container's other processes are then listed inside; Landlock is
	// required in that case, since its ptrace rule is what keeps their
	// memory, environment and fds from the sandbox.
	ProcFallback bool `json:"proc_fallback,omitempty"`
	// NoNamespaces is the backend without namespaces (WithoutNamespaces):
	// nothing is mounted, Landlock confines the host's filesystem, and
	// connect(2) is answered by the supervisor.
	NoNamespaces bool `json:"no_namespaces,omitempty"`
	// Scratch is the folder that stands in for /tmp without namespaces.
	Scratch string `json:"scratch,omitempty"`
	// Rlimits applied before execve.
	Rlimits []Rlimit `json:"rlimits"`
	// Tools are the executables visible in the sandbox (inside paths).
	Tools []string `json:"tools"`
	// Protected are the real paths inside writable grants that the copy
	// back refuses beyond the policy's own rules (symlink targets of
	// protected and fs_deny paths).
	Protected []string `json:"protected,omitempty"`
	// Session makes the init wait for exec requests instead of running Argv.
	Session bool `json:"session,omitempty"`
	// PTY makes the command's stdin (a pty slave) its controlling terminal.
	PTY bool `json:"pty,omitempty"`
	// Limits is the budget the runtime enforces: cgroup memory, pids and
	// CPU, and the deadline, output, ops, write and scratch bounds.
	Limits Limits `json:"limits"`
	// MaskedPaths are hidden inside (an empty read-only file or folder
	// over them) and ReadonlyPaths made read-only, after the root is built
	// (DefaultMaskedPaths, DefaultReadonlyPaths). A path the root does not
	// have is skipped.
	MaskedPaths   []string `json:"masked_paths"`
	ReadonlyPaths []string `json:"readonly_paths"`
	// Capabilities the command keeps: none. nsinit empties every set and
	// refuses a plan that lists any.
	Capabilities []string `json:"capabilities"`
	// NoNewPrivileges sets no_new_privs: execve never grants privileges
	// (setuid, file capabilities). Always true; seccomp needs it.
	NoNewPrivileges bool `json:"no_new_privileges"`
	// Seccomp is the syscall filter nsinit installs last, right before
	// execve (DefaultSeccomp).
	Seccomp Seccomp `json:"seccomp"`
}

// Rlimit is one resource limit; Resource is the name from getrlimit(2).
type Rlimit struct {
	Resource string `json:"resource"`
	Value    uint64 `json:"value"` // the soft limit
	// Hard is the hard limit, at least Value: RLIMIT_CPU's is a second
	// above, so the kernel sends SIGXCPU at the soft limit and SIGKILL a
	// second later.
	Hard uint64 `json:"hard"`
	Why  string `json:"why"`
}

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
// exec: PATH, the proxy variables and the dynamic loader's variables.
func (pl *Plan) ExecEnv(extra []string) ([]string, error) {
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
