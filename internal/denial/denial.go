// Package denial turns a refusal into the denial airlock shows for it, in
// one place. A *policy.DenyError or *budget.ExhaustedError (what the
// policy, the guard and the budget meter return) becomes an api.Denial and
// the policy change that would allow it; an audit event becomes the same
// pair, and the pair becomes an audit event. The HTTP server, the MCP
// server and the sandbox's reports all use it, so one refusal reads the
// same in a 403, in an MCP tool result, in a report and in the audit log.
//
// It keeps the operator's advice apart from what the agent may see: the
// Denial (its Hint says what to do within the grants and never widens the
// policy) is for anyone; the Fix widens the policy, and only Operator puts
// it in the form a report or an error carries, which the servers do only
// when the operator allows it (--agent-advice). So an agent steered by an
// injected instruction is not told which grant to ask for.
//
// It imports api, audit, policy/... and the standard library.
package denial

import (
	"errors"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
)

// Refusal is one refused operation: what anyone may be told, and what only
// the operator may be.
type Refusal struct {
	// Denial is the refusal as reports and errors show it; its Count is 0.
	Denial api.Denial
	// Fix is the policy change that would allow the operation: the
	// operator's advice. Zero when no change would (a symlink out of a
	// grant, a protected path).
	Fix policy.Suggestion
}

// Of returns the refusal that err reports: a *policy.DenyError or a
// *budget.ExhaustedError in its chain. p is the policy in force, which
// the Fix widens. op and target name what the caller attempted ("read" and
// the path, say): they fill a budget refusal, which does not say what it
// refused, and the Op of a DenyError that has none. The message is the
// DenyError's reason, else its text; a budget refusal's is "LIMIT
// exhausted", which, unlike the ExhaustedError's text, suggests no raise.
// ok is false when err is neither.
func Of(err error, op, target string, p *policy.Policy) (r Refusal, ok bool) {
	var de *policy.DenyError
	if errors.As(err, &de) {
		d := api.Denial{Layer: Layer(de.Cap), Op: de.Op, Target: de.Subject, Rule: de.Cap.String(), Message: de.Reason, Hint: de.Hint}
		if d.Op == "" {
			d.Op = op
		}
		if d.Message == "" {
			d.Message = de.Error()
		}
		return Refusal{Denial: d, Fix: p.Suggest(de)}, true
	}
	var ee *budget.ExhaustedError
	if errors.As(err, &ee) {
		rule := string(ee.Limit)
		d := api.Denial{Layer: audit.LayerBudget, Op: op, Target: target, Rule: rule, Message: rule + " exhausted"}
		if ee.Limit == budget.SessionLifetime || ee.Limit == budget.SessionClosed {
			return SessionEnded(op, target, ee.Limit), true
		}
		return Refusal{Denial: d, Fix: p.SuggestBudget(ee.Limit)}, true
	}
	return Refusal{}, false
}

// SessionEnded is the refusal of any operation on a session that has
// ended, because of why (session_lifetime, session_closed, or the budget
// that halted it): the same for every tool, with what to do next.
func SessionEnded(op, target string, why budget.Limit) Refusal {
	msg := "the session has ended (" + string(why) + ")"
	switch why {
	case budget.SessionLifetime:
		msg = "the session has ended: its lifetime ran out (extend it before its deadline next time)"
	case budget.SessionClosed:
		msg = "the session has ended: it was closed"
	}
	return Refusal{Denial: api.Denial{Layer: audit.LayerBudget, Op: op, Target: target, Rule: string(why), Message: msg,
		Hint: "start a new MCP session, or create a new session over the HTTP API, for a fresh sandbox"}}
}

// Layer is the enforcement layer that refuses what c does not grant: fs
// for fs_read and fs_write, net for net_hosts, exec for allowed_tools,
// kernel for anything else.
func Layer(c policy.Capability) string {
	switch c {
	case policy.FSRead, policy.FSWrite:
		return audit.LayerFS
	case policy.NetHosts:
		return audit.LayerNet
	case policy.AllowedTools:
		return audit.LayerExec
	}
	return audit.LayerKernel
}

// Operator returns r's advice as a report's or an error's operator field,
// or nil when no policy change would allow it. It widens the policy: send
// it to a client only when the operator allows it.
func (r Refusal) Operator() *api.Operator {
	if r.Fix.IsZero() {
		return nil
	}
	return &api.Operator{Suggestions: []api.OperatorSuggestion{Suggestion(r.Denial, r.Fix)}}
}

// Suggestion is fix, the change that would allow d, as one of a report's
// operator suggestions.
func Suggestion(d api.Denial, fix policy.Suggestion) api.OperatorSuggestion {
	cs := make([]api.Change, len(fix.Changes))
	for i, c := range fix.Changes {
		cs[i] = api.Change{Action: string(c.Action), Key: c.Key, Value: c.Value}
	}
	return api.OperatorSuggestion{Layer: d.Layer, Op: d.Op, Target: d.Target, Rule: d.Rule, Suggestion: fix.String(), Changes: cs}
}

// Event is the audit event that records r at t.
func (r Refusal) Event(t time.Time) audit.Event {
	d := r.Denial
	return audit.Event{Time: t, Kind: audit.Deny, Layer: d.Layer, Op: d.Op, Target: d.Target, Rule: d.Rule, Message: d.Message,
		Suggestion: r.Fix.String(), Hint: d.Hint}
}

// FromEvent is the refusal that e records. Its Fix is e's suggestion
// parsed, or zero when that does not parse: one cut by the denial log's
// bounds would not work.
func FromEvent(e audit.Event) Refusal {
	r := Refusal{Denial: api.Denial{Layer: e.Layer, Op: e.Op, Target: e.Target, Rule: e.Rule, Message: e.Message, Hint: e.Hint}}
	if e.Suggestion != "" {
		if s, err := policy.ParseSuggestion(e.Suggestion); err == nil {
			r.Fix = s
		}
	}
	return r
}
