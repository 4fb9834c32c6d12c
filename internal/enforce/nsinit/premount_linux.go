package nsinit

import (
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/airlock-sandbox/airlock/internal/enforce/mount"
	"github.com/airlock-sandbox/airlock/plan/spec"
)

// premounted is what a warm init mounted before its plan came: a root
// holding steps, built by b, which setupMounts goes on with when the plan
// begins with exactly those steps.
type premounted struct {
	b            *mount.Builder
	steps        []spec.Mount
	procFallback bool
}

// Premountable reports whether step m may be mounted before its sandbox's
// plan is known: a step of the system base or of the sandbox itself (its
// /dev, /proc, /tmp and synthesized /etc files), placed as it is, not a
// grant, a tool, the command, the stage or a narrowing. The supervisor
// sends only such steps, and the init checks again.
func Premountable(m spec.Mount) bool {
	if m.Origin != spec.OriginBase && m.Origin != spec.OriginSandbox {
		return false
	}
	switch m.Kind {
	case spec.KindSymlink, spec.KindDir, spec.KindFile, spec.KindTmpfs, spec.KindProc:
		return true
	case spec.KindBind:
		return m.Cloned() && !m.IDMap
	}
	return false
}

// premountAsked reports whether the supervisor started this init with
// PremountArg.
func premountAsked() bool { return slices.Contains(os.Args[1:], PremountArg) }

// premount reads the "premount" message, mounts its steps on a new root
// and says how many it mounted. It returns nil when it mounted nothing: a
// step failed (what it mounted is detached again and the supervisor told
// why) or there was nothing to mount. The error is for a message that is
// not a premount: the protocol is broken and the init ends.
func premount() (*premounted, error) {
	msg, fds, err := Recv(ControlFD)
	if err != nil {
		closeAll(fds)
		return nil, err
	}
	if msg.Type != MsgPremount {
		closeAll(fds)
		return nil, fmt.Errorf("expected premount message, got %q", msg.Type)
	}
	pre, err := premountSteps(msg.Premount, fds)
	reply := Message{Type: MsgPremounted}
	if err != nil {
		reply.Error = err.Error()
	} else if pre != nil {
		reply.Premounted = len(pre.steps)
	}
	if err := Send(ControlFD, reply); err != nil {
		return nil, err
	}
	return pre, nil
}

// premountSteps mounts the steps of the partial plan in data on a new
// root at /tmp, with fds the clones of its bind steps in order, and
// closes every fd. On error nothing it mounted stays.
func premountSteps(data string, fds []int) (pre *premounted, err error) {
	defer closeAll(fds)
	if data == "" {
		return nil, nil // the supervisor could not clone every bind: nothing ahead
	}
	var pp spec.Plan
	if err := pp.UnmarshalBinary([]byte(data)); err != nil {
		return nil, fmt.Errorf("premount plan: %w", err)
	}
	if len(pp.Mounts) == 0 {
		return nil, nil
	}
	binds := 0
	for _, m := range pp.Mounts {
		if !Premountable(m) {
			return nil, fmt.Errorf("airlock bug: step %s at %s cannot be mounted ahead", m.Kind, m.Target)
		}
		if m.Cloned() {
			binds++
		}
	}
	if len(fds) != binds {
		return nil, fmt.Errorf("airlock bug: %d clones received for %d binds mounted ahead", len(fds), binds)
	}
	b := &mount.Builder{Root: "/tmp", ProcFallback: pp.ProcFallback}
	if err := b.MountRoot(); err != nil {
		return nil, err
	}
	next := 0
	for _, m := range pp.Mounts {
		tree := -1
		if m.Cloned() {
			tree = fds[next]
			next++
		}
		if err := b.Place(m, tree); err != nil {
			return nil, errors.Join(err, b.Abandon())
		}
	}
	return &premounted{b: b, steps: pp.Mounts, procFallback: pp.ProcFallback}, nil
}

// begins reports whether pl begins with exactly the steps pre mounted,
// with the same proc fallback.
func (pre *premounted) begins(pl *spec.Plan) bool { return Begins(pl, pre.steps, pre.procFallback) }

// Begins reports whether pl begins with exactly steps, with the proc
// fallback procFallback (which the proc step depends on): whether steps
// mounted ahead are pl's own. No steps begin no plan. The supervisor asks
// before it tells an init to go on from them, and the init asks again.
func Begins(pl *spec.Plan, steps []spec.Mount, procFallback bool) bool {
	return len(steps) > 0 && len(pl.Mounts) >= len(steps) && slices.Equal(pl.Mounts[:len(steps)], steps) &&
		pl.ProcFallback == procFallback
}
