package policy

import (
	"errors"
	"slices"
	"strconv"
	"strings"
)

// A ceiling is a policy used as an upper bound: an operator writes one, and
// every policy a tenant sends must lie within it. It grants nothing by
// itself; a grant of the ceiling reaches a sandbox only when the tenant's
// policy asks for it.

// ErrExceedsCeiling is matched (errors.Is) by every *CeilingError.
var ErrExceedsCeiling = errors.New("policy: exceeds the ceiling")

// Keys of budget entries in an Excess are "budget." followed by the budget
// key, like "budget.max_wall".
const budgetKeyPrefix = "budget."

// Excess is one grant of a policy that its ceiling does not cover.
type Excess struct {
	Key    string // the policy-file key: "fs_read", "net_hosts", "env", "allow_downgrade", "budget.max_wall", ...
	Entry  string // the grant in canonical form: a path, a host pattern, a tool, a variable name or a budget value
	Reason string // why the ceiling does not cover it, and what to do; never quotes the ceiling's own grants
	Max    string // for a budget, the ceiling's value in policy-file syntax ("10m"); "" for other keys
}

// CeilingError lists every grant of a policy that exceeds its ceiling, in
// the order of the policy file's keys and, within a key, in canonical order.
type CeilingError struct {
	Excess []Excess // never empty
}

// maxShown bounds how many grants Error names; Excess holds all of them.
const maxShown = 5

// Error names the grants that exceed the ceiling, the first few of them
// with their reasons.
func (e *CeilingError) Error() string {
	var b strings.Builder
	b.WriteString("policy: ")
	b.WriteString(strconv.Itoa(len(e.Excess)))
	b.WriteString(" grants exceed the ceiling: ")
	for i, x := range e.Excess {
		if i == maxShown {
			b.WriteString("; and " + strconv.Itoa(len(e.Excess)-maxShown) + " more")
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(x.Key + " " + strconv.Quote(x.Entry) + ": " + x.Reason)
	}
	return b.String()
}

// Is reports whether target is ErrExceedsCeiling.
func (e *CeilingError) Is(target error) bool { return target == ErrExceedsCeiling }

// Within returns nil when p grants nothing beyond ceiling, and otherwise a
// *CeilingError naming every grant of p that exceeds it:
//
//   - each fs_read path lies inside an fs_read or fs_write path of the
//     ceiling, and each fs_write path inside an fs_write path of the ceiling
//     (pathspec.Within: lexical, "/data" holds "/data/x", not "/database").
//     Lexical is enough because the sandbox refuses a grant whose path runs
//     through a symlink, so "/data/link" cannot lead out of "/data";
//   - each net_hosts pattern is within a net_hosts pattern of the ceiling
//     (hostspec.Pattern.Within: names, wildcards, addresses and ports);
//   - each allowed_tools entry is in the ceiling's allowed_tools, exactly: a
//     bare name is covered by the same bare name, an absolute path by the
//     same path. A bare name never covers a path: "python3" is whatever the
//     sandbox's PATH finds, which a policy cannot know, so a ceiling that
//     means /usr/bin/python3 must list it;
//   - each env entry that passes a variable through from the host (NAME,
//     no value) is listed the same way, as a pass-through, in the ceiling's
//     env; entries with a value (NAME=value) reveal nothing of the host and
//     are always allowed;
//   - every budget (all of them, defaults included) is at most the
//     ceiling's; LowerDefaults first lowers the defaults p did not set;
//   - each allow_downgrade entry is in the ceiling's allow_downgrade;
//   - a rootfs is the ceiling's rootfs (none uses the host's base);
//   - no grant lies inside one of the ceiling's fs_deny paths, and each
//     fs_unprotect entry (which makes a protected path writable) lies
//     inside one of the ceiling's fs_unprotect entries. fs_deny and
//     fs_protect only narrow, and are always allowed; Narrowed adds the
//     ceiling's own to p.
//
// A nil ceiling or a nil p stands for Default(). Reasons never quote the
// ceiling's paths, hosts or tools, so a tenant learns only which of its own
// grants were refused; budget reasons do give the ceiling's value, which is
// the limit to write.
func (p *Policy) Within(ceiling *Policy) error {
	if p == nil {
		p = Default()
	}
	if ceiling == nil {
		ceiling = Default()
	}
	var ex []Excess
	add := func(key, entry, reason string) { ex = append(ex, Excess{Key: key, Entry: entry, Reason: reason}) }
	for _, r := range p.fsRead {
		if !within(ceiling.fsRead, r) && !within(ceiling.fsWrite, r) {
			add(FSRead.String(), r, "is not inside a path the ceiling lets you read: remove it, or ask the operator to allow it")
		}
	}
	for _, w := range p.fsWrite {
		if !within(ceiling.fsWrite, w) {
			add(FSWrite.String(), w, "is not inside a path the ceiling lets you write: remove it, or ask the operator to allow it")
		}
	}
	for _, g := range append(slices.Clone(p.fsRead), p.fsWrite...) {
		if within(ceiling.fsDeny, g) {
			add("fs_read/fs_write", g, "lies inside a path the ceiling hides (fs_deny): remove it")
		}
	}
	for _, u := range p.fsUnprotect {
		if !within(ceiling.fsUnprotect, u) {
			add("fs_unprotect", u, "would make a protected path writable, and the ceiling does not allow that: remove it, or ask the operator to allow it")
		}
	}
	for _, h := range p.netHosts {
		if !slices.ContainsFunc(ceiling.netHosts, h.Within) {
			add(NetHosts.String(), h.String(), "the ceiling grants no pattern that holds every host and port of this one: remove it, or ask the operator to allow it")
		}
	}
	// Tools, env and downgrades are kept sorted (canonicalize), so a
	// policy of many entries costs n log m here, not n*m.
	for _, t := range p.tools {
		if _, ok := slices.BinarySearch(ceiling.tools, t); !ok {
			add(AllowedTools.String(), t, "is not an allowed tool of the ceiling (bare names and absolute paths are compared exactly): remove it, or ask the operator to allow it")
		}
	}
	for _, e := range p.env {
		if !e.HasValue && !passesThrough(ceiling.env, e.Name) {
			add(Env.String(), e.Name, "would pass the server's own "+e.Name+" into the sandbox, and the ceiling does not allow that: give it a value (NAME=value), or ask the operator to allow it")
		}
	}
	// A credential names one of the server's own environment variables:
	// only the operator's, exactly as the ceiling lists it.
	for _, c := range p.credentials {
		if !slices.Contains(ceiling.credentials, c) {
			add("credentials", c.String(), "would send the value of the server's "+c.Env+" as "+c.Header+" to "+c.Host+", and the ceiling lists no such credential: remove it, or ask the operator to add it")
		}
	}
	for _, k := range budgetKeys {
		v, max := limitValue(p.limits, k), limitValue(ceiling.limits, k)
		if v > max {
			what := ""
			if !p.explicit.has(k) {
				what = " (the default, as the policy does not set it)"
			}
			m := formatLimit(k, max)
			add(budgetKeyPrefix+string(k), formatLimit(k, v), "is above the ceiling's "+string(k)+" "+m+what+": set "+string(k)+" to at most "+m)
			ex[len(ex)-1].Max = m
		}
	}
	for _, d := range p.downgrades {
		if _, ok := slices.BinarySearch(ceiling.downgrades, d); !ok {
			add("allow_downgrade", string(d), "the ceiling does not accept running without "+string(d)+": remove it, or ask the operator to allow it")
		}
	}
	if p.rootfs != "" && p.rootfs != ceiling.rootfs {
		// An environment is a tree of the server's files the sandbox reads:
		// only the one the operator names.
		add("rootfs", p.rootfs, "the ceiling offers no such environment: remove rootfs, or ask the operator for it")
	}
	if len(ex) == 0 {
		return nil
	}
	return &CeilingError{Excess: ex}
}

// passesThrough reports whether env, sorted by name, passes name through
// from the host (lists it without a value).
func passesThrough(env []EnvVar, name string) bool {
	i, ok := slices.BinarySearchFunc(env, name, func(e EnvVar, n string) int { return strings.Compare(e.Name, n) })
	return ok && !env[i].HasValue
}

// LowerDefaults returns p with each budget p left at its default lowered to
// ceiling's when ceiling's is lower, so that a policy which does not mention
// a budget fits a ceiling that sets a smaller one. Budgets p sets itself are
// kept, for Within to judge. p does not change; a nil p stands for
// Default() and a nil ceiling changes nothing.
func (p *Policy) LowerDefaults(ceiling *Policy) *Policy {
	if p == nil {
		p = Default()
	}
	c := p.clone()
	if ceiling == nil {
		return c
	}
	for _, k := range budgetKeys {
		if max := limitValue(ceiling.limits, k); !p.explicit.has(k) && limitValue(p.limits, k) > max {
			c.limits = setLimit(c.limits, k, max)
		}
	}
	return c
}

// Narrowed returns p with the ceiling's fs_deny paths that lie inside p's
// grants, and its fs_protect paths that lie inside p's fs_write grants,
// added: what the operator hides or protects stays so in every session,
// whether or not the tenant knows of it. p does not change; a nil ceiling
// changes nothing.
func (p *Policy) Narrowed(ceiling *Policy) *Policy {
	c := p.clone()
	if ceiling == nil {
		return c
	}
	grants := append(slices.Clone(p.fsRead), p.fsWrite...)
	for _, d := range ceiling.fsDeny {
		if within(grants, d) && !contains(grants, d) && !contains(c.fsDeny, d) {
			c.fsDeny = append(c.fsDeny, d)
		}
	}
	for _, f := range ceiling.fsProtect {
		if within(p.fsWrite, f) && !contains(p.fsWrite, f) && !contains(c.fsProtect, f) {
			c.fsProtect = append(c.fsProtect, f)
		}
	}
	c.canonicalize()
	return c
}
