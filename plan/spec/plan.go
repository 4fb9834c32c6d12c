package spec

import "strings"

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
	// Writable grants and what narrows them (see plan/stage.go).
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
	// Recursive brings the mounts below Source along (open_tree AT_RECURSIVE,
	// an OCI rbind), each with the same flags. plan.Compile sets it on every
	// step that binds a host path: a grant shows what is on the host at that
	// path, and a mount below it can neither be writable nor keep suid or
	// device nodes.
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

// Inodes is the inode cap of a KindTmpfs step: one per 4 KiB of its Size,
// at least 1024. Empty files cost a tmpfs no bytes, so without it only the
// inodes' kernel memory (about 1 KiB each, which the memory controller need
// not count) would bound how many the sandbox creates. nsinit
// (internal/enforce/mount) and export/oci both mount with it.
func (m Mount) Inodes() int64 { return max(m.Size/4096, 1024) }

// Cloned reports whether the step needs a clone of its host Source: binds,
// and staged grants, whose clone is the read-only lower layer.
func (m Mount) Cloned() bool {
	return m.Kind == KindBind || m.Kind == KindOverlay || m.Kind == KindStagedFile
}

// Grant reports whether the step places an fs_read or fs_write grant, whose
// root the supervisor's file API holds open.
func (m Mount) Grant() bool {
	return m.Cloned() && (m.Origin == OriginFSRead || m.Origin == OriginFSWrite)
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

// Ports of airlock's own listeners for transparent egress inside the
// sandbox's network namespace, next to the proxy's.
const (
	// TunnelPort is where the connect broker connects the sandbox's own
	// socket for a granted destination; the proxy carries it there. A
	// connection to it that the broker did not make is closed.
	TunnelPort = 3127
	// DNSPort is airlock's DNS server on 127.0.0.1 (UDP).
	DNSPort = 53
)

// CABundlePath is where the sandbox finds the roots it trusts when the
// proxy terminates TLS to add credentials: the host's bundle and airlock's
// per-run CA.
const CABundlePath = "/etc/airlock/ca-certificates.pem"

// NoNamespacesMinLandlock is the lowest Landlock ABI the backend without
// namespaces runs on: ABI 4 restricts TCP bind and connect, and ABI 6
// scopes signals and abstract unix sockets to the sandbox, which is what
// keeps the caller's other processes (same uid, no pid namespace) out of
// reach. Below it the backend refuses to start.
const NoNamespacesMinLandlock = 6

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
	// Transparent says whether connect(2) goes to the supervisor and airlock's
	// DNS answers inside (plan.Compile, plan.WithoutTransparentEgress): on
	// with Proxy for the namespace backend, off for the others.
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
	// NoNamespaces is the backend without namespaces (plan.BackendLandlock):
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
	// MaskedPaths are hidden inside (an empty read-only file or folder over
	// them) and ReadonlyPaths made read-only, after the root is built
	// (plan.DefaultMaskedPaths, plan.DefaultReadonlyPaths). A path the root
	// does not have is skipped.
	MaskedPaths   []string `json:"masked_paths"`
	ReadonlyPaths []string `json:"readonly_paths"`
	// Capabilities the command keeps: none. nsinit empties every set and
	// refuses a plan that lists any.
	Capabilities []string `json:"capabilities"`
	// NoNewPrivileges sets no_new_privs: execve never grants privileges
	// (setuid, file capabilities). Always true; seccomp needs it.
	NoNewPrivileges bool `json:"no_new_privileges"`
	// Seccomp is the syscall filter nsinit installs last, right before
	// execve (plan.DefaultSeccomp).
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
