package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync"

	"github.com/airlock-sandbox/airlock/export/oci"
	"github.com/airlock-sandbox/airlock/plan"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// plans compiles, once per command line, the plan `airlock run` enforces
// for it under the default policy (nothing granted; the command is, as the
// CLI grants the command it is given). Every contender that rebuilds
// airlock's sandbox (bubblewrap, runc, crun) starts from this plan, so they
// get the root filesystem, environment and limits airlock itself applies.
type plans struct {
	policy *policy.Policy

	mu    sync.Mutex
	cache map[string]*plan.Plan // guarded by mu: argv joined by NUL → plan
}

func newPlans() *plans {
	return &plans{policy: policy.Default(), cache: map[string]*plan.Plan{}}
}

func (ps *plans) get(argv []string) (*plan.Plan, error) {
	key := strings.Join(argv, "\x00")
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if pl, ok := ps.cache[key]; ok {
		return pl, nil
	}
	cmd := &sandbox.Cmd{Config: sandbox.Config{Policy: ps.policy}, Args: argv, CommandIsGranted: true}
	pl, err := cmd.Plan()
	if err != nil {
		return nil, fmt.Errorf("plan for %q: %w", argv, err)
	}
	ps.cache[key] = pl
	return pl, nil
}

// bundleCache writes one OCI bundle per command line with airlock's own
// exporter (export/oci: oci.Config on the compiled plan, Bundle.Write), so
// runc and crun run exactly the bundle `airlock export oci` ships: its
// namespaces and id map, mounts, masked paths, rlimits, cgroup limits and
// seccomp section (the ioctl TIOCSTI/TIOCLINUX refusals included).
type bundleCache struct {
	work  string
	plans *plans

	mu      sync.Mutex
	bundles map[string]string // guarded by mu: argv joined by NUL → bundle dir
}

func newBundleCache(work string, ps *plans) *bundleCache {
	return &bundleCache{work: work, plans: ps, bundles: map[string]string{}}
}

func (bc *bundleCache) get(argv []string) (string, error) {
	key := strings.Join(argv, "\x00")
	bc.mu.Lock()
	defer bc.mu.Unlock()
	if dir, ok := bc.bundles[key]; ok {
		return dir, nil
	}
	pl, err := bc.plans.get(argv)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(bc.work, "oci-bundles", fmt.Sprintf("b%d", len(bc.bundles)))
	b, err := oci.Config(pl, bc.plans.policy, oci.Options{BundleDir: dir})
	if err != nil {
		return "", err
	}
	if err := b.Write(dir); err != nil {
		return "", err
	}
	bc.bundles[key] = dir
	return dir, nil
}
