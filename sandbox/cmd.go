package sandbox

import (
	"crypto/x509"
	"io"
	"log/slog"
	"time"

	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/plan"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
)

// Config describes the sandbox a command runs in. The zero Config is not
// usable: Policy is required.
type Config struct {
	// Policy lists what the program may touch. Required.
	Policy *policy.Policy

	// Audit receives one event per decision (proxy, budget, exit). Nil
	// discards them; the Report carries the denials either way.
	Audit audit.Sink

	// Clock drives the budget. Nil means the system clock.
	Clock budget.Clock

	// Resolver and Dialer are the egress proxy's; nil means the host's
	// resolver and a plain dialer. Tests inject fakes.
	Resolver egress.Resolver
	Dialer   egress.Dialer

	// Logger receives operational messages. Nil discards them.
	Logger *slog.Logger

	// Executable is the binary re-executed as the sandbox's init; it must
	// call Init first in main. Empty means /proc/self/exe.
	Executable string

	// ImageCache is where a policy's rootfs that is an image (an OCI
	// layout, or an OCI or Docker archive) is unpacked, once per digest of
	// what it unpacks to, by this program re-executed in a confined child
	// (so Init must have been called). It and its parents must be owned by
	// this user or root and writable by no one else. Empty means
	// airlock/images in the user's cache folder (os.UserCacheDir:
	// $XDG_CACHE_HOME or ~/.cache).
	ImageCache string

	// FSAudit reports filesystem denials in the Report, read from the
	// kernel's Landlock audit records (root, Linux 6.15+). It turns the
	// host's audit subsystem on while runs are active if it was off, which
	// affects the whole host (see internal/enforce/fsaudit). False means
	// denials are enforced but not itemized; the report says which.
	FSAudit bool

	// Isolation picks the enforcement: IsolationNamespaces (the zero
	// value) is airlock's own sandbox; IsolationOCI runs the same policy as
	// an OCI bundle under Runtime, with airlock's proxy, deadline, output
	// cap and report around it (root only).
	Isolation string

	// Runtime is the OCI runtime for IsolationOCI: "runc" (the default),
	// "crun", or "runsc" (the same as IsolationGVisor).
	Runtime string

	// MaxProxyConns lowers the cap on connections the sandbox may hold to
	// its egress proxy at once; connections beyond the cap are closed at
	// once and reported as denials (rule max_proxy_conns). The cap is 4
	// per max_pids task, at least 64 and at most 1024 (256 under the
	// default max_pids of 64); a positive MaxProxyConns below that replaces
	// it. Zero keeps it. `airlock serve` sets each session's share of its
	// file descriptors here.
	MaxProxyConns int

	// AgentAdvice lets the egress proxy's refusals, which the sandboxed
	// program reads, name the net_hosts entry that would allow the
	// request. False, the default, keeps that advice (which widens the
	// policy) for the operator: the audit events and Report.Operator carry
	// it either way.
	AgentAdvice bool

	// LookupEnv reads the values of the policy's credentials (their env
	// names) on the supervisor's side. Nil means os.LookupEnv. A
	// credential whose variable is unset or empty refuses the start.
	LookupEnv func(name string) (string, bool)

	// UpstreamRoots verifies the servers of hosts with credentials, whose
	// TLS the proxy terminates. Nil means the host's system roots.
	UpstreamRoots *x509.CertPool

	// SessionLifetime is how long a Session lives from its start unless
	// Extend moves its end; zero means DefaultSessionLifetime. The
	// policy's max_wall bounds each exec, not the session. Cmd ignores it.
	SessionLifetime time.Duration

	// SessionMaxLifetime bounds how far Extend may move a session's end,
	// counted from its start; zero means DefaultSessionMaxLifetime.
	SessionMaxLifetime time.Duration

	// Pool, when set, gives a sandbox of the namespaces isolation one of
	// its warm inits if one is ready (see Pool); otherwise, or when the
	// pool's Executable differs from this Config's, the sandbox starts
	// cold. Nil: Cmd.Run starts its init while the plan compiles; a
	// Session starts cold.
	Pool *Pool

	// handedOver, set by tests only, sees the plan where the backend hands
	// it to its control process (box.handOver).
	handedOver func(*plan.Plan)
}

// Session lifetimes when the Config leaves them zero.
const (
	DefaultSessionLifetime    = time.Hour
	DefaultSessionMaxLifetime = 24 * time.Hour
)

// sessionLifetimes returns the Config's session lifetime and its bound.
func (c Config) sessionLifetimes() (lifetime, maxLifetime time.Duration) {
	lifetime, maxLifetime = c.SessionLifetime, c.SessionMaxLifetime
	if lifetime <= 0 {
		lifetime = DefaultSessionLifetime
	}
	if maxLifetime <= 0 {
		maxLifetime = DefaultSessionMaxLifetime
	}
	return min(lifetime, maxLifetime), maxLifetime
}

// proxyConnCap is the egress proxy's connection cap for a sandbox of
// max_pids pids. A well-behaved task holds a few proxy connections at a
// time (an HTTP client pools a handful per host; pip and browsers open
// 6 to 10), so 4 per task is ample, and the sandbox cannot have more tasks
// than max_pids. The floor keeps a parallel downloader working under a
// tiny max_pids; the ceiling bounds what one sandbox costs the
// supervisor, whose fds and memory are outside every sandbox limit: a
// tunnelling connection holds 2 fds and about 70 KiB, so 1024 connections
// are about 2048 fds and 70 MB.
func proxyConnCap(pids int64, override int) int {
	n := int(min(max(4*pids, 64), 1024))
	if override > 0 && override < n {
		n = override
	}
	return n
}

// Isolation levels (Config.Isolation).
const (
	IsolationNamespaces = "namespaces"
	IsolationOCI        = "oci"
	// IsolationLandlock runs without namespaces: Landlock, seccomp (with
	// connect answered by the supervisor), rlimits and cgroups where
	// delegated. The namespace backend falls back to it by itself where
	// user namespaces cannot be created and the policy accepts the
	// downgrade (allow_downgrade: namespaces).
	IsolationLandlock = "landlock"
	// IsolationGVisor is IsolationOCI under gVisor's runsc: the workload
	// runs on a user-space kernel (the report's enforcement.platform says
	// which platform), with airlock's proxy, deadline, output cap and
	// report around it. Root only, like IsolationOCI.
	IsolationGVisor = "gvisor"
	// IsolationMicroVM runs the sandbox in a microVM: QEMU's microvm
	// machine boots a guest kernel of its own, in which airlock's init
	// applies the same plan; no network device: egress only through
	// airlock's proxy, carried over a virtio-serial port. Root only.
	IsolationMicroVM = "microvm"
)

// Cmd is one command to run in a fresh sandbox, like exec.Cmd.
type Cmd struct {
	Config

	// Args is the command line; Args[0] is a bare name (looked up on the
	// sandbox PATH) or an absolute path.
	Args []string

	// Dir is the working directory inside the sandbox. Empty means the
	// first fs_write grant, else /tmp.
	Dir string

	// CommandIsGranted lets Args[0] run even when it is not in
	// allowed_tools (the CLI: the operator named it on the command line).
	// False requires it to be an allowed tool.
	CommandIsGranted bool

	// Stdin is the command's standard input. Nil means /dev/null.
	Stdin io.Reader

	// Stdout and Stderr, when set, receive the captured output as it is
	// produced (only the bytes within max_output_bytes).
	Stdout, Stderr io.Writer

	// PTY gives the command a pseudo-terminal as its controlling terminal
	// and stdin, stdout and stderr (for interactive programs). Output then
	// arrives merged on Stdout. False means pipes and no controlling
	// terminal at all.
	PTY bool
}
