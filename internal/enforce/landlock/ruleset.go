package landlock

import (
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
)

// ErrABI reports that Landlock is unavailable or that the kernel's Landlock
// ABI is lower than Config.MinABI. It matches errors.ErrUnsupported too.
var ErrABI error = abiError("landlock ABI not supported")

type abiError string

func (e abiError) Error() string { return string(e) }

func (e abiError) Is(target error) bool { return target == errors.ErrUnsupported }

// PathRule grants rights beneath one path.
type PathRule struct {
	// Path is absolute and clean, as the sandbox sees it after pivot_root.
	// It must exist when Restrict runs; symlinks in it are followed then.
	// The empty Path is refused.
	Path string

	// Access is exactly what the path gets; on a non-directory only file
	// rights apply (see the package doc). The zero Access is refused.
	Access Access
}

// Config describes one Landlock domain. The zero Config denies the whole
// filesystem and every TCP connect, leaves TCP bind, signals and abstract
// unix sockets unrestricted, accepts any ABI from 1 up, and restricts every
// thread of the process.
type Config struct {
	// Paths lists the only paths the sandbox may use, each with exactly
	// the rights it gets beneath it. Nil denies every path.
	Paths []PathRule

	// ConnectTCP lists the only TCP ports connect(2) may reach: the egress
	// proxy's (ABI 4). Nil means no TCP connect at all. Port 0 is refused.
	ConnectTCP []uint16

	// AnyConnect leaves TCP connect(2) unrestricted by Landlock (ConnectTCP
	// must then be nil). For a sandbox whose network namespace holds only
	// lo, a port allow-list adds nothing: every connect can only reach the
	// sandbox's own loopback, where its own servers and the egress proxy
	// listen. False restricts connect to ConnectTCP.
	AnyConnect bool

	// RestrictBind makes TCP bind(2) subject to BindTCP (ABI 4). False
	// leaves bind unrestricted.
	RestrictBind bool

	// BindTCP lists the TCP ports bind(2) may use when RestrictBind is
	// set; 0 allows a port chosen by the kernel. Nil means no bind at all.
	// It must be nil when RestrictBind is false.
	BindTCP []uint16

	// ScopeSignals forbids signals to processes outside the sandbox's
	// domain (LANDLOCK_SCOPE_SIGNAL, ABI 6). False leaves them to the
	// pid namespace.
	ScopeSignals bool

	// ScopeAbstractUnix forbids connecting to abstract unix sockets
	// created outside the sandbox's domain
	// (LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET, ABI 6). False leaves them to
	// the network namespace.
	ScopeAbstractUnix bool

	// LogNewExec asks the kernel to audit denials after the next execve(2)
	// too (LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON, ABI 7), which is what
	// reporting the command's filesystem denials needs. False keeps the
	// kernel default: only denials before execve are logged.
	LogNewExec bool

	// MinABI is the lowest kernel ABI accepted; below it Compile and
	// Restrict fail with ErrABI and nothing is restricted. Zero accepts
	// any ABI from 1 up (Landlock itself is always required).
	MinABI int

	// ThreadOnly restricts only the calling OS thread, which Restrict then
	// locks to the calling goroutine for good. Binaries that link cgo
	// (including -race builds) need it, because syscall.AllThreadsSyscall
	// is unsupported there. It is safe only when the caller's next step is
	// execve(2), or fork and execve, from the same goroutine: the new
	// program inherits the thread's domain. False restricts every thread
	// and fails in cgo binaries.
	ThreadOnly bool

	// SelfTestPath must be denied once the ruleset is enforced; Restrict
	// opens it for reading and fails if that works. It must exist, be
	// readable by file permissions, and lie outside every Read rule. The
	// empty SelfTestPath means "/".
	SelfTestPath string
}

// PortRule grants Landlock network rights on one TCP port.
type PortRule struct {
	Port    uint16
	Allowed uint64 // LANDLOCK_ACCESS_NET_* bits
}

// Ruleset is a Config compiled for one ABI: the values that go into
// landlock_create_ruleset(2), landlock_add_rule(2) and
// landlock_restrict_self(2). The zero Ruleset is not valid; use Compile.
type Ruleset struct {
	ABI          int        // the ABI the masks are for, at most MaxABI
	HandledFS    uint64     // landlock_ruleset_attr.handled_access_fs
	HandledNet   uint64     // landlock_ruleset_attr.handled_access_net (ABI 4)
	Scoped       uint64     // landlock_ruleset_attr.scoped (ABI 6)
	Paths        []PathRule // validated copy of Config.Paths
	Ports        []PortRule // one per port, sorted
	Flags        uint32     // landlock_restrict_self flags (ABI 7)
	SelfTestPath string     // what Restrict proves is denied
	Dropped      []string   // what the config needs that the ABI cannot enforce
}

// PathAccess returns the LANDLOCK_ACCESS_FS_* bits a rule granting a on a
// file of kind k gets under this ruleset.
func (rs *Ruleset) PathAccess(a Access, k Kind) uint64 {
	return fsAccess(a, k) & rs.HandledFS
}

// Status reports what Restrict enforced. The zero Status means nothing was.
type Status struct {
	ABI        int      // ABI the ruleset was built for; 0 when nothing was enforced
	FS         bool     // filesystem rules enforced
	Net        bool     // TCP port rules enforced (ABI 4)
	Scopes     bool     // at least one scope enforced (ABI 6)
	AllThreads bool     // every thread restricted, not just the caller's (see Config.ThreadOnly)
	Dropped    []string // rights the kernel could not enforce, e.g. "fs.truncate (needs ABI 3)"
}

// Compile turns cfg into the ruleset for Landlock ABI abi. It validates all
// of cfg first and touches no OS API. Rights abi does not support are left
// out and named in Dropped; abi above MaxABI is treated as MaxABI.
func Compile(cfg Config, abi int) (*Ruleset, error) {
	if abi < 1 {
		return nil, fmt.Errorf("landlock: kernel has no Landlock (%w): boot with lsm=...,landlock or use a kernel built with CONFIG_SECURITY_LANDLOCK", ErrABI)
	}
	if abi < cfg.MinABI {
		return nil, fmt.Errorf("landlock: kernel offers ABI %d, config needs ABI %d (%w): upgrade the kernel or lower MinABI", abi, cfg.MinABI, ErrABI)
	}
	if cfg.MinABI > MaxABI {
		return nil, fmt.Errorf("landlock: MinABI %d is newer than this package knows (%d): lower MinABI", cfg.MinABI, MaxABI)
	}
	abi = min(abi, MaxABI)
	rs := &Ruleset{ABI: abi, HandledFS: handledFS(abi)}
	if err := rs.addPaths(cfg); err != nil {
		return nil, err
	}
	if err := rs.addNet(cfg); err != nil {
		return nil, err
	}
	if abi >= 6 {
		if cfg.ScopeSignals {
			rs.Scoped |= scopeSignal
		}
		if cfg.ScopeAbstractUnix {
			rs.Scoped |= scopeAbstractUnix
		}
	}
	if abi >= 7 && cfg.LogNewExec {
		rs.Flags |= restrictLogNewExecOn
	}
	rs.Dropped = dropped(cfg, abi)
	return rs, nil
}

func (rs *Ruleset) addPaths(cfg Config) error {
	for _, r := range cfg.Paths {
		if err := checkPath(r.Path); err != nil {
			return fmt.Errorf("landlock: path rule: %w", err)
		}
		if r.Access == 0 || r.Access&^accessAll != 0 {
			return fmt.Errorf("landlock: path rule %q: access %v: use a non-empty mix of Read, Write and Execute", r.Path, r.Access)
		}
	}
	rs.Paths = slices.Clone(cfg.Paths)
	rs.SelfTestPath = cfg.SelfTestPath
	if rs.SelfTestPath == "" {
		rs.SelfTestPath = "/"
	}
	if err := checkPath(rs.SelfTestPath); err != nil {
		return fmt.Errorf("landlock: SelfTestPath: %w", err)
	}
	// A self-test path that a rule makes readable would make SelfTest fail
	// after a correct restriction; refuse the config instead.
	for _, r := range rs.Paths {
		if r.Access&Read != 0 && within(r.Path, rs.SelfTestPath) {
			return fmt.Errorf("landlock: SelfTestPath %q is readable under path rule %q: set SelfTestPath to a path outside every Read rule", rs.SelfTestPath, r.Path)
		}
	}
	return nil
}

func (rs *Ruleset) addNet(cfg Config) error {
	if cfg.BindTCP != nil && !cfg.RestrictBind {
		return fmt.Errorf("landlock: BindTCP %v without RestrictBind: set RestrictBind or drop BindTCP", cfg.BindTCP)
	}
	for _, p := range cfg.ConnectTCP {
		if p == 0 {
			return fmt.Errorf("landlock: ConnectTCP port 0: list the egress proxy's ports")
		}
	}
	if cfg.AnyConnect && cfg.ConnectTCP != nil {
		return fmt.Errorf("landlock: ConnectTCP %v with AnyConnect: drop one of them", cfg.ConnectTCP)
	}
	if rs.ABI < 4 {
		return nil
	}
	if !cfg.AnyConnect {
		rs.HandledNet = netConnectTCP
	}
	if cfg.RestrictBind {
		rs.HandledNet |= netBindTCP
	}
	ports := map[uint16]uint64{}
	for _, p := range cfg.ConnectTCP {
		ports[p] |= netConnectTCP
	}
	for _, p := range cfg.BindTCP {
		ports[p] |= netBindTCP
	}
	for _, p := range slices.Sorted(maps.Keys(ports)) {
		rs.Ports = append(rs.Ports, PortRule{Port: p, Allowed: ports[p]})
	}
	return nil
}

// dropped names what cfg needs that abi cannot enforce.
func dropped(cfg Config, abi int) []string {
	var out []string
	need := func(name string, minABI int) {
		if abi < minABI {
			out = append(out, fmt.Sprintf("%s (needs ABI %d)", name, minABI))
		}
	}
	for _, r := range fsRights {
		if r.name != "" {
			need(r.name, r.abi)
		}
	}
	if !cfg.AnyConnect {
		need("net.connect_tcp", 4)
	}
	if cfg.RestrictBind {
		need("net.bind_tcp", 4)
	}
	if cfg.ScopeSignals {
		need("scope.signal", 6)
	}
	if cfg.ScopeAbstractUnix {
		need("scope.abstract_unix_socket", 6)
	}
	if cfg.LogNewExec {
		need("log.new_exec", 7)
	}
	return out
}

// status is what enforcing rs achieves.
func (rs *Ruleset) status(allThreads bool) Status {
	return Status{
		ABI:        rs.ABI,
		FS:         rs.HandledFS != 0,
		Net:        rs.HandledNet != 0,
		Scopes:     rs.Scoped != 0,
		AllThreads: allThreads,
		Dropped:    slices.Clone(rs.Dropped),
	}
}

func checkPath(p string) error {
	if p == "" || !path.IsAbs(p) || path.Clean(p) != p {
		return fmt.Errorf("%q is not an absolute, clean path: give it as the sandbox sees it, e.g. /data", p)
	}
	return nil
}

// within reports whether p is root or lies beneath it, lexically.
func within(root, p string) bool {
	return root == "/" || p == root || strings.HasPrefix(p, root+"/")
}
