package plan

import (
	"path"
	"sort"
	"strings"

	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/pathspec"
)

// Writable grants are staged: the sandbox writes into an overlay whose upper
// layer lives on one tmpfs of max_write bytes (KindStage), so a write past
// the budget fails with ENOSPC, and the host folder is never modified while
// the sandbox runs. When the run (or session) ends, the supervisor copies
// what changed back to the host, refusing protected paths at any depth.
// Inside the overlay, protected paths that exist are made read-only
// (KindReadonly) and fs_deny paths are hidden (KindHide) by mounts, so the
// kernel refuses the write or read when it happens; protected paths that do
// not exist may be created in the sandbox's own view, never on the host.

// StageName is the folder, at the top of the new root, on which the stage
// tmpfs is mounted while the root is assembled; nsinit detaches it before
// the sandbox starts, so the sandbox never sees it.
const StageName = ".airlock-stage"

// stageSteps returns the stage and the staged grant steps for the policy's
// fs_write grants, in the order they must be placed after their parents.
func stageSteps(p *policy.Policy, h Host) (stage Mount, grants []Mount, err error) {
	lim := p.Budget()
	stage = Mount{Kind: KindStage, Target: "/" + StageName, Writable: true, Size: lim.Write, Origin: OriginFSWrite}
	for i, w := range p.FSWrite() {
		exists, dir, link, err := h.Lstat(w)
		if err != nil {
			return Mount{}, nil, err
		}
		m := Mount{Kind: KindOverlay, Source: w, Target: w, Writable: true, IDMap: true, Origin: OriginFSWrite, Stage: i}
		if exists && !dir && link == "" {
			m.Kind, m.File = KindStagedFile, true
		}
		grants = append(grants, m)
	}
	return stage, grants, nil
}

// narrowSteps returns the read-only and hidden steps inside the grants:
// protected paths (built-in and fs_protect) and fs_deny paths, each at its
// real location when a symlink inside the grants leads there, deepest last.
// It also returns every real protected path, for the copy back.
func narrowSteps(p *policy.Policy, h Host) (steps []Mount, protected []string, err error) {
	// Every protected path is resolved from the root, so their common
	// ancestors would be looked up once per path: about 300 lstat calls
	// for one workspace grant (the compile took 490 µs, now 270), on the
	// critical path of every session the API creates. One compile looks
	// each path up once.
	once := &lstatOnce{Host: h, seen: map[string]lstatResult{}}
	h = once
	grants := append(p.FSRead(), p.FSWrite()...)
	gitDirs := map[string]bool{}
	for _, w := range p.FSWrite() {
		exists, dir, _, err := h.Lstat(path.Join(w, ".git"))
		if err != nil {
			return nil, nil, err
		}
		gitDirs[w] = exists && dir
	}
	seen := map[string]bool{}
	add := func(m Mount) {
		if !seen[m.Target] {
			seen[m.Target] = true
			steps = append(steps, m)
		}
	}
	for _, pr := range p.Protections() {
		if pr.Builtin && strings.HasPrefix(pathspec.Clean(strings.TrimPrefix(pr.Path, pr.Grant)), "/.git/") && !gitDirs[pr.Grant] {
			continue // no repository here: the copy back refuses hooks and config at any depth
		}
		for _, real := range resolveAll(once, pr.Path, p.FSWrite()) {
			if real != pr.Path {
				protected = append(protected, real)
			}
			m, ok, err := narrowStep(h, KindReadonly, real)
			if err != nil {
				return nil, nil, err
			}
			if ok {
				m.Why = pr.Why
				add(m)
			}
		}
	}
	for _, d := range p.FSDeny() {
		for _, real := range resolveAll(once, d, grants) {
			if real != d {
				protected = append(protected, real)
			}
			m, ok, err := narrowStep(h, KindHide, real)
			if err != nil {
				return nil, nil, err
			}
			if ok {
				m.Why = "listed in fs_deny"
				add(m)
			}
		}
	}
	sort.SliceStable(steps, func(i, j int) bool { return depth(steps[i].Target) < depth(steps[j].Target) })
	return steps, protected, nil
}

// narrowStep builds the step for one real path, or reports false when the
// path does not exist. Absent paths need no mount: the sandbox may create
// them in its own view, but every write reaches the host only through the
// copy back, which refuses them. (Placeholders would show the sandbox a
// workspace full of empty rc files that tools like git then pick up.)
func narrowStep(h Host, kind Kind, real string) (Mount, bool, error) {
	exists, isDir, link, err := h.Lstat(real)
	if err != nil || !exists || link != "" {
		// A symlink that resolveAll left in place leads outside the grants.
		return Mount{}, false, err
	}
	return Mount{Kind: kind, Target: real, Dir: isDir, Origin: OriginSandbox}, true, nil
}

// maxHops bounds how many symlinks resolveAll follows.
const maxHops = 40

// resolveAll returns p and, when p or one of its ancestors is a symlink,
// the real path it leads to, as long as that stays inside grants: a
// protected name must be protected where it really is. Paths that leave
// the grants are invisible inside and need no step.
func resolveAll(h *lstatOnce, p string, grants []string) []string {
	out := []string{}
	if real, ok := resolve(h, p); ok && within(grants, real) {
		out = append(out, real)
	}
	return out
}

// resolve follows symlinks in p component by component, lexically, the way
// the kernel would from the host's root. It reports false on a loop, a
// lookup error or more than maxHops links.
func resolve(h *lstatOnce, p string) (string, bool) {
	rest := strings.Split(strings.Trim(pathspec.Clean(p), "/"), "/")
	cur := "/"
	for hops := 0; len(rest) > 0; {
		c := rest[0]
		rest = rest[1:]
		if c == "" || c == "." {
			continue
		}
		next := path.Join(cur, c)
		exists, _, link, err := h.Lstat(next)
		if err != nil {
			return "", false
		}
		if !exists {
			// Nothing below a missing path exists either, and no link
			// can be met there: the rest is taken as it is.
			real := path.Join(append([]string{next}, rest...)...)
			h.absent(real)
			return real, true
		}
		if link == "" {
			cur = next
			continue
		}
		if hops++; hops > maxHops {
			return "", false
		}
		if !strings.HasPrefix(link, "/") {
			link = path.Join(cur, link)
		}
		rest = append(strings.Split(strings.Trim(pathspec.Clean(link), "/"), "/"), rest...)
		cur = "/"
	}
	return cur, true
}

func within(roots []string, p string) bool {
	for _, r := range roots {
		if pathspec.Within(r, p) {
			return true
		}
	}
	return false
}

// lstatOnce is a Host that looks each path up once: what one compile
// asks again gets the first answer.
type lstatOnce struct {
	Host
	seen map[string]lstatResult
}

type lstatResult struct {
	exists, dir bool
	link        string
	err         error
}

// absent records that p does not exist (a path below a missing one).
func (h *lstatOnce) absent(p string) {
	if _, ok := h.seen[p]; !ok {
		h.seen[p] = lstatResult{}
	}
}

func (h *lstatOnce) Lstat(p string) (exists, dir bool, link string, err error) {
	r, ok := h.seen[p]
	if !ok {
		r.exists, r.dir, r.link, r.err = h.Host.Lstat(p)
		h.seen[p] = r
	}
	return r.exists, r.dir, r.link, r.err
}
