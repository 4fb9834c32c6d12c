package sandbox

import (
	"errors"
	"os"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/enforce/landlock"
	"github.com/airlock-sandbox/airlock/policy"
)

// unenforceable is the refusal of a plan the host cannot enforce: every
// layer that is missing here and that the policy does not accept going
// without, so that one refusal tells the whole story, with the one flag
// and the one policy line that accept them all.
type unenforceable struct {
	layers []policy.Downgrade
	why    []string // why each layer is missing; equal texts are said once
}

func (u *unenforceable) add(d policy.Downgrade, why string) {
	u.layers = append(u.layers, d)
	u.why = append(u.why, why)
}

func (u *unenforceable) Error() string {
	names := make([]string, len(u.layers))
	for i, d := range u.layers {
		names[i] = string(d)
	}
	var b strings.Builder
	b.WriteString("this host cannot enforce ")
	b.WriteString(strings.Join(names, ", "))
	b.WriteString(" (")
	seen := map[string]bool{}
	first := true
	for _, w := range u.why {
		if seen[w] {
			continue
		}
		seen[w] = true
		if !first {
			b.WriteString("; ")
		}
		first = false
		b.WriteString(w)
	}
	b.WriteString("), so nothing was started: run where they are available (airlock doctor says what this host has), or accept running without them with --allow-downgrade ")
	b.WriteString(strings.Join(names, ","))
	b.WriteString(" or the policy line allow_downgrade: [")
	b.WriteString(strings.Join(names, ", "))
	b.WriteString("]; the report's enforcement then says what was not enforced")
	return b.String()
}

// preflight adds to err (nil, or newLimits' *unenforceable) the other
// layers the namespace backend needs that this host lacks and the policy
// does not accept going without, found without starting anything:
// Landlock (its ABI query) and user namespaces (user.max_user_namespaces
// of 0). A refusal that only the clone itself can see (a seccomp profile
// refusing user namespaces) still comes from the clone.
func (b *box) preflight(err error) error {
	var u *unenforceable
	if err != nil && !errors.As(err, &u) {
		return err
	}
	if u == nil {
		u = &unenforceable{}
	}
	if b.pl.RequireLandlock {
		if _, lerr := landlock.ABI(); lerr != nil {
			u.add(policy.DowngradeLandlock, lerr.Error())
		}
	}
	if !b.cfg.Policy.AcceptsDowngrade(policy.DowngradeNamespaces) {
		if v, rerr := os.ReadFile("/proc/sys/user/max_user_namespaces"); rerr == nil && strings.TrimSpace(string(v)) == "0" {
			u.add(policy.DowngradeNamespaces, "user namespaces: user.max_user_namespaces is 0")
		}
	}
	if len(u.layers) == 0 {
		return nil
	}
	return u
}
