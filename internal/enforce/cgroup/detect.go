package cgroup

import (
	"fmt"
	"path"
	"path/filepath"
	"strconv"
	"strings"
)

// mount is one cgroup line of /proc/self/mountinfo (proc(5)).
type mount struct {
	root   string   // path inside the hierarchy that is mounted
	point  string   // mount point
	fstype string   // "cgroup" or "cgroup2"
	opts   []string // per-mount options (rw, ro, ...)
	super  []string // superblock options; v1 controller names are here
}

// parseMountinfo returns the cgroup and cgroup2 mounts in data, in order.
func parseMountinfo(data string) ([]mount, error) {
	var out []mount
	for n, line := range strings.Split(data, "\n") {
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		sep := -1
		for i := 6; i < len(f); i++ {
			if f[i] == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+3 >= len(f) {
			return nil, fmt.Errorf("cgroup: /proc/self/mountinfo line %d: malformed: %q", n+1, line)
		}
		fstype := f[sep+1]
		if fstype != "cgroup" && fstype != "cgroup2" {
			continue
		}
		out = append(out, mount{
			root:   unescape(f[3]),
			point:  unescape(f[4]),
			fstype: fstype,
			opts:   strings.Split(f[5], ","),
			super:  strings.Split(f[sep+3], ","),
		})
	}
	return out, nil
}

// unescape undoes the octal escapes (\040 for space) of mountinfo fields.
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func (m mount) readOnly() bool {
	for _, o := range m.opts {
		if o == "ro" {
			return true
		}
	}
	return false
}

// selfCgroups is /proc/self/cgroup (cgroups(7)): v1 controller → path, and
// the cgroup2 path.
type selfCgroups struct {
	v1    map[string]string
	v2    string
	hasV2 bool
}

func parseProcCgroup(data string) (selfCgroups, error) {
	s := selfCgroups{v1: map[string]string{}}
	for n, line := range strings.Split(data, "\n") {
		if line == "" {
			continue
		}
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 || !strings.HasPrefix(f[2], "/") {
			return selfCgroups{}, fmt.Errorf("cgroup: /proc/self/cgroup line %d: malformed: %q", n+1, line)
		}
		if f[0] == "0" && f[1] == "" {
			s.v2, s.hasV2 = f[2], true
			continue
		}
		for _, c := range strings.Split(f[1], ",") {
			s.v1[c] = f[2]
		}
	}
	return s, nil
}

// detectEnv is what buildHost may read beyond the two /proc files.
type detectEnv struct {
	readFile func(name string) ([]byte, error)
	exists   func(name string) bool
	// killAtRoot reports whether the kernel has cgroup.kill (5.14), for a
	// supervisor in the root cgroup, which has no cgroup.kill file.
	killAtRoot bool
}

// known lists the controllers this package uses, in the order it reports them.
var known = []string{Memory, Pids, CPU, CPUAcct, Freezer}

func isKnown(c string) bool {
	for _, k := range known {
		if k == c {
			return true
		}
	}
	return false
}

// buildHost derives the Host from mountinfo and /proc/self/cgroup.
func buildHost(mountinfo, proccgroup string, env detectEnv) (Host, error) {
	mounts, err := parseMountinfo(mountinfo)
	if err != nil {
		return Host{}, err
	}
	self, err := parseProcCgroup(proccgroup)
	if err != nil {
		return Host{}, err
	}
	h := Host{Controllers: map[string]string{}, Self: map[string]string{}}
	problem := func(format string, args ...any) { h.Problems = append(h.Problems, fmt.Sprintf(format, args...)) }
	anyV1 := false
	// The first usable mount of a hierarchy wins: later ones are bind
	// mounts of the same tree (containers) and add nothing. Read-only
	// mounts are skipped, because mkdir would fail there only at Create.
	for _, m := range mounts {
		if m.fstype == "cgroup2" {
			switch {
			case h.Unified != "":
				problem("cgroup2 also mounted at %s: using %s", m.point, h.Unified)
			case m.readOnly():
				problem("cgroup2 mounted read-only at %s: not used", m.point)
			case !self.hasV2:
				problem("cgroup2 mounted at %s but /proc/self/cgroup has no 0:: line: not used", m.point)
			default:
				dir, ok := under(m, self.v2)
				if !ok {
					problem("cgroup2 at %s: own cgroup %s lies outside the mounted root %s: not used", m.point, self.v2, m.root)
					continue
				}
				h.Unified, h.Self[m.point] = m.point, dir
			}
			continue
		}
		// A v1 mount names its controllers among the superblock options;
		// named hierarchies (name=systemd) and controllers we do not use
		// are ignored.
		for _, c := range m.super {
			if !isKnown(c) {
				continue
			}
			if prev := h.Controllers[c]; prev != "" {
				problem("%s also mounted at %s: using %s", c, m.point, prev)
				continue
			}
			if m.readOnly() {
				problem("%s mounted read-only at %s: not used", c, m.point)
				continue
			}
			p, ok := self.v1[c]
			if !ok {
				problem("%s mounted at %s but absent from /proc/self/cgroup: not used", c, m.point)
				continue
			}
			dir, ok := under(m, p)
			if !ok {
				problem("%s at %s: own cgroup %s lies outside the mounted root %s: not used", c, m.point, p, m.root)
				continue
			}
			h.Controllers[c], h.Self[m.point] = m.point, dir
			anyV1 = true
		}
	}
	if h.Unified != "" {
		// A child can use the controllers of its parent's subtree_control;
		// those merely listed in cgroup.controllers can be enabled unless
		// the parent holds processes (the "no internal processes" rule),
		// which only Create can find out. An unreadable file offers
		// nothing, so limits are refused rather than silently skipped.
		dir := h.Self[h.Unified]
		avail, err := env.readFile(filepath.Join(dir, "cgroup.controllers"))
		if err != nil {
			problem("cgroup2 at %s: %v: no cgroup2 controller used", h.Unified, err)
		}
		enabled, _ := env.readFile(filepath.Join(dir, "cgroup.subtree_control")) // absent: nothing enabled yet
		for _, c := range []string{Memory, Pids, CPU} {
			if !hasWord(string(avail), c) {
				continue
			}
			// A controller is bound to one hierarchy at a time; if both
			// claim it, v1 is where the kernel charges tasks.
			if prev := h.Controllers[c]; prev != "" {
				problem("%s offered by cgroup2 at %s and v1 at %s: using v1", c, h.Unified, prev)
				continue
			}
			h.Controllers[c] = h.Unified
			if !hasWord(string(enabled), c) {
				problem("%s is not enabled in %s/cgroup.subtree_control: Create will try to enable it", c, dir)
			}
		}
		// The root cgroup has no cgroup.kill file even on kernels that
		// have it, so there the kernel version decides.
		if dir == h.Unified {
			h.KillFile = env.killAtRoot
		} else {
			h.KillFile = env.exists(filepath.Join(dir, "cgroup.kill"))
		}
	}
	switch {
	case anyV1 && h.Unified != "":
		h.Version = Hybrid
	case anyV1:
		h.Version = V1
	case h.Unified != "":
		h.Version = V2
	default:
		problem("no cgroup filesystem is mounted")
	}
	return h, nil
}

// under returns the directory of the hierarchy path p as seen through m,
// or false when m does not show p (a bind mount of another subtree, or a
// path outside our cgroup namespace such as "/../x").
func under(m mount, p string) (string, bool) {
	// The kernel shows cgroups outside our cgroup namespace as "/../x";
	// path.Clean would silently turn that into "/x".
	if strings.Contains(p, "..") || strings.Contains(m.root, "..") {
		return "", false
	}
	p = path.Clean(p)
	root := path.Clean(m.root)
	var rel string
	switch {
	case root == "/":
		rel = p
	case p == root:
		rel = "/"
	case strings.HasPrefix(p, root+"/"):
		rel = strings.TrimPrefix(p, root)
	default:
		return "", false
	}
	return filepath.Join(m.point, rel), true
}

func hasWord(s, w string) bool {
	for _, f := range strings.Fields(s) {
		if f == w {
			return true
		}
	}
	return false
}
