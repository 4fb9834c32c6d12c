package sandbox

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"

	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/plan"
)

// compiled is a plan compiled for a run's backend, with what the run made
// for it: the request it came from (its Target included), and for a policy
// with credentials their values and the run's CA, which the plan's trust
// bundle holds. The backend hands the plan to its control process as it
// is: nothing changes a compiled plan.
type compiled struct {
	pl    *plan.Plan
	req   plan.Request
	creds []egress.Credential
	ca    *egress.CA
}

// compileRun compiles req for cfg's isolation: the landlock backend's
// scratch folder named at random (its launch makes it), and for a policy
// with credentials their values read and the run's CA made, whose
// certificate the plan's trust bundle holds. The landlock backend, which
// refuses what it cannot enforce before anything is compiled, gets no
// credentials.
func (cfg Config) compileRun(req plan.Request) (compiled, error) {
	req.Target = plan.Target{Backend: targetOf(cfg.Isolation)}
	if req.Target.Backend == plan.BackendLandlock {
		return cfg.compileLandlock(req)
	}
	creds, ca, err := cfg.credentials()
	if err != nil {
		return compiled{}, err
	}
	if ca != nil {
		req.Target.CABundle = trustBundle(ca)
	}
	pl, err := cfg.compile(req)
	if err != nil {
		return compiled{}, err
	}
	return compiled{pl: pl, req: req, creds: creds, ca: ca}, nil
}

// compileLandlock compiles req for the landlock backend, once the policy
// asks for nothing it refuses (unsharedRefusal), with a fresh scratch
// folder's name.
func (cfg Config) compileLandlock(req plan.Request) (compiled, error) {
	if err := unsharedRefusal(cfg.Policy); err != nil {
		return compiled{}, err
	}
	var r [8]byte
	_, _ = rand.Read(r[:]) // crypto/rand does not fail on Linux
	req.Target = plan.Target{Backend: plan.BackendLandlock, Scratch: filepath.Join(os.TempDir(), "airlock-scratch-"+hex.EncodeToString(r[:]))}
	pl, err := cfg.compile(req)
	if err != nil {
		return compiled{}, err
	}
	return compiled{pl: pl, req: req}, nil
}
