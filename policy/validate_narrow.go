package policy

import (
	"strings"

	"github.com/airlock-sandbox/airlock/policy/budget"
	"github.com/airlock-sandbox/airlock/policy/pathspec"
)

// narrowEntry is one fs_deny, fs_protect or fs_unprotect entry, canonical.
type narrowEntry struct {
	it    item
	canon string
}

// paths canonicalizes narrowing entries like grants.
func (v *validator) paths(items []item) []narrowEntry {
	var out []narrowEntry
	for _, it := range items {
		if c, ok := v.path(it); ok {
			out = append(out, narrowEntry{it, c})
		}
	}
	return out
}

// narrowing checks the entries that narrow grants and adds them to p. Each
// must lie inside a grant it narrows: an entry outside every grant narrows
// nothing, which means its author misunderstood the grants.
func (v *validator) narrowing(p *Policy, deny, protect, unprotect []narrowEntry) {
	grants := append(p.FSRead(), p.fsWrite...)
	for _, e := range deny {
		switch {
		case !within(grants, e.canon):
			v.itemf(e.it, "is outside every fs_read and fs_write grant: paths outside the grants are already invisible, remove it")
		case contains(grants, e.canon):
			v.itemf(e.it, "is a grant itself: remove the grant instead")
		default:
			p.fsDeny = append(p.fsDeny, e.canon)
		}
	}
	for _, e := range protect {
		switch {
		case !within(p.fsWrite, e.canon):
			v.itemf(e.it, "is not inside an fs_write grant: everything else is read-only already, remove it")
		case contains(p.fsWrite, e.canon):
			v.itemf(e.it, "protects a whole fs_write grant: move the grant to fs_read instead")
		default:
			p.fsProtect = append(p.fsProtect, e.canon)
		}
	}
	for _, e := range unprotect {
		if !builtinPath(p.fsWrite, e.canon) {
			v.itemf(e.it, "is not on the built-in protected list of any fs_write grant: it names one of %s at the top of an fs_write grant, remove it", builtinNames())
			continue
		}
		p.fsUnprotect = append(p.fsUnprotect, e.canon)
	}
	// A grant inside a narrowed path would contradict it: say which wins.
	for _, g := range grants {
		for _, d := range p.fsDeny {
			if g != d && pathspec.Within(d, g) {
				v.errorf(0, 0, "grant %q lies inside fs_deny %q: remove one of them", g, d)
			}
		}
	}
	for _, w := range p.fsWrite {
		for _, pr := range p.Protections() {
			if w != pr.Grant && pathspec.Within(pr.Path, w) {
				v.errorf(0, 0, "fs_write %q lies inside the protected path %q (%s): add it to fs_unprotect to make it writable, or remove it", w, pr.Path, pr.Why)
			}
		}
	}
}

// contains reports whether list holds s exactly.
func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

// builtinPath reports whether path is a built-in protected path of one of
// the fs_write roots.
func builtinPath(roots []string, path string) bool {
	for _, r := range roots {
		for _, e := range BuiltinProtected {
			if pathspec.Join(r, e.Name) == path {
				return true
			}
		}
	}
	return false
}

func builtinNames() string {
	names := make([]string, len(BuiltinProtected))
	for i, e := range BuiltinProtected {
		names[i] = e.Name
	}
	return strings.Join(names, ", ")
}

// writeBudget derives max_write when the policy left it out, and refuses
// one larger than max_memory: staged writes are held in memory until the
// run ends, so the memory limit would end the run first.
func (v *validator) writeBudget(p *Policy) {
	if !p.explicit.has(budget.MaxWrite) {
		p.limits.Write = max(min(budget.DefaultWrite, p.limits.Memory/2), 1)
		return
	}
	if p.limits.Write > p.limits.Memory {
		v.errorf(0, 0, "max_write %s is larger than max_memory %s: bytes written to fs_write grants are held in memory until the run ends, so raise max_memory or lower max_write",
			FormatSize(p.limits.Write), FormatSize(p.limits.Memory))
	}
}
