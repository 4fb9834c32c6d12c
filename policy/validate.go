package policy

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/policy/budget"
	"github.com/airlock-sandbox/airlock/policy/hostspec"
	"github.com/airlock-sandbox/airlock/policy/pathspec"
)

// Parse, New and With all build a draft and hand it to validate, so a grant
// is checked by the same code whether it came from a file, a Spec or a flag.

// item is one grant as written, with where it came from.
type item struct {
	val       string
	line, col int    // position in the policy file; 0 when not from a file
	label     string // how errors name it: `fs_read entry`, `fs_read` or `--fs-read`
}

// limitItem is one budget as written.
type limitItem struct {
	key       budget.Limit
	val       int64
	line, col int
	label     string // `max_wall` or `--max-wall`
}

// draft is what a file, a Spec or flags asked for, not yet validated.
type draft struct {
	file        string // names the source in ParseErrors
	baseDir     string // absolute folder relative paths resolve against; "" refuses them
	fsRead      []item
	fsWrite     []item
	fsDeny      []item
	fsProtect   []item
	fsUnprotect []item
	netHosts    []item
	tools       []item
	env         []item
	credentials []item // HOST:HEADER=ENV
	downgrades  []item
	limits      []limitItem
	rootfs      []item // at most one: the environment's root filesystem
}

// limitSet records which budgets were set explicitly, one bit per budgetKeys index.
type limitSet uint16

func (s limitSet) has(k budget.Limit) bool { return s&limitBit(k) != 0 }

func limitBit(k budget.Limit) limitSet {
	return limitSet(1) << slices.Index(budgetKeys, k)
}

// maxEntryLen bounds every string grant; PATH_MAX on Linux is 4096.
const maxEntryLen = 4096

// maxErrors bounds how many problems one call reports.
const maxErrors = 100

// validate checks every entry of d and returns the policy made of base's
// grants (nil base: none, default budget) plus d's, or every problem found.
// When base is non-nil, d may lower but never raise a budget base set
// explicitly.
func validate(d draft, base *Policy) (*Policy, []*ParseError) {
	v := &validator{d: d}
	p := &Policy{limits: budget.Limits{}.WithDefaults()}
	if base != nil {
		p = base.clone()
	}
	// A relative base would make grants depend on the working directory of
	// whoever enforces the policy; refuse it rather than guess.
	if d.baseDir != "" && (!strings.HasPrefix(d.baseDir, "/") || strings.IndexByte(d.baseDir, 0) >= 0) {
		v.errorf(0, 0, "base folder %q is not an absolute path: pass the absolute folder of the policy file", d.baseDir)
		d.baseDir = ""
	}
	for _, it := range d.fsRead {
		if c, ok := v.grant(p, it); ok {
			p.fsRead = append(p.fsRead, c)
		}
	}
	for _, it := range d.fsWrite {
		if c, ok := v.grant(p, it); ok {
			p.fsWrite = append(p.fsWrite, c)
		}
	}
	v.placements(p)
	// Narrowing entries are checked against the grants once all are known.
	deny := v.paths(d.fsDeny)
	protect := v.paths(d.fsProtect)
	unprotect := v.paths(d.fsUnprotect)
	// hostspec owns the host grammar (wildcards, ports, IDNA); here we only
	// add the position and the field name to its verdict.
	for _, it := range d.netHosts {
		if !v.str(it) {
			continue
		}
		pat, err := hostspec.Parse(it.val)
		if err != nil {
			v.itemf(it, "%v", err)
			continue
		}
		p.netHosts = append(p.netHosts, pat)
	}
	for _, it := range d.tools {
		if c, ok := v.tool(it); ok {
			p.tools = append(p.tools, c)
		}
	}
	p.env = v.envs(p.env, d.env) // duplicates are checked against base's entries too
	v.credentials(p, d.credentials)
	for _, it := range d.downgrades {
		if !v.str(it) {
			continue
		}
		dg := Downgrade(it.val)
		if !slices.Contains(downgradeNames, dg) {
			v.itemf(it, "is not a known downgrade%s: use one of %s", suggest(it.val, downgradeStrings()), strings.Join(downgradeStrings(), ", "))
			continue
		}
		p.downgrades = append(p.downgrades, dg)
	}
	v.rootfs(p, d.rootfs)
	v.limits(p, base)
	v.writeBudget(p)
	v.narrowing(p, deny, protect, unprotect)
	// All or nothing: a half-valid policy must never reach a sandbox.
	if len(v.errs) > 0 {
		return nil, v.sorted()
	}
	p.canonicalize()
	return p, nil
}

// validator collects the problems of one draft.
type validator struct {
	d    draft
	errs []*ParseError
}

func (v *validator) errorf(line, col int, format string, args ...any) {
	v.errs = append(v.errs, &ParseError{File: v.d.file, Line: line, Col: col, Msg: fmt.Sprintf(format, args...)})
}

// itemf reports a problem with one entry, naming it as `label "value": problem`.
func (v *validator) itemf(it item, format string, args ...any) {
	v.errorf(it.line, it.col, "%s %s: %s", it.label, strconv.Quote(it.val), fmt.Sprintf(format, args...))
}

// sorted returns the problems ordered by position, at most maxErrors of them.
func (v *validator) sorted() []*ParseError {
	slices.SortStableFunc(v.errs, func(a, b *ParseError) int {
		return cmp.Or(cmp.Compare(a.Line, b.Line), cmp.Compare(a.Col, b.Col))
	})
	if len(v.errs) > maxErrors {
		last := v.errs[maxErrors-1]
		v.errs = append(v.errs[:maxErrors-1], &ParseError{File: last.File, Line: last.Line, Col: last.Col,
			Msg: fmt.Sprintf("%d more problems not shown: fix the ones above first", len(v.errs)-maxErrors+1)})
	}
	return v.errs
}

// str reports whether it.val is usable text, reporting the problem if not.
func (v *validator) str(it item) bool {
	if msg := textProblem(it.val); msg != "" {
		v.itemf(it, "%s", msg)
		return false
	}
	return true
}

// textProblem returns what makes s unusable as a grant, or "".
func textProblem(s string) string {
	if s == "" {
		return "is empty: write a value or remove the entry"
	}
	if len(s) > maxEntryLen {
		return fmt.Sprintf("is longer than %d bytes: shorten it", maxEntryLen)
	}
	if !utf8.ValidString(s) {
		return "is not valid UTF-8: rewrite it as UTF-8 text"
	}
	for _, r := range s {
		if msg := runeProblem(r); msg != "" {
			return "contains " + msg + ": remove it"
		}
	}
	return ""
}

// runeProblem names r when it has no business in a policy: NUL, control
// characters, and invisible formatting or line-separator characters that
// could make an entry look different from what it is.
func runeProblem(r rune) string {
	switch {
	case r == 0:
		return "a NUL byte"
	case unicode.Is(unicode.Cc, r):
		return fmt.Sprintf("control character %U", r)
	case unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp):
		return fmt.Sprintf("invisible formatting character %U", r)
	}
	return ""
}

// path canonicalizes one fs_read or fs_write entry.
func (v *validator) path(it item) (string, bool) {
	c, ok := v.abs(it)
	if !ok {
		return "", false
	}
	if msg := hostPathProblem(c); msg != "" {
		v.itemf(it, "%s", msg)
		return "", false
	}
	return c, true
}

// abs canonicalizes one path entry: absolute, or relative to the base
// folder; ~ is refused, never expanded.
func (v *validator) abs(it item) (string, bool) {
	if !v.str(it) {
		return "", false
	}
	// A shell would expand "~"; we do not, and a folder literally named
	// "~" under the base is never what the author meant.
	if strings.HasPrefix(it.val, "~") {
		v.itemf(it, "~ is not expanded: write the absolute path")
		return "", false
	}
	if !strings.HasPrefix(it.val, "/") && v.d.baseDir == "" {
		v.itemf(it, "relative path with no base folder: use an absolute path")
		return "", false
	}
	// Canonicalize before the checks below, so "/data/../proc" is judged
	// as the /proc it is.
	c, err := pathspec.Abs(v.d.baseDir, it.val)
	if err != nil {
		v.itemf(it, "%v", err)
		return "", false
	}
	return c, true
}

// rootfs sets p's environment from its one item, if any: an absolute
// folder other than /, canonicalized like a grant. A policy that already
// has one (a file under flags) keeps it; naming another is an error.
func (v *validator) rootfs(p *Policy, items []item) {
	for _, it := range items {
		c, ok := v.abs(it)
		if !ok {
			continue
		}
		switch {
		case c == "/":
			v.itemf(it, "/ is the host's own root, the default: leave rootfs out to use it")
		case p.rootfs != "" && p.rootfs != c:
			v.itemf(it, "the policy already runs in the environment %s: one policy has one rootfs", p.rootfs)
		default:
			p.rootfs = c
		}
	}
}

// hostPathProblem returns why canonical path c may never be granted, or "".
// "/" would expose every secret on the host; host /proc exposes other
// processes' memory and environment, and /sys the kernel's knobs. The
// sandbox gets its own /proc mount, so granting either is always a mistake.
func hostPathProblem(c string) string {
	if c == "/" {
		return "/ would grant the whole host (/root, the docker socket, ...): grant specific folders"
	}
	if pathspec.Within("/proc", c) || pathspec.Within("/sys", c) {
		return "the sandbox mounts its own /proc; /sys is never granted: remove it"
	}
	return ""
}

// tool validates one allowed_tools entry: a bare name or an absolute path.
func (v *validator) tool(it item) (string, bool) {
	if !v.str(it) {
		return "", false
	}
	s := it.val
	if strings.HasPrefix(s, "/") {
		c := pathspec.Clean(s)
		if c == "/" {
			v.itemf(it, "/ is a folder, not a tool: write the path of an executable")
			return "", false
		}
		if msg := hostPathProblem(c); msg != "" {
			v.itemf(it, "%s", msg)
			return "", false
		}
		return c, true
	}
	if strings.HasPrefix(s, "~") {
		v.itemf(it, "~ is not expanded: write the absolute path")
		return "", false
	}
	if s == "." || s == ".." || !toolName(s) {
		v.itemf(it, "is neither a tool name (letters, digits, . _ + -) nor an absolute path: write a name like python3 or a path like /usr/bin/python3")
		return "", false
	}
	return s, true
}

// toolName reports whether s matches [A-Za-z0-9._+-]+.
func toolName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(isAlnum(c) || c == '.' || c == '_' || c == '+' || c == '-') {
			return false
		}
	}
	return s != ""
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// envName reports whether s matches [A-Za-z_][A-Za-z0-9_]*.
func envName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || isAlnum(c)) || i == 0 && c >= '0' && c <= '9' {
			return false
		}
	}
	return s != ""
}

// proxyVars are set by airlock to route traffic through its egress proxy.
var proxyVars = []string{"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"}

// IsProxyVar reports whether name is one of the variables airlock sets to
// route traffic through its egress proxy (HTTP_PROXY, HTTPS_PROXY,
// ALL_PROXY, NO_PROXY, in any case): no exec may set them, and a policy
// only extends NO_PROXY (env NO_PROXY=host,...).
func IsProxyVar(name string) bool {
	return slices.ContainsFunc(proxyVars, func(p string) bool { return strings.EqualFold(p, name) })
}

// noProxyValue reports whether v is a comma-separated list of host names,
// addresses, CIDRs or .suffixes, with no white space and no "*".
func noProxyValue(v string) bool {
	if v == "" {
		return false
	}
	for _, h := range strings.Split(v, ",") {
		if h == "" || h == "*" || strings.ContainsAny(h, " \t\r\n*") {
			return false
		}
	}
	return true
}

// envs validates env entries and appends them to have, refusing a name
// that is already present.
func (v *validator) envs(have []EnvVar, items []item) []EnvVar {
	seen := make(map[string]item, len(have)+len(items))
	for _, e := range have {
		seen[e.Name] = item{}
	}
	for _, it := range items {
		if !v.str(it) {
			continue
		}
		// Only the first "=" separates: values may contain "=" themselves.
		name, val, hasVal := strings.Cut(it.val, "=")
		if !envName(name) {
			v.itemf(it, "%q is not a variable name: write NAME or NAME=value, NAME made of letters, digits and _ and not starting with a digit", name)
			continue
		}
		if strings.EqualFold(name, "NO_PROXY") {
			// Extends the list of hosts clients reach directly, which
			// starts with the sandbox's own loopback. Direct connections
			// reach nothing outside the sandbox, so this opens nothing.
			if !hasVal || !noProxyValue(val) {
				v.itemf(it, "NO_PROXY extends the hosts reached without the proxy (the sandbox's own loopback is always there): write NO_PROXY=host,host with names, addresses or .domain suffixes")
				continue
			}
			name = "NO_PROXY"
		} else if IsProxyVar(name) {
			v.itemf(it, "airlock sets %s itself to route traffic through its egress proxy: remove it", name)
			continue
		}
		// Two entries for one name would leave which value wins to the
		// enforcement layer; make the author choose.
		if prev, dup := seen[name]; dup {
			where := "already granted"
			if prev.line > 0 {
				where = fmt.Sprintf("already listed at %d:%d", prev.line, prev.col)
			} else if prev.label != "" {
				where = "listed twice"
			}
			v.itemf(it, "%s is %s: keep one", name, where)
			continue
		}
		seen[name] = it
		have = append(have, EnvVar{Name: name, Value: val, HasValue: hasVal})
	}
	return have
}

// limits checks and applies the budget items. Against a base policy, a
// budget base set explicitly may only be lowered.
func (v *validator) limits(p *Policy, base *Policy) {
	for _, li := range v.d.limits {
		shown := formatLimit(li.key, li.val)
		if msg := checkLimit(li.key, li.val); msg != "" {
			v.errorf(li.line, li.col, "%s %s %s", li.label, shown, msg)
			continue
		}
		// Defaults may be raised by flags (the file said nothing), but a
		// value the file wrote is the author's ceiling.
		if base != nil && base.explicit.has(li.key) {
			if old := limitValue(base.limits, li.key); li.val > old {
				v.errorf(li.line, li.col, "%s %s would loosen the policy file's %s %s: edit the policy file instead",
					li.label, shown, li.key, formatLimit(li.key, old))
				continue
			}
		}
		p.limits = setLimit(p.limits, li.key, li.val)
		p.explicit |= limitBit(li.key)
	}
}

// downgradeNames lists the Downgrade values a policy may name.
var downgradeNames = []Downgrade{DowngradeLandlock, DowngradeMemory, DowngradeCPU, DowngradePids, DowngradeFSAudit, DowngradeProc, DowngradeNamespaces, DowngradeStagedWrites}

func downgradeStrings() []string {
	s := make([]string, len(downgradeNames))
	for i, d := range downgradeNames {
		s[i] = string(d)
	}
	return s
}

// clone returns a deep copy of p.
func (p *Policy) clone() *Policy {
	c := *p
	c.fsRead = slices.Clone(p.fsRead)
	c.fsWrite = slices.Clone(p.fsWrite)
	c.fsDeny = slices.Clone(p.fsDeny)
	c.fsProtect = slices.Clone(p.fsProtect)
	c.fsUnprotect = slices.Clone(p.fsUnprotect)
	c.netHosts = slices.Clone(p.netHosts)
	c.credentials = slices.Clone(p.credentials)
	c.tools = slices.Clone(p.tools)
	c.env = slices.Clone(p.env)
	c.downgrades = slices.Clone(p.downgrades)
	c.placed = maps.Clone(p.placed)
	return &c
}

// canonicalize sorts every grant and drops duplicates, so two policies that
// grant the same things hold the same values.
func (p *Policy) canonicalize() {
	p.fsRead = sortedUnique(p.fsRead)
	p.fsWrite = sortedUnique(p.fsWrite)
	p.fsDeny = sortedUnique(p.fsDeny)
	p.fsProtect = sortedUnique(p.fsProtect)
	p.fsUnprotect = sortedUnique(p.fsUnprotect)
	p.tools = sortedUnique(p.tools)
	p.downgrades = sortedUnique(p.downgrades)
	slices.SortFunc(p.credentials, func(a, b Credential) int { return strings.Compare(a.String(), b.String()) })
	slices.SortFunc(p.netHosts, func(a, b hostspec.Pattern) int { return strings.Compare(a.String(), b.String()) })
	p.netHosts = slices.CompactFunc(p.netHosts, func(a, b hostspec.Pattern) bool { return a.String() == b.String() })
	slices.SortFunc(p.env, func(a, b EnvVar) int { return strings.Compare(a.Name, b.Name) })
	if len(p.netHosts) == 0 {
		p.netHosts = nil
	}
}

func sortedUnique[T cmp.Ordered](s []T) []T {
	slices.Sort(s)
	s = slices.Compact(s)
	if len(s) == 0 {
		return nil
	}
	return s
}
