package sandbox

import (
	"fmt"
	"log/slog"
	"time"
)

// Pool keeps sandbox inits started ahead of need, so that a sandbox
// starts without waiting for its kernel objects and its init's start-up
// (what agent-sandbox calls a warm pool). A warm init holds new user,
// mount, pid, net, ipc, uts and cgroup namespaces, an empty cgroup and a
// Go program waiting for its plan; it has run nothing and granted nothing
// (what a root supervisor's may have mounted ahead is below). When a
// sandbox takes it, the sandbox's limits are
// written to its cgroup and its plan is sent, and it builds the root,
// applies Landlock and seccomp and runs commands exactly as a cold init
// does: the pool changes when the work is done, not what is enforced.
//
// A Pool refills in the background: each taken init is replaced (2 ms
// after its sandbox is ready, so that the replacement's start does not
// compete with the taker's own last steps for the CPU), at most
// Size are ready or starting at once, a failed start is retried after a
// pause that doubles up to a minute, and an init unused for MaxAge is
// replaced (it holds a copy of the host's mount table from when it
// started). With a root supervisor, each new warm init also holds clones
// of the bind sources the last taken one's plan bound (the system base,
// /dev and tools; never grants, which are idmapped to their sandbox's
// user namespace): a plan with an identical step takes that clone instead
// of cloning it then, and the clones nobody's plan names are closed
// unmounted. Such an init also mounts, while it waits, the steps the last
// taken one's plan began with, on a root of its own it has not pivoted
// into: the system base, /dev, /proc, /tmp and the synthesized /etc files
// (nsinit.Premountable), nothing of a grant, a tool or the command. A plan
// that begins with exactly those steps goes on from there (the init
// compares them itself); for any other, the init detaches them and starts
// over. An init that cannot mount them mounts none. Close ends them all.
// A Pool is safe for concurrent use.
type Pool struct {
	cfg PoolConfig
	st  poolState
}

// PoolConfig sizes a Pool.
type PoolConfig struct {
	// Size is how many warm inits the pool keeps ready, 1 to MaxPoolSize.
	// Each costs an idle Go process (about 1 MiB of memory), its
	// namespaces and a cgroup while it waits.
	Size int

	// NoRefill makes the pool start its inits once and never replace a
	// taken or expired one: a pool for one known run.
	NoRefill bool

	// MaxAge is how long an unused init is kept before it is replaced.
	// Zero means DefaultPoolMaxAge.
	MaxAge time.Duration

	// Executable is the init binary, as Config.Executable; a sandbox
	// whose Config names another starts cold.
	Executable string

	// Logger receives the pool's operational messages (failed starts).
	// Nil discards them.
	Logger *slog.Logger
}

// Pool bounds.
const (
	MaxPoolSize       = 64
	DefaultPoolMaxAge = time.Minute
)

// PoolStats counts what a Pool did.
type PoolStats struct {
	Ready    int // warm inits waiting now
	Starting int // inits being started now
	Taken    int // warm inits given to sandboxes so far
	Misses   int // sandboxes that found none ready and started cold
	Failed   int // inits that failed to start
	Expired  int // inits replaced after MaxAge unused
	// MountedAhead counts the sandboxes whose plan began with the steps
	// their warm init had mounted while it waited (root only: the system
	// base, /dev, /proc, /tmp and /etc of the plan before).
	MountedAhead int
}

// NewPool starts a pool of warm inits. It returns before they are ready.
func NewPool(cfg PoolConfig) (*Pool, error) {
	if cfg.Size < 1 || cfg.Size > MaxPoolSize {
		return nil, fmt.Errorf("sandbox: pool size %d: give 1 to %d", cfg.Size, MaxPoolSize)
	}
	if cfg.MaxAge < 0 {
		return nil, fmt.Errorf("sandbox: pool max age %v: give a positive duration, or zero for %v", cfg.MaxAge, DefaultPoolMaxAge)
	}
	if cfg.MaxAge == 0 {
		cfg.MaxAge = DefaultPoolMaxAge
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	p := &Pool{cfg: cfg}
	if err := p.st.start(p); err != nil {
		return nil, err
	}
	return p, nil
}

// Close kills the pool's warm inits and removes their cgroups; sandboxes
// that took one are not affected. It is idempotent.
func (p *Pool) Close() { p.st.close() }

// Stats returns the pool's counters.
func (p *Pool) Stats() PoolStats { return p.st.stats() }
