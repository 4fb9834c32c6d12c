package policy

import (
	"net/netip"
	"slices"
	"time"

	"github.com/airlock-sandbox/airlock/policy/budget"
	"github.com/airlock-sandbox/airlock/policy/downgrade"
	"github.com/airlock-sandbox/airlock/policy/hostspec"
	"github.com/airlock-sandbox/airlock/policy/pathspec"
)

// Version is the only policy format version this build understands.
const Version = 1

// Downgrade names an enforcement layer the policy accepts running without
// when the host lacks it (policy key "allow_downgrade"). Anything not listed
// makes a missing feature a refusal (exit 125). The names are defined in
// policy/downgrade, which the plan's data shares without linking the
// policy parser.
type Downgrade = downgrade.Layer

// Downgrades a policy may accept (see policy/downgrade for what each
// gives up).
const (
	DowngradeLandlock     = downgrade.Landlock     // run without Landlock (mount namespace still applies)
	DowngradeMemory       = downgrade.Memory       // no memory controller: the memory is not bounded
	DowngradeCPU          = downgrade.CPU          // no cpu controller: RLIMIT_CPU only
	DowngradePids         = downgrade.Pids         // no pids controller: RLIMIT_NPROC only
	DowngradeFSAudit      = downgrade.FSAudit      // filesystem denials cannot be reported
	DowngradeProc         = downgrade.Proc         // the container's /proc, read-only, when the kernel refuses a fresh one
	DowngradeNamespaces   = downgrade.Namespaces   // the backend without namespaces where user namespaces cannot be created
	DowngradeStagedWrites = downgrade.StagedWrites // without namespaces, fs_write folders written in place
)

// Policy is an immutable, fully validated allow-list. The zero Policy is
// not valid; use Parse, Default or (*Policy).With. Accessors return copies,
// so callers cannot change a Policy through a returned slice.
type Policy struct {
	source      string // file name the policy came from, "" for flags only
	fsRead      []string
	fsWrite     []string
	fsDeny      []string // inside grants: neither readable nor writable
	fsProtect   []string // inside fs_write grants: read-only, cannot be created
	fsUnprotect []string // built-in protected paths left writable
	netHosts    []hostspec.Pattern
	credentials []Credential
	tools       []string
	env         []EnvVar
	limits      budget.Limits // all fields set
	downgrades  []Downgrade
	explicit    limitSet          // budgets the file, Spec or a flag set; With may lower them, never raise
	rootfs      string            // the environment's root filesystem; "" is the host's
	placed      map[string]string // grant host path -> where it appears inside; only placed grants
}

// EnvVar is one env grant: Name passed through from the caller's
// environment, or set to Value when HasValue.
type EnvVar struct {
	Name     string
	Value    string
	HasValue bool
}

// Rootfs returns the environment's root filesystem: the absolute folder
// whose system base and tools the sandbox sees in place of the host's, or
// "" for the host's own.
func (p *Policy) Rootfs() string { return p.rootfs }

// Source returns the file the policy was read from, or "".
func (p *Policy) Source() string { return p.source }

// FSRead returns the canonical absolute read grants (write grants excluded).
func (p *Policy) FSRead() []string { return slices.Clone(p.fsRead) }

// FSWrite returns the canonical absolute write grants.
func (p *Policy) FSWrite() []string { return slices.Clone(p.fsWrite) }

// FSDeny returns the canonical paths inside grants that the sandbox can
// neither read nor write (fs_deny).
func (p *Policy) FSDeny() []string { return slices.Clone(p.fsDeny) }

// FSProtect returns the canonical paths inside fs_write grants that stay
// read-only and cannot be created (fs_protect), beyond the built-in list.
func (p *Policy) FSProtect() []string { return slices.Clone(p.fsProtect) }

// FSUnprotect returns the built-in protected paths the policy leaves
// writable (fs_unprotect).
func (p *Policy) FSUnprotect() []string { return slices.Clone(p.fsUnprotect) }

// NetHosts returns the network grants.
func (p *Policy) NetHosts() []hostspec.Pattern { return slices.Clone(p.netHosts) }

// AllowedTools returns the executable names or absolute paths granted.
func (p *Policy) AllowedTools() []string { return slices.Clone(p.tools) }

// Env returns the environment grants.
func (p *Policy) Env() []EnvVar { return slices.Clone(p.env) }

// Budget returns the complete budget (defaults filled in).
func (p *Policy) Budget() budget.Limits { return p.limits }

// Downgrades returns the enforcement downgrades the policy accepts.
func (p *Policy) Downgrades() []Downgrade { return slices.Clone(p.downgrades) }

// AcceptsDowngrade reports whether the policy lists d under allow_downgrade.
func (p *Policy) AcceptsDowngrade(d Downgrade) bool { return slices.Contains(p.downgrades, d) }

// CanRead reports whether the canonical absolute path is inside a read or
// write grant and not inside fs_deny. The caller must canonicalize
// (pathspec.Abs) first.
func (p *Policy) CanRead(path string) bool {
	return (within(p.fsWrite, path) || within(p.fsRead, path)) && !within(p.fsDeny, path)
}

// CanWrite reports whether the canonical absolute path is inside a write
// grant and not inside fs_deny, fs_protect or an active built-in
// protection.
func (p *Policy) CanWrite(path string) bool {
	return within(p.fsWrite, path) && !within(p.fsDeny, path) && p.ProtectedBy(path) == nil
}

// ProtectedBy returns the protection that keeps path read-only, or nil.
func (p *Policy) ProtectedBy(path string) *Protection {
	for _, pr := range p.Protections() {
		if pathspec.Within(pr.Path, path) {
			return &pr
		}
	}
	return nil
}

func within(roots []string, path string) bool {
	for _, r := range roots {
		if pathspec.Within(r, path) {
			return true
		}
	}
	return false
}

// CheckRead returns nil if path (absolute or relative to cwd) may be read,
// else a *DenyError naming fs_read.
func (p *Policy) CheckRead(cwd, path string) error {
	c, err := pathspec.Abs(cwd, path)
	if err != nil {
		return &DenyError{Cap: FSRead, Op: "read", Subject: path, Reason: err.Error()}
	}
	if within(p.fsDeny, c) {
		return &DenyError{Cap: FSRead, Op: "read", Subject: c, Reason: "path is inside fs_deny"}
	}
	if !p.CanRead(c) {
		return &DenyError{Cap: FSRead, Op: "read", Subject: c, Reason: "path is outside fs_read"}
	}
	return nil
}

// CheckWrite returns nil if path may be written, else a *DenyError naming fs_write.
func (p *Policy) CheckWrite(cwd, path string) error {
	c, err := pathspec.Abs(cwd, path)
	if err != nil {
		return &DenyError{Cap: FSWrite, Op: "write", Subject: path, Reason: err.Error()}
	}
	switch pr := p.ProtectedBy(c); {
	case within(p.fsDeny, c):
		return &DenyError{Cap: FSWrite, Op: "write", Subject: c, Reason: "path is inside fs_deny"}
	case pr != nil:
		return &DenyError{Cap: FSWrite, Op: "write", Subject: c, Reason: "path is protected (" + pr.Why + ")", Protected: true}
	case !p.CanWrite(c):
		return &DenyError{Cap: FSWrite, Op: "write", Subject: c, Reason: "path is outside fs_write"}
	}
	return nil
}

// AllowsHost reports whether a normalized host name (hostspec.NormalizeHost)
// and port match a net_hosts entry by name. Address checks (private ranges)
// are the egress layer's job and use AllowsAddr.
func (p *Policy) AllowsHost(host string, port uint16) bool {
	for _, h := range p.netHosts {
		if h.Match(host, port) {
			return true
		}
	}
	return false
}

// AllowsAddr reports whether an IP address and port are listed exactly
// (as an IP literal or inside a CIDR) in net_hosts.
func (p *Policy) AllowsAddr(a netip.Addr, port uint16) bool {
	for _, h := range p.netHosts {
		if h.IsAddr() && h.MatchAddr(a, port) {
			return true
		}
	}
	return false
}

// CheckHost returns nil when host:port is granted by name, else a *DenyError
// naming net_hosts. host must be raw input; it is normalized here.
func (p *Policy) CheckHost(host string, port uint16) error {
	n, err := hostspec.NormalizeHost(host)
	if err != nil {
		return &DenyError{Cap: NetHosts, Op: "connect", Subject: host, Reason: err.Error()}
	}
	subj := hostspec.Join(n, port)
	if a, perr := netip.ParseAddr(n); perr == nil {
		if !p.AllowsAddr(a, port) {
			return &DenyError{Cap: NetHosts, Op: "connect", Subject: subj, Reason: "IP addresses are reachable only when listed exactly in net_hosts"}
		}
		return nil
	}
	if !p.AllowsHost(n, port) {
		return &DenyError{Cap: NetHosts, Op: "connect", Subject: subj, Reason: n + " is not in net_hosts"}
	}
	return nil
}

// AllowsTool reports whether name (a bare name or an absolute path) is in
// allowed_tools. A bare grant "python3" allows any path whose base name is
// python3 only after the sandbox has resolved it on its PATH; here the
// comparison is exact on names and on absolute paths.
func (p *Policy) AllowsTool(name string) bool { return slices.Contains(p.tools, name) }

// CheckTool returns nil when the tool is granted, else a *DenyError naming allowed_tools.
func (p *Policy) CheckTool(name string) error {
	if !p.AllowsTool(name) {
		return &DenyError{Cap: AllowedTools, Op: "exec", Subject: name, Reason: name + " is not in allowed_tools"}
	}
	return nil
}

// Deadline is a convenience: start plus max_wall.
func (p *Policy) Deadline(start time.Time) time.Time { return start.Add(p.limits.Wall) }
