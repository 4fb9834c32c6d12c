package spec

import (
	"fmt"
	"sort"
	"strings"

	"github.com/airlock-sandbox/airlock/policy/budget"
	"github.com/airlock-sandbox/airlock/policy/downgrade"
	"github.com/airlock-sandbox/airlock/policy/protected"
)

// String renders the plan for `airlock explain`: every step, in order,
// with the layer and the grant behind it. Everything it prints about what
// the kernel is given (namespaces, ids, mounts and their flags, masked
// paths, Landlock rules, capabilities, the seccomp profile, limits,
// rlimits) is read from the plan's data, which is what nsinit and the
// exporters read too.
func (pl *Plan) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "command:  %s\n", strings.Join(pl.Argv, " "))
	fmt.Fprintf(&b, "cwd:      %s\n", pl.Cwd)
	if pl.NoNamespaces {
		pl.writeUnshared(&b)
		return b.String()
	}
	pl.writeIdentity(&b)
	switch {
	case pl.RootfsImage != "":
		fmt.Fprintf(&b, "environment: %s (rootfs, an image unpacked in %s): the system base and the tools come from it, not the host's\n", pl.RootfsImage, pl.Rootfs)
	case pl.Rootfs != "":
		fmt.Fprintf(&b, "environment: %s (rootfs): the system base and the tools come from this root filesystem, not the host's\n", pl.Rootfs)
	}
	b.WriteString("\nroot filesystem (mount namespace; everything else on the host does not exist inside):\n")
	for _, m := range pl.Mounts {
		b.WriteString("  " + m.describe() + "\n")
	}
	b.WriteString("\n/proc and /sys, once the root is built (a path this host does not have is skipped):\n")
	wrapList(&b, "  masked    ", "empty and read-only: ", pl.MaskedPaths)
	wrapList(&b, "  read-only ", "", pl.ReadonlyPaths)
	b.WriteString("\nlandlock rules (second, independent filesystem layer; anything not listed is denied):\n")
	for _, r := range pl.Rules {
		fmt.Fprintf(&b, "  %-8s %-40s [%s]\n", r.Access, r.Path, r.Origin)
	}
	pl.writeSection(&b)
	b.WriteString("\nnetwork (empty network namespace: only lo):\n")
	if pl.Proxy {
		fmt.Fprintf(&b, "  egress proxy at 127.0.0.1:%d (HTTP, CONNECT) and 127.0.0.1:%d (SOCKS5), served from outside; net_hosts decides every connection\n", HTTPProxyPort, SOCKSProxyPort)
		for _, h := range pl.NetHosts {
			fmt.Fprintf(&b, "  allow    %-40s [net_hosts]\n", h)
		}
		b.WriteString("  everything else, and any name that resolves to a private, loopback or metadata address not listed exactly, is refused before a connection is made\n")
		for _, c := range pl.Credentials {
			host, rest, _ := strings.Cut(c, ":")
			header, env, _ := strings.Cut(rest, "=")
			fmt.Fprintf(&b, "  credential %s on requests to %s: the value of $%s where airlock runs, added by the proxy (HTTPS to %s is terminated with a per-run CA trusted inside at %s); the sandbox never sees it\n", header, host, env, host, CABundlePath)
		}
		if pl.Transparent {
			fmt.Fprintf(&b, "  transparent: airlock's DNS at 127.0.0.1:%d answers names in net_hosts with addresses airlock maps back (NXDOMAIN for the rest; no query leaves); connect(2) goes to the supervisor, which connects a granted name:port through the proxy (its tunnel listener at 127.0.0.1:%d) and lets the kernel connect the sandbox's own loopback\n", DNSPort, TunnelPort)
		}
	} else {
		b.WriteString("  no net_hosts: no way out at all (no proxy, no DNS)\n")
	}
	b.WriteString("  connect() reaches only the sandbox's own loopback: its own servers and the proxy (the init verifies lo is the only interface)\n")
	pl.writeTail(&b)
	return b.String()
}

// writeTail renders what both backends share: the process, the seccomp
// profile, the limits, the environment and the rlimits.
func (pl *Plan) writeTail(b *strings.Builder) {
	pl.writeProcess(b)
	pl.Seccomp.write(b)
	pl.Limits.write(b)
	b.WriteString("\nenvironment (everything else is cleared):\n")
	for _, e := range pl.Env {
		b.WriteString("  " + e + "\n")
	}
	b.WriteString("\nrlimits (soft/hard, each process):\n")
	for _, r := range pl.Rlimits {
		fmt.Fprintf(b, "  %-7s %s  (%s)\n", r.Resource, softHard(r), r.Why)
	}
}

// writeUnshared renders the plan of the backend without namespaces.
func (pl *Plan) writeUnshared(b *strings.Builder) {
	b.WriteString("\nno namespaces (the landlock backend): the init runs in the host's namespaces as the caller; nothing is mounted\n")
	if pl.IDMap.HostUID != 0 {
		fmt.Fprintf(b, "identity: commands run as uid %d gid %d, without supplementary groups, never as root\n", pl.IDMap.HostUID, pl.IDMap.HostGID)
	} else {
		b.WriteString("identity: commands run as the caller; when that is root, as the owner of the fs_write grants if they share one other than root, else as an unprivileged id picked per run, never as root\n")
	}
	b.WriteString("metadata: chmod, chown, utimes and xattr calls go to the supervisor, which makes them as the sandbox's uid beneath the fs_write grants and the scratch folder only\n")
	fmt.Fprintf(b, "scratch:  %s (TMPDIR and HOME; made for the run, removed at its end)\n", pl.Scratch)
	b.WriteString("\nlandlock rules on the host's filesystem (the only filesystem layer; anything not listed is denied, ABI 6 or later):\n")
	for _, r := range pl.Rules {
		fmt.Fprintf(b, "  %-8s %-40s [%s]\n", r.Access, r.Path, r.Origin)
	}
	b.WriteString("\ngrants the file API resolves beneath (opened by the init before anything runs):\n")
	for _, m := range pl.Mounts {
		if m.Grant() {
			mode := "read-only"
			if m.Writable {
				mode = "read-write, in place"
			}
			fmt.Fprintf(b, "  %-22s %s  [%s]\n", mode, m.Target, m.Origin)
		}
	}
	b.WriteString("\nnetwork (the host's, shared; Landlock refuses every TCP connect and bind, seccomp sends connect(2) to the supervisor):\n")
	if pl.Proxy {
		fmt.Fprintf(b, "  connect to 127.0.0.1:%d (HTTP, CONNECT) or 127.0.0.1:%d (SOCKS5): the supervisor connects the egress proxy and hands that socket back; net_hosts decides every connection\n", HTTPProxyPort, SOCKSProxyPort)
		for _, h := range pl.NetHosts {
			fmt.Fprintf(b, "  allow    %-40s [net_hosts]\n", h)
		}
	} else {
		b.WriteString("  no net_hosts: no way out at all (no proxy, no DNS)\n")
	}
	b.WriteString("  every other connect is refused with EACCES and reported: the host's loopback, unix sockets, any address; no UDP, no listen\n")
	b.WriteString("\nprocesses: a Landlock domain with signal and abstract-socket scopes; the init, outside it, is a subreaper that kills the whole tree at the end\n")
	pl.writeTail(b)
}

// writeIdentity renders the namespaces and the id mapping.
func (pl *Plan) writeIdentity(b *strings.Builder) {
	ns := make([]string, len(pl.Namespaces))
	for i, n := range pl.Namespaces {
		ns[i] = string(n)
	}
	fmt.Fprintf(b, "\nnamespaces (kernel, all new): %s\n", strings.Join(ns, ", "))
	m := pl.IDMap
	if m.Size == 1 {
		b.WriteString("identity: only uid and gid 0 inside are mapped, to one unprivileged host id; every other id is nobody\n")
	} else {
		fmt.Fprintf(b, "identity: ids 0 to %d inside are mapped; every other id is nobody\n", int64(m.Size)-1)
	}
	if m.HostUID != 0 && m.HostGID != 0 {
		fmt.Fprintf(b, "  uid 0 inside is host uid %d, gid 0 host gid %d\n", m.HostUID, m.HostGID)
		return
	}
	b.WriteString("  airlock unprivileged: 0 inside is the caller's own uid and gid\n")
	fmt.Fprintf(b, "  airlock as root: 0 inside is one id picked at random per run from %d to %d, for uid and gid\n", m.RootFirst, uint64(m.RootFirst)+uint64(m.RootCount)-1)
}

// writeProcess renders what the init does to the process before execve.
func (pl *Plan) writeProcess(b *strings.Builder) {
	b.WriteString("\nprocess:\n")
	switch {
	case len(pl.Capabilities) == 0 && pl.NoNamespaces:
		b.WriteString("  capabilities: none, dropped from every set the caller can change (as root: bounding too, securebits locked; as a user the bounding set is the caller's, and no_new_privs keeps execve from granting from it)\n")
	case len(pl.Capabilities) == 0:
		b.WriteString("  capabilities: none, dropped from every set (bounding, ambient too); securebits locked\n")
	default:
		fmt.Fprintf(b, "  capabilities kept: %s\n", strings.Join(pl.Capabilities, ", "))
	}
	if pl.NoNewPrivileges {
		b.WriteString("  no_new_privs: set, so execve grants nothing (no setuid, no file capabilities)\n")
	} else {
		b.WriteString("  no_new_privs: NOT set\n")
	}
	b.WriteString("  the init also starts a new session, closes fds above 2 and makes itself not dumpable\n")
	if !pl.RequireLandlock {
		b.WriteString("  landlock: the policy accepts running without it when the kernel lacks it (allow_downgrade: landlock)\n")
	}
}

// write renders the profile as its groups: what is allowed outright, what
// depends on the arguments, and what is named as refused.
func (s Seccomp) write(b *strings.Builder) {
	fmt.Fprintf(b, "\nseccomp-bpf allow-list, installed last, right before execve; any other syscall gets %v,\n", s.Default)
	b.WriteString("  a foreign architecture or the x32 ABI kills the process, and an unknown syscall number answers ENOSYS:\n")
	groups := map[string][]string{}
	var special []Syscall
	for _, sc := range s.Syscalls {
		if len(sc.Rules) == 1 && sc.Rules[0].Action == ActAllow && len(sc.Rules[0].Conds) == 0 {
			groups[sc.Group] = append(groups[sc.Group], sc.Name)
		} else {
			special = append(special, sc)
		}
	}
	names := make([]string, 0, len(groups))
	for g := range groups {
		names = append(names, g)
	}
	sort.Slice(names, func(i, j int) bool { return strings.ToLower(names[i]) < strings.ToLower(names[j]) })
	for _, g := range names {
		fmt.Fprintf(b, "  allow    %-40s %d syscalls\n", g, len(groups[g]))
	}
	// Syscalls with rules of their own; neighbours with the same reason
	// share a line.
	for i := 0; i < len(special); {
		j, why := i+1, special[i].Why
		for j < len(special) && why != "" && special[j].Why == why {
			j++
		}
		if why == "" {
			why = fmt.Sprintf("%d rules", len(special[i].Rules))
		}
		var ns []string
		for _, sc := range special[i:j] {
			ns = append(ns, sc.Name)
		}
		fmt.Fprintf(b, "  rules    %-40s %s\n", strings.Join(ns, ", "), why)
		i = j
	}
	for _, g := range s.Refused {
		fmt.Fprintf(b, "  refuse   %-40s %s\n", g.Name, g.Why)
		wrapList(b, "             ", "", g.Names)
	}
}

// write renders the limits, with the policy keys they come from.
func (l Limits) write(b *strings.Builder) {
	b.WriteString("\nlimits (the run is halted when one is reached):\n")
	rows := []struct {
		key        budget.Limit
		value, how string
		downgrade  downgrade.Layer
	}{
		{budget.MaxMemory, sizeOf(l.Memory), "cgroup memory limit, no swap (an OOM kill halts the run)", downgrade.Memory},
		{budget.MaxPids, fmt.Sprint(l.Pids), "cgroup pids limit: tasks at once (a refused fork halts the run)", downgrade.Pids},
		{budget.MaxCPU, l.CPU.String(), "CPU time of the whole tree, from the cgroup's counter; RLIMIT_CPU per process", downgrade.CPU},
		{budget.MaxWall, l.Wall.String(), "from the start; then every process is killed", ""},
		{budget.MaxOutputBytes, sizeOf(l.Output), "of stdout and stderr captured", ""},
		{budget.MaxOps, fmt.Sprint(l.Ops), "proxy connections and file operations", ""},
		{budget.MaxWrite, sizeOf(l.Write), "added to the fs_write grants (the stage)", ""},
		{budget.MaxScratch, sizeOf(l.Scratch), "of /tmp (its tmpfs)", ""},
	}
	for _, r := range rows {
		fmt.Fprintf(b, "  %-17s %-12s %s\n", r.key, r.value, r.how)
		if r.downgrade != "" && l.AcceptsDowngrade(r.downgrade) {
			fmt.Fprintf(b, "  %-17s %-12s without it when the host cannot enforce it (allow_downgrade: %s)\n", "", "", r.downgrade)
		}
	}
}

// sizeOf prints n bytes, with the binary unit when it is exact.
func sizeOf(n int64) string {
	for _, u := range []struct {
		shift uint
		name  string
	}{{30, "GiB"}, {20, "MiB"}, {10, "KiB"}} {
		if n > 0 && n%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d %s", n>>u.shift, u.name)
		}
	}
	return fmt.Sprintf("%d B", n)
}

// softHard prints an rlimit's values: one when soft and hard agree.
func softHard(r Rlimit) string {
	if r.Hard == r.Value {
		return fmt.Sprint(r.Value)
	}
	return fmt.Sprintf("%d/%d", r.Value, r.Hard)
}

// wrapList writes items after prefix (then intro), comma-separated, in
// lines of at most about 100 characters, continuation lines indented like
// the first.
func wrapList(b *strings.Builder, prefix, intro string, items []string) {
	if len(items) == 0 {
		return
	}
	indent := strings.Repeat(" ", len(prefix))
	line := prefix + intro
	for i, it := range items {
		sep := ", "
		if i == len(items)-1 {
			sep = ""
		}
		if len(line)+len(it) > 100 && strings.TrimSpace(line) != strings.TrimSpace(prefix+intro) {
			b.WriteString(strings.TrimRight(line, " ") + "\n")
			line = indent
		}
		line += it + sep
	}
	b.WriteString(line + "\n")
}

// describe renders one mount step; a bind's flags come from Flags.
func (m Mount) describe() string {
	switch m.Kind {
	case KindBind:
		src := ""
		if m.Source != m.Target {
			src = "  <- " + m.Source
		}
		return fmt.Sprintf("%-7s %-34s %s%s  [%s]", m.Kind, m.Target, m.Flags(), src, m.Origin)
	case KindTmpfs:
		return fmt.Sprintf("%-7s %-34s rw,nosuid,nodev,noexec,size=%d  [%s]", m.Kind, m.Target, m.Size, m.Origin)
	case KindSymlink:
		return fmt.Sprintf("%-7s %-34s -> %s  [%s]", m.Kind, m.Target, m.Source, m.Origin)
	case KindStage:
		return fmt.Sprintf("%-7s %-34s tmpfs of %d bytes (max_write) holding what the sandbox writes to fs_write grants; never visible inside, copied back to the host when the run ends  [%s]", m.Kind, m.Target, m.Size, m.Origin)
	case KindOverlay, KindStagedFile:
		return fmt.Sprintf("%-7s %-34s %s  <- %s: writes are staged (at most max_write) and copied back when the run ends, protected paths refused  [%s]", m.Kind, m.Target, m.Flags(), m.Source, m.Origin)
	case KindReadonly:
		return fmt.Sprintf("%-7s %-34s read-only: %s  [protected]", m.Kind, m.Target, m.Why)
	case KindHide:
		return fmt.Sprintf("%-7s %-34s hidden: an empty read-only %s takes its place  [fs_deny]", m.Kind, m.Target, map[bool]string{true: "folder", false: "file"}[m.Dir])
	case KindProc:
		return fmt.Sprintf("%-7s %-34s rw,nosuid,nodev,noexec: the sandbox's own pids only; masked and read-only paths below  [%s]", m.Kind, m.Target, m.Origin)
	default:
		return fmt.Sprintf("%-7s %-34s synthesized, read-only  [%s]", m.Kind, m.Target, m.Origin)
	}
}

// String renders the flags as mount options: "ro,nosuid,nodev", with
// ",recursive" when they cover the mounts below too.
func (f MountFlags) String() string {
	o := []string{"rw"}
	if f.ReadOnly {
		o[0] = "ro"
	}
	for _, x := range []struct {
		on   bool
		name string
	}{{f.NoSuid, "nosuid"}, {f.NoDev, "nodev"}, {f.NoExec, "noexec"}, {f.Recursive, "recursive"}} {
		if x.on {
			o = append(o, x.name)
		}
	}
	return strings.Join(o, ",")
}

// writeSection explains what happens to writes when the plan stages any.
func (pl *Plan) writeSection(b *strings.Builder) {
	var stage *Mount
	for i := range pl.Mounts {
		if pl.Mounts[i].Kind == KindStage {
			stage = &pl.Mounts[i]
		}
	}
	if stage == nil {
		return
	}
	fmt.Fprintf(b, "\nwrites (fs_write grants are staged: the host folder is not touched while the sandbox runs):\n")
	fmt.Fprintf(b, "  at most %d bytes (max_write) may be added; a write past it fails with ENOSPC and the run is halted\n", stage.Size)
	b.WriteString("  when the run ends, the changes are copied back without setuid/setgid bits, xattrs, devices or fifos;\n")
	b.WriteString("  never copied back, at any depth: hooks folders and config, config.worktree and commondir files in git\n")
	b.WriteString("  directories, files named .git, everything under fs_protect and fs_deny, and the built-in protected names:\n")
	names := make([]string, 0, len(protected.Builtin))
	for _, e := range protected.Builtin {
		names = append(names, e.Name)
	}
	for line := ""; len(names) > 0; {
		line += names[0]
		names = names[1:]
		if len(names) > 0 {
			line += ", "
		}
		if len(line) > 90 || len(names) == 0 {
			b.WriteString("    " + strings.TrimSpace(line) + "\n")
			line = ""
		}
	}
	var ro []string
	for _, m := range pl.Mounts {
		if m.Kind == KindReadonly {
			ro = append(ro, m.Target)
		}
	}
	if len(ro) > 0 {
		b.WriteString("  of them, these exist and are read-only inside too (readonly steps above): " + strings.Join(ro, ", ") + "\n")
	}
}
