package fsaudit

import (
	"strconv"
	"strings"

	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/hostspec"
)

// Denial is one operation Landlock refused during a run, named by the
// grant that would have allowed it. Identical denials (same Op, Target and
// Rule) are reported once, with Count saying how many records matched.
type Denial struct {
	// Layer is the audit layer: audit.LayerFS, audit.LayerExec for an
	// execve(2) of a file that is not an allowed tool, audit.LayerNet for
	// TCP, audit.LayerKernel for scopes, ptrace and mounts.
	Layer string
	// Op is what was attempted: read, list, write, create, remove,
	// truncate, rename, ioctl, exec, connect, bind, signal, ptrace, mount,
	// or the kernel's access name when it is one this package does not
	// know.
	Op string
	// Target is the path as the sandboxed process saw it (its mount
	// namespace and root), "host:port" for TCP, or what the kernel named
	// for scopes. For create, remove and rename it is the directory, which
	// is where the kernel checks those rights.
	Target string
	// Rule is the policy grant that would allow the operation (fs_read,
	// fs_write, allowed_tools, net_hosts), or "" when no grant can: device
	// nodes, TCP bind, signals and ptrace across the sandbox boundary and
	// mounts are never allowed.
	Rule string
	// Message explains the denial to the agent, such as
	// `"/root/.aws/credentials" is outside fs_read`.
	Message string
	// Hint says what the program can do instead within its grants, such
	// as connecting through the egress proxy; "" when there is nothing to
	// add. The policy change that would allow the operation is the
	// operator's: Grant says whether there is one, and the policy computes
	// it (policy.(*Policy).Suggest).
	Hint string
	// Blockers are the Landlock access rights the kernel reported missing,
	// such as "fs.read_file", for the operator's audit log.
	Blockers []string
	// Count is the number of records that matched; at least 1.
	Count int
}

// key identifies identical denials for deduplication.
type key struct{ op, target, rule string }

// opClass ranks what a record's blockers say was attempted. When one
// request misses several rights (open O_RDWR misses read and write, execve
// misses execute and read), the highest class names the denial: writing
// implies reading in a policy, and an allowed tool gets read too.
type opClass struct {
	rank  int
	layer string
	op    string
	rule  policy.Capability // 0: no grant allows it
}

// blockerClass maps the kernel's access names (security/landlock/audit.c)
// to what the denial means in policy terms.
var blockerClass = map[string]opClass{
	"fs.read_dir":                {1, audit.LayerFS, "list", policy.FSRead},
	"fs.read_file":               {2, audit.LayerFS, "read", policy.FSRead},
	"fs.truncate":                {3, audit.LayerFS, "truncate", policy.FSWrite},
	"fs.ioctl_dev":               {3, audit.LayerFS, "ioctl", policy.FSWrite},
	"fs.refer":                   {4, audit.LayerFS, "rename", policy.FSWrite},
	"fs.remove_dir":              {4, audit.LayerFS, "remove", policy.FSWrite},
	"fs.remove_file":             {4, audit.LayerFS, "remove", policy.FSWrite},
	"fs.make_dir":                {4, audit.LayerFS, "create", policy.FSWrite},
	"fs.make_reg":                {4, audit.LayerFS, "create", policy.FSWrite},
	"fs.make_sym":                {4, audit.LayerFS, "create", policy.FSWrite},
	"fs.make_fifo":               {4, audit.LayerFS, "create", policy.FSWrite},
	"fs.make_sock":               {4, audit.LayerFS, "create", policy.FSWrite},
	"fs.write_file":              {5, audit.LayerFS, "write", policy.FSWrite},
	"fs.make_char":               {6, audit.LayerFS, "mknod", 0},
	"fs.make_block":              {6, audit.LayerFS, "mknod", 0},
	"fs.execute":                 {7, audit.LayerExec, "exec", policy.AllowedTools},
	"fs.change_topology":         {7, audit.LayerKernel, "mount", 0},
	"net.connect_tcp":            {7, audit.LayerNet, "connect", policy.NetHosts},
	"net.bind_tcp":               {7, audit.LayerNet, "bind", 0},
	"scope.signal":               {7, audit.LayerKernel, "signal", 0},
	"scope.abstract_unix_socket": {7, audit.LayerKernel, "connect", 0},
	"ptrace":                     {7, audit.LayerKernel, "ptrace", 0},
}

// denialOf turns one access record into a Denial with Count 1.
func denialOf(r accessRecord) Denial {
	c := opClass{layer: audit.LayerKernel}
	for _, b := range r.blockers {
		bc, ok := blockerClass[b]
		if !ok {
			bc = opClass{rank: 0, layer: audit.LayerKernel, op: b}
		}
		if c.op == "" || bc.rank > c.rank {
			c = bc
		}
	}
	d := Denial{Layer: c.layer, Op: c.op, Target: target(r), Blockers: r.blockers, Count: 1}
	if c.rule != 0 {
		d.Rule = c.rule.String()
	}
	d.Message, d.Hint = explain(d)
	return d
}

// target names what the record says was denied.
func target(r accessRecord) string {
	f := r.fields
	switch {
	case f["path"] != "":
		return f["path"]
	case f["name"] != "":
		return f["name"] // a dentry: the kernel gives only its last component
	case f["dest"] != "":
		if f["daddr"] != "" {
			if port, err := strconv.ParseUint(f["dest"], 10, 16); err == nil {
				return hostspec.Join(f["daddr"], uint16(port))
			}
			return f["daddr"]
		}
		return "port " + f["dest"]
	case f["src"] != "":
		return "port " + f["src"]
	case f["opid"] != "":
		if f["ocomm"] != "" {
			return "pid " + f["opid"] + " (" + f["ocomm"] + ")"
		}
		return "pid " + f["opid"]
	}
	return ""
}

// explain writes the Message and Hint for d.
func explain(d Denial) (msg, hint string) {
	q := strconv.Quote(d.Target)
	switch d.Rule {
	case "":
		if d.Target == "" {
			return d.Op + " refused: the sandbox never allows it", ""
		}
		return d.Op + " " + q + " refused: the sandbox never allows it", ""
	case policy.NetHosts.String():
		return "direct TCP connection to " + q + " refused: the only way out is the egress proxy",
			"connect through the egress proxy that HTTP_PROXY, HTTPS_PROXY and ALL_PROXY name, which admits the net_hosts of the policy"
	case policy.AllowedTools.String():
		if strings.HasPrefix(d.Target, "/usr/lib/git-core/") {
			// git re-executes itself and its helpers from its exec path.
			return q + " is not in allowed_tools", "git runs its helpers from /usr/lib/git-core: a clone over HTTP(S) needs /usr/lib/git-core/git and /usr/lib/git-core/git-remote-http in allowed_tools besides git"
		}
		return q + " is not in allowed_tools", "files in fs_read, fs_write and /tmp are not executable: run a script through an allowed interpreter (sh FILE, python3 FILE)"
	}
	return q + " is outside " + d.Rule, ""
}

// sandboxOwned are the trees the sandbox makes itself rather than binding
// from the host at the same path: scratch, devices, its own /proc, and an
// /etc of copied and generated files. No grant of a host path changes what
// the sandbox sees there.
var sandboxOwned = []string{"/tmp", "/dev", "/proc", "/sys", "/etc"}

// Grant returns the grant that would allow d (fs_read, fs_write or
// allowed_tools, with Target as the entry to add), or false when none
// would: Rule is "" or net_hosts (the egress proxy is the only way out; a
// direct connection is never allowed), or Target is not a host path the
// sandbox sees at the same place (see sandboxOwned).
func (d Denial) Grant() (policy.Capability, bool) {
	var c policy.Capability
	switch d.Rule {
	case policy.FSRead.String():
		c = policy.FSRead
	case policy.FSWrite.String():
		c = policy.FSWrite
	case policy.AllowedTools.String():
		c = policy.AllowedTools
	default:
		return 0, false
	}
	if !strings.HasPrefix(d.Target, "/") {
		return 0, false
	}
	for _, o := range sandboxOwned {
		if d.Target == o || strings.HasPrefix(d.Target, o+"/") {
			return 0, false
		}
	}
	return c, true
}
