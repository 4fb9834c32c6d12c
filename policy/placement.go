package policy

import (
	"maps"
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock/policy/pathspec"
)

// A grant may name where it appears inside the sandbox: "HOST:INSIDE"
// (./proj:/workspace). HOST is granted exactly as a plain entry (checked
// against the ceiling, staged, copied back); INSIDE is only where the
// sandbox sees it. Unplaced grants appear at their host path.

// reservedInside are the sandbox's own folders: a grant placed on or below
// one would stand in for the system base or what airlock mounts itself.
var reservedInside = []string{"/proc", "/sys", "/dev", "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/.airlock", "/.airlock-stage"}

// splitPlacement splits "HOST:INSIDE" at the last ":" that starts an
// absolute INSIDE; an entry without one is a plain grant.
func splitPlacement(s string) (host, inside string, placed bool) {
	i := strings.LastIndex(s, ":/")
	if i <= 0 {
		return s, "", false
	}
	return s[:i], s[i+1:], true
}

// grant canonicalizes one fs_read or fs_write entry, recording where it is
// placed inside when it says so.
func (v *validator) grant(p *Policy, it item) (string, bool) {
	host, inside, placed := splitPlacement(it.val)
	if !placed {
		return v.path(it)
	}
	hit := it
	hit.val = host
	c, ok := v.path(hit)
	if !ok {
		return "", false
	}
	in, ok := v.inside(it, inside)
	if !ok {
		return "", false
	}
	if prev, dup := p.placed[c]; dup && prev != in {
		v.itemf(it, "%s is already placed at %s: one host path appears at one place", c, prev)
		return "", false
	}
	if p.placed == nil {
		p.placed = map[string]string{}
	}
	p.placed[c] = in
	return c, true
}

// inside checks where a placed grant appears: an absolute path without
// "..", not /, not /tmp itself, and not on or below a folder the sandbox's
// system base or airlock holds.
func (v *validator) inside(it item, inside string) (string, bool) {
	for _, seg := range strings.Split(inside, "/") {
		if seg == ".." {
			v.itemf(it, "the place inside, %s, has a \"..\" segment: write where the grant appears as a plain absolute path", inside)
			return "", false
		}
	}
	c := pathspec.Clean(inside)
	switch {
	case c == "/":
		v.itemf(it, "a grant cannot be placed at /, which holds the sandbox's system base: place it in a folder of its own, e.g. /workspace")
		return "", false
	case c == "/tmp":
		v.itemf(it, "a grant cannot be placed at /tmp, the sandbox's scratch: place it below it or elsewhere, e.g. /workspace")
		return "", false
	}
	for _, r := range reservedInside {
		if pathspec.Within(r, c) {
			v.itemf(it, "a grant cannot be placed at %s, inside %s, which the sandbox's system base or airlock holds: place it elsewhere, e.g. /workspace", c, r)
			return "", false
		}
	}
	return c, true
}

// placements refuses placed grants whose place overlaps another grant's:
// one place shows one host folder, and no grant hides inside or over
// another's view.
func (v *validator) placements(p *Policy) {
	if len(p.placed) == 0 {
		return
	}
	type view struct{ host, inside string }
	var views []view
	for _, g := range append(slices.Clone(p.fsRead), p.fsWrite...) {
		views = append(views, view{g, p.Inside(g)})
	}
	// consistent: outer's place holds inner's exactly where outer's host
	// folder holds it, as a grant nested in another appears.
	consistent := func(outer, inner view) bool {
		return pathspec.Within(outer.host, inner.host) && pathspec.Join(outer.inside, strings.TrimPrefix(inner.host, outer.host)) == inner.inside
	}
	for i, a := range views {
		for _, b := range views[i+1:] {
			switch {
			case pathspec.Within(a.inside, b.inside) && !consistent(a, b),
				pathspec.Within(b.inside, a.inside) && !consistent(b, a):
				v.errorf(0, 0, "fs grants %s (at %s) and %s (at %s) overlap inside the sandbox: give each placed grant a place of its own", a.host, a.inside, b.host, b.inside)
				return
			}
		}
	}
}

// written returns grants as a policy file writes them: HOST:INSIDE for a
// placed one.
func (p *Policy) written(grants []string) []string {
	if len(p.placed) == 0 {
		return grants
	}
	out := make([]string, len(grants))
	for i, g := range grants {
		out[i] = g
		if in, ok := p.placed[g]; ok {
			out[i] = g + ":" + in
		}
	}
	return out
}

// Placed reports whether any grant is placed somewhere other than its
// host path.
func (p *Policy) Placed() bool { return len(p.placed) > 0 }

// Inside returns where the host path appears inside the sandbox: below a
// placed grant, at its place; elsewhere, at itself.
func (p *Policy) Inside(host string) string {
	if g, ok := longestWithin(slices.Collect(maps.Keys(p.placed)), host); ok {
		return pathspec.Join(p.placed[g], strings.TrimPrefix(host, g))
	}
	return host
}

// HostOf returns the host path that an inside path below a placed grant
// stands for, and false for one that is not below a placed grant.
func (p *Policy) HostOf(inside string) (string, bool) {
	var best, bestIn string
	for h, in := range p.placed {
		if pathspec.Within(in, inside) && len(in) > len(bestIn) {
			best, bestIn = h, in
		}
	}
	if bestIn == "" {
		return "", false
	}
	return pathspec.Join(best, strings.TrimPrefix(inside, bestIn)), true
}

// View returns the policy as the sandbox sees it: every grant and every
// path inside one (fs_deny, fs_protect, fs_unprotect) at its place inside,
// and no placements. A policy without placements is its own view.
func (p *Policy) View() *Policy {
	if len(p.placed) == 0 {
		return p
	}
	c := p.clone()
	c.placed = nil
	for _, l := range []*[]string{&c.fsRead, &c.fsWrite, &c.fsDeny, &c.fsProtect, &c.fsUnprotect} {
		for i, h := range *l {
			(*l)[i] = p.Inside(h)
		}
	}
	c.canonicalize()
	return c
}

// longestWithin returns the longest of grants that holds path.
func longestWithin(grants []string, path string) (string, bool) {
	best, ok := "", false
	for _, g := range grants {
		if pathspec.Within(g, path) && len(g) >= len(best) {
			best, ok = g, true
		}
	}
	return best, ok
}
