package sandbox

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/enforce/metabroker"
	"github.com/airlock-sandbox/airlock/plan"
)

// The landlock backend has no user namespace to make root an unprivileged
// id, so when airlock runs as root the sandbox runs as another uid: the
// owner of the fs_write grants when they share one other than root (the
// project's files stay its owner's), else an unprivileged id picked for
// the run (plan.IDMap's range, or the top of the ids a container maps),
// which owns nothing on the host. Before anything starts, that uid must be
// able to reach every grant, tool and folder the run needs.

// identity is who the landlock backend runs the sandbox as, and why.
type identity struct {
	metabroker.Identity
	why string // for the report: "the owner of the fs_write grants", ...
}

// unsharedIdentity picks the sandbox's uid and gid for the plan pl of the
// landlock backend. As anyone but root the sandbox runs as the caller.
func unsharedIdentity(pl *plan.Plan) identity {
	if os.Geteuid() != 0 {
		return identity{Identity: metabroker.Identity{UID: os.Getuid(), GID: os.Getgid()}, why: "airlock's own uid"}
	}
	type owner struct {
		path     string
		uid, gid uint32
	}
	var owners []owner
	for _, m := range pl.Mounts {
		var st unix.Stat_t
		if m.Grant() && m.Writable && unix.Stat(m.Target, &st) == nil {
			owners = append(owners, owner{m.Target, st.Uid, st.Gid})
		}
	}
	sameUID, sameGID := len(owners) > 0, len(owners) > 0
	for _, o := range owners {
		sameUID = sameUID && o.uid == owners[0].uid
		sameGID = sameGID && o.gid == owners[0].gid
	}
	// 65534 is also how a user namespace shows an owner it does not map.
	if sameUID && owners[0].uid != 0 && owners[0].uid != 65534 {
		// Their group too when they share one other than root's (gid 0
		// opens root's group-writable files); else a group of its own.
		uid, gid := int(owners[0].uid), int(owners[0].gid)
		if !sameGID || gid == 0 || gid == 65534 {
			gid = pickMappedID(pl.IDMap)
		}
		return identity{Identity: metabroker.Identity{UID: uid, GID: gid}, why: "the owner of the fs_write grants"}
	}
	id := pickMappedID(pl.IDMap)
	why := "an unprivileged id picked for this run: there is no fs_write grant"
	switch {
	case sameUID:
		why = "an unprivileged id picked for this run: the fs_write grants belong to root"
	case len(owners) > 0:
		var list []string
		for _, o := range owners {
			list = append(list, fmt.Sprintf("%s is uid %d's", o.path, o.uid))
		}
		why = "an unprivileged id picked for this run: the fs_write grants have different owners (" + strings.Join(list, ", ") + ")"
	}
	return identity{Identity: metabroker.Identity{UID: id, GID: id}, why: why}
}

// pickMappedID picks an unprivileged id, the same for uid and gid, that
// this process's user namespace maps: one of m's range (random per run,
// far above ordinary accounts and subordinate id ranges) where the
// namespace maps it, the host's own; else, in a container whose user
// namespace maps fewer ids (65536 is usual), a random one of the top
// quarter of the widest range mapped for both uids and gids, away from
// system and ordinary accounts, never 0 and never nobody (65534) or
// 65535.
func pickMappedID(m plan.IDMap) int {
	return mappedID(idMap("/proc/self/uid_map"), idMap("/proc/self/gid_map"), func() int { return pickHostID(m) })
}

// mappedID is pickMappedID's choice among the ranges of uids and gids the
// namespace maps, with next giving m's random ids.
func mappedID(uids, gids [][2]int64, next func() int) int {
	id := next()
	if inMap(uids, id) && inMap(gids, id) {
		return id
	}
	var best [2]int64 // [first, last] of the widest range mapped for both
	found := false
	for _, u := range uids {
		for _, g := range gids {
			lo, hi := max(u[0], g[0], 1), min(u[1], g[1])
			if hi >= lo && (!found || hi-lo > best[1]-best[0]) {
				best, found = [2]int64{lo, hi}, true
			}
		}
	}
	if !found {
		return id // nothing fits: taking it fails, and says so, before anything starts
	}
	lo := best[0] + (best[1]-best[0])*3/4
	n := best[1] - lo + 1
	for range 16 {
		if c := lo + int64(id)%n; c != 65534 && c != 65535 {
			return int(c)
		}
		id = next()
	}
	return id
}

// idMap reads a /proc/self/{uid,gid}_map as [first, last] ranges of the
// ids inside; nil when it cannot be read.
func idMap(path string) [][2]int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out [][2]int64
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		first, err1 := strconv.ParseInt(f[0], 10, 64)
		count, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 == nil && err2 == nil && count > 0 {
			out = append(out, [2]int64{first, first + count - 1})
		}
	}
	return out
}

// inMap reports whether id is in one of the ranges.
func inMap(ranges [][2]int64, id int) bool {
	for _, r := range ranges {
		if int64(id) >= r[0] && int64(id) <= r[1] {
			return true
		}
	}
	return false
}

// checkReach fails, naming the first one, unless id can reach every grant
// of pl (read, or read and write), execute its command and tools, and
// enter its scratch folder and working folder. It looks as the kernel
// will, on a thread with id's credentials and no capabilities
// (faccessat2 with AT_EACCESS).
func checkReach(pl *plan.Plan, id identity) error {
	type need struct {
		path, what, adj, rule string
		mode                  uint32
	}
	var needs []need
	for _, m := range pl.Mounts {
		n := need{path: m.Target, rule: string(m.Origin)}
		switch {
		case m.Grant() && m.Writable:
			n.what, n.adj, n.mode = "read and write", "readable and writable", unix.R_OK|unix.W_OK
		case m.Grant():
			n.what, n.adj, n.mode = "read", "readable", unix.R_OK
		case m.Origin == plan.OriginTool || m.Origin == plan.OriginCommand:
			n.what, n.adj, n.mode = "execute", "executable", unix.X_OK
		default:
			continue
		}
		if !m.File && n.mode != unix.X_OK {
			n.mode |= unix.X_OK // a folder is entered
		}
		needs = append(needs, n)
	}
	needs = append(needs, need{pl.Scratch, "read, write and enter", "", "scratch folder", unix.R_OK | unix.W_OK | unix.X_OK},
		need{pl.Cwd, "enter", "enterable", "working folder", unix.X_OK})
	return id.Do(func() error {
		for _, n := range needs {
			err := unix.Faccessat2(unix.AT_FDCWD, n.path, n.mode, unix.AT_EACCESS)
			if err == nil || errors.Is(err, unix.ENOENT) && n.rule != "scratch folder" {
				continue // a path that is not there has nothing to reach; the run says so
			}
			fix := fmt.Sprintf("make it %s by uid %d, and every folder above it enterable", n.adj, id.UID)
			switch n.rule {
			case string(plan.OriginFSWrite):
				fix = "give the fs_write grants one owner other than root (chown -R USER " + n.path + "): the sandbox then runs as that owner"
			case "scratch folder":
				fix = "set TMPDIR to a folder every user can enter (/tmp)"
			}
			return fmt.Errorf("the landlock backend runs the sandbox as uid %d gid %d (%s), never as root, and that uid cannot %s %s (%s: %v), so nothing was started: %s, or run with --isolation namespaces where user namespaces can be created",
				id.UID, id.GID, id.why, n.what, n.path, n.rule, err, fix)
		}
		return nil
	})
}

// hostRoot reports whether uid, in the user namespace whose uid_map is at
// path, is the host's uid 0: root in a rootful container, not in a
// rootless one. It reads one level: a namespace nested below a container
// that maps 0 onto 0 counts as the host's.
func hostRoot(uid int, path string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		inside, err1 := strconv.ParseInt(f[0], 10, 64)
		outside, err2 := strconv.ParseInt(f[1], 10, 64)
		count, err3 := strconv.ParseInt(f[2], 10, 64)
		if err1 == nil && err2 == nil && err3 == nil && int64(uid) >= inside && int64(uid)-inside < count {
			return outside+int64(uid)-inside == 0
		}
	}
	return false
}
