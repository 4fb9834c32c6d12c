package server

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/policy"
)

// Token holders are tenants, not operators: the policy a tenant sends must
// not reach what the operator did not mean to share (host files, the
// network, the server's own environment). The operator's ceiling bounds
// every session policy; without one, an inline policy may grant only the
// private workspace the server makes for the session.

// maxListed bounds how many grants a refusal's message names; the
// "exceeds" list always holds all of them.
const maxListed = 5

// ceilingFor returns the ceiling of the token with index owner, or nil.
func (s *Server) ceilingFor(owner int) *policy.Policy {
	if owner >= 0 && owner < len(s.cfg.TokenCeilings) && s.cfg.TokenCeilings[owner] != nil {
		return s.cfg.TokenCeilings[owner]
	}
	return s.cfg.Ceiling
}

// admit returns the policy a session of owner runs under, or a 403 listing
// every grant of p beyond the token's ceiling. With a ceiling, the budgets
// p leaves at their defaults are lowered to the ceiling's first, and p,
// inline or named, must lie within it. Without one, a named policy (the
// operator wrote it) is used as it is, and an inline one must lie within
// noCeiling.
func (s *Server) admit(p *policy.Policy, named bool, owner int) (*policy.Policy, *api.Error) {
	ceiling := s.ceilingFor(owner)
	switch {
	case ceiling != nil:
		p = p.LowerDefaults(ceiling)
		if err := p.Within(ceiling); err != nil {
			return nil, s.exceeds(err, owner, true)
		}
		p = p.Narrowed(ceiling)
	case !named:
		nc, err := noCeiling(p)
		if err != nil {
			s.log.Error("airlock bug: no-ceiling bound", "err", err)
			return nil, errorf(http.StatusInternalServerError, "internal", "internal error: the server log has the details")
		}
		if err := p.Within(nc); err != nil {
			return nil, s.exceeds(err, owner, false)
		}
	}
	return p, nil
}

// noCeiling is the bound of an inline policy when the token has no ceiling:
// no host path, no network, no host environment, no downgrade, the default
// budgets, and tools by bare name only. Bare names are looked up in the
// sandbox's PATH (/usr/local/bin, /usr/bin, /bin), which hold the host's
// programs, not its data; an absolute path could name any executable file
// on the host, so it needs a ceiling that lists it.
func noCeiling(p *policy.Policy) (*policy.Policy, error) {
	var bare []string
	for _, t := range p.AllowedTools() {
		if !strings.HasPrefix(t, "/") {
			bare = append(bare, t)
		}
	}
	return policy.New(policy.Spec{AllowedTools: bare})
}

// exceeds turns a *policy.CeilingError into the public 403. Every entry in
// it is one of the tenant's own grants (canonical); the reasons never quote
// the ceiling's grants.
func (s *Server) exceeds(err error, owner int, hasCeiling bool) *api.Error {
	var ce *policy.CeilingError
	if !errors.As(err, &ce) {
		s.log.Error("airlock bug: ceiling check returned an unexpected error", "err", err)
		return errorf(http.StatusInternalServerError, "internal", "internal error: the server log has the details")
	}
	s.log.Info("session refused: policy exceeds the ceiling", "owner", owner, "ceiling", hasCeiling, "grants", len(ce.Excess), "err", err)
	e := &api.Error{Status: http.StatusForbidden, Code: "exceeds_ceiling"}
	var named []string
	for i, x := range ce.Excess {
		reason := x.Reason
		if !hasCeiling {
			reason = noCeilingReason(x)
		}
		e.Exceeds = append(e.Exceeds, api.Excess{Key: x.Key, Entry: x.Entry, Reason: reason})
		if i < maxListed {
			named = append(named, x.Key+" "+strconv.Quote(x.Entry))
		}
	}
	list := strings.Join(named, ", ")
	if n := len(ce.Excess) - maxListed; n > 0 {
		list += " and " + strconv.Itoa(n) + " more"
	}
	if hasCeiling {
		e.Message = "the policy grants more than this token's ceiling allows: " + list + ": remove these grants (\"exceeds\" says why each one is refused) or ask the operator to widen the ceiling"
	} else {
		e.Message = "this server has no ceiling for this token, so a policy sent inline may not grant host paths, network, the server's environment, tool paths or downgrades, and its budgets are at most the defaults: " + list +
			": remove these grants; files go in the session's private workspace (relative paths), or ask the operator for a ceiling"
	}
	return e
}

// noCeilingReason explains one grant refused for want of a ceiling.
func noCeilingReason(x policy.Excess) string {
	const none = " only within an operator's ceiling, and this token has none"
	switch {
	case x.Key == policy.FSRead.String() || x.Key == policy.FSWrite.String():
		return "host paths are granted" + none + ": remove it; put files in the session's private workspace (relative paths in the files API; it is the working directory of every exec)"
	case x.Key == policy.NetHosts.String():
		return "network access is granted" + none + ": remove it"
	case x.Key == policy.AllowedTools.String():
		return "a tool's absolute path is granted" + none + ": name the tool instead (like python3); names are looked up in /usr/local/bin, /usr/bin and /bin"
	case x.Key == policy.Env.String():
		return "passing the server's own " + x.Entry + " into the sandbox is allowed" + none + ": give it a value (" + x.Entry + "=value) or remove it"
	case x.Key == "allow_downgrade":
		return "running with weaker enforcement is accepted" + none + ": remove it"
	case x.Max != "":
		b := strings.TrimPrefix(x.Key, "budget.")
		return "a budget above its default (" + b + " " + x.Max + ") is granted" + none + ": set " + b + " to at most " + x.Max
	}
	return x.Reason
}
