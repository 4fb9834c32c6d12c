package policy

import (
	"errors"
	"fmt"
	"slices"

	"github.com/airlock-sandbox/airlock/policy/budget"
	"github.com/airlock-sandbox/airlock/policy/hostspec"
	"github.com/airlock-sandbox/airlock/policy/pathspec"
)

// Spec is the Go form of a policy file, for library users and tests. Paths
// must be absolute. New validates it completely.
type Spec struct {
	FSRead         []string
	FSWrite        []string
	NetHosts       []string
	AllowedTools   []string
	Env            []string      // "NAME" or "NAME=value"
	Budget         budget.Limits // zero fields take defaults
	AllowDowngrade []string
}

// New validates s and returns the policy it describes, or every problem found.
// PROVISIONAL: the parser work hardens this (shared validation with Parse).
func New(s Spec) (*Policy, error) {
	p := &Policy{limits: s.Budget.WithDefaults()}
	var errs []error
	for _, r := range s.FSRead {
		c, err := pathspec.Abs("", r)
		if err != nil {
			errs = append(errs, fmt.Errorf("fs_read %q: %w", r, err))
			continue
		}
		p.fsRead = append(p.fsRead, c)
	}
	for _, r := range s.FSWrite {
		c, err := pathspec.Abs("", r)
		if err != nil {
			errs = append(errs, fmt.Errorf("fs_write %q: %w", r, err))
			continue
		}
		p.fsWrite = append(p.fsWrite, c)
	}
	for _, h := range s.NetHosts {
		pat, err := hostspec.Parse(h)
		if err != nil {
			errs = append(errs, fmt.Errorf("net_hosts %q: %w", h, err))
			continue
		}
		p.netHosts = append(p.netHosts, pat)
	}
	p.tools = slices.Clone(s.AllowedTools)
	for _, e := range s.Env {
		name, val, has := cut(e, '=')
		p.env = append(p.env, EnvVar{Name: name, Value: val, HasValue: has})
	}
	for _, d := range s.AllowDowngrade {
		p.downgrades = append(p.downgrades, Downgrade(d))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return p, nil
}

func cut(s string, sep byte) (before, after string, found bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == sep {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}
