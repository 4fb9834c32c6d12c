package hostspec

// Within reports whether p grants nothing that outer does not: every host
// and port p matches (through Match or MatchAddr) is matched by outer too.
// An operator's ceiling uses it to bound a tenant's net_hosts.
//
// Both patterns are already canonical (Parse normalized case, trailing
// dots and IDNA), so names are compared as strings:
//
//   - an exact name is within the same name, or within a wildcard whose
//     suffix it is a proper subdomain of ("a.example.com" within
//     "*.example.com", but "example.com" is not);
//   - a wildcard is within a wildcard with the same or a shorter suffix
//     ("*.a.example.com" within "*.example.com"), never within an exact
//     name, which matches one host only;
//   - an address or CIDR is within a CIDR (or the same address) of the same
//     family that contains all of it; names and addresses never cover each
//     other, since names never match IP text and addresses never match names;
//   - and in every case p's ports must be a subset of outer's: the default
//     {80, 443} is within a range only if the range holds both, and a range
//     is within the default only if it is the single port 80 or 443.
//
// The zero Pattern matches nothing; it is never within anything and nothing
// is within it, so a pattern that was never parsed cannot pass a check.
func (p Pattern) Within(outer Pattern) bool {
	if !outer.portsCover(p) {
		return false
	}
	switch p.kind {
	case kindExact:
		switch outer.kind {
		case kindExact:
			return p.name == outer.name
		case kindWildcard:
			return isSubdomain(p.name, outer.name)
		}
	case kindWildcard:
		// The hosts "*.x" matches are the proper subdomains of x; they are
		// all proper subdomains of y when x is y or below it.
		return outer.kind == kindWildcard && (p.name == outer.name || isSubdomain(p.name, outer.name))
	case kindAddr:
		a, o := p.prefix, outer.prefix
		return outer.kind == kindAddr && a.Addr().BitLen() == o.Addr().BitLen() &&
			o.Bits() <= a.Bits() && o.Contains(a.Addr())
	}
	return false
}

// isSubdomain reports whether name ends in "." + parent with at least one
// label before it: the hosts a "*.parent" wildcard matches.
func isSubdomain(name, parent string) bool {
	n := len(name) - len(parent)
	return n >= 2 && name[n-1] == '.' && name[n:] == parent
}

// portsCover reports whether every port inner grants is granted by p.
func (p Pattern) portsCover(inner Pattern) bool {
	switch {
	case inner.lo == 0 && inner.hi == 0: // the default {80, 443}
		return p.portOK(80) && p.portOK(443)
	case p.lo == 0 && p.hi == 0:
		return inner.lo == inner.hi && (inner.lo == 80 || inner.lo == 443)
	}
	return p.lo <= inner.lo && inner.hi <= p.hi
}
