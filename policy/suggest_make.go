package policy

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/policy/budget"
	"github.com/airlock-sandbox/airlock/policy/hostspec"
)

// The Suggest functions: the smallest change to a policy that would allow
// one denied operation, checked before it is returned (see suggest.go).

// verified returns s when applying it to p gives a valid policy for which
// allows reports true, and the zero Suggestion otherwise.
func (p *Policy) verified(s Suggestion, allows func(*Policy) bool) Suggestion {
	if s.IsZero() || len(s.String()) > MaxSuggestionLen {
		return Suggestion{}
	}
	np, err := p.Apply(s)
	if err != nil || !allows(np) {
		return Suggestion{}
	}
	return s
}

// Suggest returns the smallest change to p that would allow what de
// denied, or the zero Suggestion when none would: the path is "/", inside
// /proc or /sys, or not absolute; the subject is granted already (what was
// refused is how it resolves, see DenyError.Hint); or the text would be
// longer than MaxSuggestionLen. de.Fix, when set, is returned as it is.
func (p *Policy) Suggest(de *DenyError) Suggestion {
	if p == nil {
		p = Default()
	}
	if de == nil {
		return Suggestion{}
	}
	if !de.Fix.IsZero() {
		return de.Fix
	}
	switch de.Cap {
	case FSRead:
		return p.SuggestRead(de.Subject)
	case FSWrite:
		return p.SuggestWrite(de.Subject, "")
	case NetHosts:
		return p.SuggestHost(de.Subject)
	case AllowedTools:
		return p.SuggestTool(de.Subject)
	}
	return Suggestion{}
}

// SuggestRead returns the change that lets the sandbox read path (canonical,
// absolute): the fs_deny entries that hide it removed, and path added to
// fs_read when no grant holds it. It returns the zero Suggestion when no
// valid change would (see Suggest).
func (p *Policy) SuggestRead(path string) Suggestion {
	if p.CanRead(path) {
		return Suggestion{}
	}
	var s Suggestion
	for _, d := range p.fsDeny {
		if within([]string{d}, path) {
			s.Changes = append(s.Changes, Change{ActionRemove, keyFSDeny, d})
		}
	}
	if !within(p.fsWrite, path) && !within(p.fsRead, path) {
		s.Changes = append(s.Changes, Change{ActionAdd, FSRead.String(), path})
		if len(s.Changes) == 1 {
			// The common case, cheaply: a new grant that no fs_deny
			// covers is valid when the entry is, and allows the read.
			return checked(s, validPath(path))
		}
	}
	return p.verified(s, func(np *Policy) bool { return np.CanRead(path) })
}

// SuggestWrite returns the change that lets the sandbox write path
// (canonical, absolute): the fs_deny and fs_protect entries that cover it
// removed, the built-in protection that covers it added to fs_unprotect,
// and root added to fs_write when no fs_write grant holds path. root is the
// folder to grant, path or an ancestor of it: a grant must exist on the
// host, so for a file not created yet it is the nearest folder that exists.
// Empty root means path. A path that fs_protect covers is never suggested
// for fs_write: the protection is what refused it.
func (p *Policy) SuggestWrite(path, root string) Suggestion {
	if p.CanWrite(path) {
		return Suggestion{}
	}
	if root == "" || !within([]string{root}, path) {
		root = path
	}
	var s Suggestion
	for _, d := range p.fsDeny {
		if within([]string{d}, path) {
			s.Changes = append(s.Changes, Change{ActionRemove, keyFSDeny, d})
		}
	}
	for _, f := range p.fsProtect {
		if within([]string{f}, path) {
			s.Changes = append(s.Changes, Change{ActionRemove, keyFSProtect, f})
		}
	}
	if !within(p.fsWrite, path) {
		s.Changes = append(s.Changes, Change{ActionAdd, FSWrite.String(), root})
	}
	np, err := p.Apply(s)
	if err != nil {
		return Suggestion{}
	}
	// A new grant brings its own built-in protections: path may lie in one.
	if pr := np.ProtectedBy(path); pr != nil && pr.Builtin {
		s.Changes = append(s.Changes, Change{ActionAdd, keyFSUnprotect, pr.Path})
	}
	return p.verified(s, func(np *Policy) bool { return np.CanWrite(path) })
}

// SuggestWriteBack returns the change that lets the copy back of a run's
// staged writes bring path (canonical, absolute, inside an fs_write grant)
// to the host, which WriteBackRefusal refused: the fs_protect or fs_deny
// entry removed, or the protected path added to fs_unprotect. A protected
// name below the top of a grant (sub/.envrc) can be unprotected only at the
// top of a grant, so the suggestion then also adds its folder (sub) to
// fs_write. It returns the zero Suggestion when no valid change would.
func (p *Policy) SuggestWriteBack(path string) Suggestion {
	if p.WriteBackRefusal(path) == "" {
		return Suggestion{}
	}
	allows := func(np *Policy) bool { return np.WriteBackRefusal(path) == "" && np.CanWrite(path) }
	var s Suggestion
	for _, f := range p.fsProtect {
		if within([]string{f}, path) {
			s.Changes = append(s.Changes, Change{ActionRemove, keyFSProtect, f})
		}
	}
	for _, d := range p.fsDeny {
		if within([]string{d}, path) {
			s.Changes = append(s.Changes, Change{ActionRemove, keyFSDeny, d})
		}
	}
	if np, err := p.Apply(s); err == nil && allows(np) {
		return p.verified(s, allows)
	}
	// The protected entry path lies in: try each ancestor of path (inside
	// the grant) as the top of a grant whose built-in entry covers path.
	g := grantOf(p.fsWrite, path)
	if g == "" {
		return Suggestion{}
	}
	for dir := g; ; {
		for _, e := range BuiltinProtected {
			pr := joinPath(dir, e.Name)
			if !within([]string{pr}, path) {
				continue
			}
			try := Suggestion{Changes: slices.Clone(s.Changes)}
			if dir != g && !slices.Contains(p.fsWrite, dir) {
				try.Changes = append(try.Changes, Change{ActionAdd, FSWrite.String(), dir})
			}
			try.Changes = append(try.Changes, Change{ActionAdd, keyFSUnprotect, pr})
			if v := p.verified(try, allows); !v.IsZero() {
				return v
			}
		}
		next, ok := childToward(dir, path)
		if !ok {
			return Suggestion{}
		}
		dir = next
	}
}

// joinPath joins a canonical folder and a relative name.
func joinPath(dir, name string) string {
	if dir == "/" {
		return "/" + name
	}
	return dir + "/" + name
}

// childToward returns the child of dir on the way to path (dir/a for
// dir/a/b), or false when path is dir or its child.
func childToward(dir, path string) (string, bool) {
	rest := strings.TrimPrefix(strings.TrimPrefix(path, dir), "/")
	first, more, ok := strings.Cut(rest, "/")
	if !ok || more == "" {
		return "", false
	}
	return joinPath(dir, first), true
}

// SuggestHost returns the change that lets the sandbox reach target
// ("host:port", as in a net_hosts denial): target added to net_hosts. It
// returns the zero Suggestion when target is not a valid net_hosts entry.
func (p *Policy) SuggestHost(target string) Suggestion {
	host, port, ok := splitTarget(target)
	if !ok {
		return Suggestion{}
	}
	// A net_hosts entry is valid on its own (no other key constrains it):
	// checking the entry is checking the policy. The egress proxy asks for
	// a suggestion at every denial, so this must stay cheap.
	pat, err := hostspec.Parse(target)
	if err != nil || textProblem(target) != "" {
		return Suggestion{}
	}
	allows := false
	if a, err := netip.ParseAddr(host); err == nil {
		allows = pat.IsAddr() && pat.MatchAddr(a, port)
	} else if n, err := hostspec.NormalizeHost(host); err == nil {
		allows = pat.Match(n, port)
	}
	return checked(Suggestion{Changes: []Change{{ActionAdd, NetHosts.String(), target}}}, allows)
}

// checked returns s when ok and its text is within MaxSuggestionLen, else
// the zero Suggestion.
func checked(s Suggestion, ok bool) Suggestion {
	if !ok || len(s.String()) > MaxSuggestionLen {
		return Suggestion{}
	}
	return s
}

// validPath reports whether path is a valid fs_read or fs_write entry on
// its own: absolute, canonical text, and not "/", /proc or /sys.
func validPath(path string) bool {
	v := &validator{}
	c, ok := v.path(item{val: path})
	return ok && c == path
}

// validTool reports whether name is a valid allowed_tools entry on its own.
func validTool(name string) bool {
	v := &validator{}
	c, ok := v.tool(item{val: name})
	return ok && c == name
}

// splitTarget splits "host:port" or "[v6]:port".
func splitTarget(target string) (host string, port uint16, ok bool) {
	i := strings.LastIndexByte(target, ':')
	if i <= 0 {
		return "", 0, false
	}
	n, err := strconv.ParseUint(target[i+1:], 10, 16)
	if err != nil || n == 0 {
		return "", 0, false
	}
	host = target[:i]
	if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
	}
	return host, uint16(n), host != ""
}

// SuggestTool returns the change that lets the sandbox run name (a bare
// tool name or an absolute path): name added to allowed_tools. It returns
// the zero Suggestion when name is allowed already or is not a valid
// allowed_tools entry.
func (p *Policy) SuggestTool(name string) Suggestion {
	if p.AllowsTool(name) {
		return Suggestion{}
	}
	// Like a host, a tool entry is valid on its own.
	return checked(Suggestion{Changes: []Change{{ActionAdd, AllowedTools.String(), name}}}, validTool(name))
}

// SuggestTools returns the change that adds every name of names that p does
// not allow yet to allowed_tools, or the zero Suggestion when that would not
// be valid.
func (p *Policy) SuggestTools(names ...string) Suggestion {
	var s Suggestion
	for _, n := range names {
		if !p.AllowsTool(n) && !slices.ContainsFunc(s.Changes, func(c Change) bool { return c.Value == n }) {
			s.Changes = append(s.Changes, Change{ActionAdd, AllowedTools.String(), n})
		}
	}
	ok := !s.IsZero()
	for _, c := range s.Changes {
		ok = ok && validTool(c.Value)
	}
	return checked(s, ok)
}

// SuggestBudget returns the change that raises budget l to twice its value
// in p (enough when the work needed up to twice as much), capped at the
// largest value a policy may set, or the zero Suggestion when l is at that
// bound already. Raising max_write past max_memory raises max_memory too,
// since staged writes are held in memory.
func (p *Policy) SuggestBudget(l budget.Limit) Suggestion {
	if !slices.Contains(budgetKeys, l) {
		return Suggestion{}
	}
	old := limitValue(p.limits, l)
	v := min(roundLimit(l, 2*old), limitValue(Bounds(), l))
	if v <= old {
		return Suggestion{}
	}
	s := Suggestion{Changes: []Change{{ActionRaise, string(l), formatLimit(l, v)}}}
	ok := checkLimit(l, v) == ""
	if l == budget.MaxWrite && v > p.limits.Memory {
		// The only rule that ties two budgets: max_write <= max_memory.
		s.Changes = append(s.Changes, Change{ActionRaise, string(budget.MaxMemory), formatLimit(budget.MaxMemory, v)})
		ok = ok && checkLimit(budget.MaxMemory, v) == ""
	}
	return checked(s, ok)
}

// roundLimit rounds a doubled duration up to a whole millisecond so that it
// reads well ("600ms", not "600.000002ms"); other limits are whole already.
func roundLimit(l budget.Limit, v int64) int64 {
	if l == budget.MaxWall || l == budget.MaxCPU {
		ms := int64(time.Millisecond)
		return (v + ms - 1) / ms * ms
	}
	return v
}
