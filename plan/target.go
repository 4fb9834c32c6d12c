package plan

import (
	"fmt"
	"slices"

	"github.com/airlock-sandbox/airlock/policy"
)

// Backend names the backend a plan is compiled for.
type Backend string

// The backends a plan can be compiled for.
const (
	// BackendNamespaces is airlock's own init in new namespaces: the plan
	// as the policy gives it.
	BackendNamespaces Backend = "namespaces"
	// BackendLandlock runs in the host's namespaces under Landlock and
	// seccomp (withoutNamespaces).
	BackendLandlock Backend = "landlock"
	// BackendOCI is runc or crun: the runtime makes the network namespace,
	// so there is no connect broker and no transparent egress.
	BackendOCI Backend = "oci"
	// BackendGVisor is runsc: as BackendOCI, and fs_write grants are
	// written in place (its gofer has no overlay of a host folder).
	BackendGVisor Backend = "gvisor"
	// BackendMicroVM is the guest of a microVM: no network device, so no
	// transparent egress, and fs_write grants written in place through
	// its 9p share.
	BackendMicroVM Backend = "microvm"
)

// Target is what Compile compiles a plan for: the backend that applies
// it and what the run adds to it. The plan Compile returns for a target
// is the one that backend hands its control process, whole.
type Target struct {
	// Backend applies the plan; "" is BackendNamespaces.
	Backend Backend
	// Scratch is BackendLandlock's scratch folder, absolute and clean: it
	// stands in for the private /tmp (the backend makes it, empty, before
	// it starts anything).
	Scratch string
	// CABundle, for a policy with credentials, returns the trust bundle
	// the sandbox gets at CABundlePath: the roots it would trust without
	// airlock (env is the plan's environment, whose SSL_CERT_FILE may name
	// them), then the run's CA. Nil: no bundle (the exports add no
	// credential, so they carry none).
	CABundle func(env []string) ([]byte, error)
}

// forTarget makes pl, compiled under p, the plan of t.
func forTarget(pl *Plan, p *policy.Policy, t Target) error {
	switch t.Backend {
	case "", BackendNamespaces:
	case BackendLandlock:
		if err := withoutNamespaces(pl, p, t.Scratch); err != nil {
			return err
		}
	case BackendOCI:
		WithoutTransparentEgress(pl)
	case BackendGVisor, BackendMicroVM:
		WithoutTransparentEgress(pl)
		writesInPlace(pl)
	default:
		return fmt.Errorf("%w: no backend %q", ErrBadRequest, t.Backend)
	}
	if t.CABundle == nil || len(p.Credentials()) == 0 {
		return nil
	}
	pem, err := t.CABundle(pl.Env)
	if err != nil {
		return err
	}
	withCABundle(pl, pem)
	return nil
}

// WritesFoldersInPlace reports whether pl writes an fs_write folder in
// place, without a stage: a plan of BackendLandlock, BackendGVisor or
// BackendMicroVM with a folder grant, which only a policy that accepts
// the staged_writes downgrade runs.
func WritesFoldersInPlace(pl *Plan) bool {
	return slices.ContainsFunc(pl.Mounts, func(m Mount) bool {
		return m.Kind == KindBind && m.Writable && !m.File && m.Origin == OriginFSWrite
	})
}
