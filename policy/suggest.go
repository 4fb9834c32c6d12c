package policy

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/airlock-sandbox/airlock/policy/budget"
)

// Suggestions are advice for the operator, who writes the policy. Every
// change a Suggestion holds widens the policy: it grants more, narrows
// less or raises a budget. A sandboxed program that reads one learns how to
// ask for more, and an agent steered by an injected instruction may well
// ask, so the front ends that answer the agent (the API server, the MCP
// server, the egress proxy's refusals) leave them out unless the operator
// opts in. Hints (DenyError.Hint) are the other kind of advice: what the
// program can do within its grants; they are always safe to show it.
//
// A Suggestion is built by (*Policy).Suggest and its relatives only when
// the policy it makes validates and allows the operation: changes that
// other keys constrain (removing fs_deny, protections, new fs_write grants)
// are applied to the policy and checked; a single entry that nothing else
// constrains (a host, a tool, a read grant, a budget) is checked on its
// own, which is the same and much cheaper. So every suggestion airlock
// prints parses and works (as far as the policy can tell: the sandbox may
// still refuse a path that does not exist on the host). The tests apply
// each kind to check the cheap checks agree.

// Action is what a Change does to its key.
type Action string

// The actions of a Change.
const (
	ActionAdd    Action = "add"    // add Value to the list Key
	ActionRemove Action = "remove" // remove Value from the list Key
	ActionRaise  Action = "raise"  // set the budget Key to Value, above its current value
)

// Change is one edit of a policy file.
type Change struct {
	Action Action `json:"action"`
	// Key is the policy-file key: a list (fs_read, fs_write, fs_deny,
	// fs_protect, fs_unprotect, net_hosts, allowed_tools, env,
	// allow_downgrade) or a budget limit (max_wall, max_ops, ...).
	Key string `json:"key"`
	// Value is the list entry, or the new budget in policy-file syntax
	// ("1m", "2MiB", "2000").
	Value string `json:"value"`
}

// Suggestion is a change to a policy that would allow an operation it
// denied or halted, for the operator (see above). String renders it, for
// example `add "api.example.com:443" to net_hosts`, and ParseSuggestion
// reads that text back. The zero Suggestion suggests nothing.
type Suggestion struct {
	Changes []Change // applied together, in order; nil suggests nothing
}

// IsZero reports whether s suggests nothing.
func (s Suggestion) IsZero() bool { return len(s.Changes) == 0 }

// MaxSuggestionLen bounds the text of a suggestion. A suggestion that would
// be longer (a very long path or host) is not made: a cut one would neither
// parse nor work.
const MaxSuggestionLen = 256

// String renders s as text: each change as `add "V" to KEY`,
// `remove "V" from KEY` or `raise KEY to "V"`, joined by " and ". The zero
// Suggestion renders as "".
func (s Suggestion) String() string {
	parts := make([]string, len(s.Changes))
	for i, c := range s.Changes {
		q := strconv.Quote(c.Value)
		switch c.Action {
		case ActionAdd:
			parts[i] = "add " + q + " to " + c.Key
		case ActionRemove:
			parts[i] = "remove " + q + " from " + c.Key
		case ActionRaise:
			parts[i] = "raise " + c.Key + " to " + q
		default:
			parts[i] = string(c.Action) + " " + c.Key + " " + q
		}
	}
	return strings.Join(parts, " and ")
}

// Keys of the lists that narrow grants; they have no Capability.
const (
	keyFSDeny      = "fs_deny"
	keyFSProtect   = "fs_protect"
	keyFSUnprotect = "fs_unprotect"
)

// listKeys are the policy keys that hold lists.
var listKeys = []string{"fs_read", "fs_write", "fs_deny", "fs_protect", "fs_unprotect", "net_hosts", "allowed_tools", "env", "allow_downgrade"}

// ParseSuggestion reads the text String writes. It is strict: one space
// between words, values quoted as strconv.Quote writes them, known keys
// only, and add and remove only for lists, raise only for budgets.
func ParseSuggestion(text string) (Suggestion, error) {
	fail := func(format string, args ...any) (Suggestion, error) {
		return Suggestion{}, fmt.Errorf("suggestion %q: "+format, append([]any{text}, args...)...)
	}
	if text == "" {
		return fail("is empty")
	}
	var s Suggestion
	rest := text
	for {
		word, after, ok := strings.Cut(rest, " ")
		if !ok {
			return fail("ends after %q: want add, remove or raise with a value and a key", word)
		}
		var c Change
		var err error
		switch Action(word) {
		case ActionAdd, ActionRemove:
			c.Action = Action(word)
			if c.Value, after, err = quoted(after); err != nil {
				return fail("%v", err)
			}
			prep := " to "
			if c.Action == ActionRemove {
				prep = " from "
			}
			if after, ok = strings.CutPrefix(after, prep); !ok {
				return fail("want %q after the value", strings.TrimSpace(prep))
			}
			c.Key, after = word1(after)
			if !slices.Contains(listKeys, c.Key) {
				return fail("%q is not a policy list: use one of %s", c.Key, strings.Join(listKeys, ", "))
			}
		case ActionRaise:
			c.Action = ActionRaise
			c.Key, after = word1(after)
			if !slices.Contains(budgetKeys, budget.Limit(c.Key)) {
				return fail("%q is not a budget: use one of %s", c.Key, strings.Join(budgetKeyStrings(), ", "))
			}
			if after, ok = strings.CutPrefix(after, " to "); !ok {
				return fail(`want "to" after %s`, c.Key)
			}
			if c.Value, after, err = quoted(after); err != nil {
				return fail("%v", err)
			}
			if _, err := parseLimit(budget.Limit(c.Key), c.Value); err != nil {
				return fail("%v", err)
			}
		default:
			return fail("%q is not an action: use add, remove or raise", word)
		}
		s.Changes = append(s.Changes, c)
		if after == "" {
			return s, nil
		}
		if rest, ok = strings.CutPrefix(after, " and "); !ok {
			return fail(`want " and " between changes, got %q`, after)
		}
	}
}

// word1 splits s at its first space, keeping the space in rest.
func word1(s string) (word, rest string) {
	if i := strings.IndexByte(s, ' '); i >= 0 {
		return s[:i], s[i:]
	}
	return s, ""
}

// quoted reads one Go-quoted string at the start of s.
func quoted(s string) (val, rest string, err error) {
	q, err := strconv.QuotedPrefix(s)
	if err != nil || !strings.HasPrefix(q, `"`) {
		return "", "", errors.New("want a double-quoted value")
	}
	val, err = strconv.Unquote(q)
	if err != nil {
		return "", "", errors.New("want a double-quoted value")
	}
	return val, s[len(q):], nil
}

// parseLimit reads a budget value in policy-file syntax.
func parseLimit(k budget.Limit, s string) (int64, error) {
	switch k {
	case budget.MaxWall, budget.MaxCPU:
		d, err := ParseDuration(s)
		return int64(d), err
	case budget.MaxOps, budget.MaxPids:
		if !allDigits(s) {
			return 0, fmt.Errorf("%s must be a whole number", k)
		}
		return parseDigits(s)
	}
	return ParseSize(s)
}

// Apply returns a new policy made of p with the changes of s, validated
// like a policy file; p itself never changes. Removing an entry that p does
// not hold is an error, as is raising a budget to a value that is not above
// p's. Budgets p set explicitly stay explicit, and a raised budget becomes
// explicit.
func (p *Policy) Apply(s Suggestion) (*Policy, error) {
	if p == nil {
		p = Default()
	}
	lists := map[string][]string{
		"fs_read": p.fsRead, "fs_write": p.fsWrite, "fs_deny": p.fsDeny, "fs_protect": p.fsProtect,
		"fs_unprotect": p.fsUnprotect, "net_hosts": hostStrings(p.netHosts), "allowed_tools": p.tools,
		"env": envStrings(p.env), "allow_downgrade": downgradeValues(p.downgrades),
	}
	limits := map[budget.Limit]int64{}
	for _, k := range budgetKeys {
		if p.explicit.has(k) {
			limits[k] = limitValue(p.limits, k)
		}
	}
	for _, c := range s.Changes {
		switch c.Action {
		case ActionAdd:
			if _, ok := lists[c.Key]; !ok {
				return nil, fmt.Errorf("policy: apply %s: %q is not a policy list", s, c.Key)
			}
			lists[c.Key] = append(slices.Clone(lists[c.Key]), c.Value)
		case ActionRemove:
			l, ok := lists[c.Key]
			i := slices.Index(l, c.Value)
			if !ok || i < 0 {
				return nil, fmt.Errorf("policy: apply %s: %s holds no %q", s, c.Key, c.Value)
			}
			lists[c.Key] = slices.Delete(slices.Clone(l), i, i+1)
		case ActionRaise:
			k := budget.Limit(c.Key)
			if !slices.Contains(budgetKeys, k) {
				return nil, fmt.Errorf("policy: apply %s: %q is not a budget", s, c.Key)
			}
			v, err := parseLimit(k, c.Value)
			if err != nil {
				return nil, fmt.Errorf("policy: apply %s: %w", s, err)
			}
			if old := limitValue(p.limits, k); v <= old {
				return nil, fmt.Errorf("policy: apply %s: %s is %s already", s, k, formatLimit(k, old))
			}
			limits[k] = v
		default:
			return nil, fmt.Errorf("policy: apply %s: %q is not an action", s, c.Action)
		}
	}
	d := draft{
		fsRead:      specItems(lists["fs_read"], "fs_read"),
		fsWrite:     specItems(lists["fs_write"], "fs_write"),
		fsDeny:      specItems(lists["fs_deny"], "fs_deny"),
		fsProtect:   specItems(lists["fs_protect"], "fs_protect"),
		fsUnprotect: specItems(lists["fs_unprotect"], "fs_unprotect"),
		netHosts:    specItems(lists["net_hosts"], "net_hosts"),
		tools:       specItems(lists["allowed_tools"], "allowed_tools"),
		env:         specItems(lists["env"], "env"),
		downgrades:  specItems(lists["allow_downgrade"], "allow_downgrade"),
	}
	for _, k := range budgetKeys {
		if v, ok := limits[k]; ok {
			d.limits = append(d.limits, limitItem{key: k, val: v, label: string(k)})
		}
	}
	np, errs := validate(d, nil)
	if len(errs) > 0 {
		return nil, join(errs)
	}
	np.source = p.source
	return np, nil
}

func downgradeValues(ds []Downgrade) []string {
	s := make([]string, len(ds))
	for i, d := range ds {
		s[i] = string(d)
	}
	return s
}
