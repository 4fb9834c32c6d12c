package plan

import (
	"fmt"
	"strings"

	"github.com/airlock-sandbox/airlock/policy"
)

// baseCandidates is the read-only system base: what ordinary dynamically
// linked programs and the common interpreters need to start, and nothing
// that holds secrets. $HOME, /root, /home, /var, host /proc, /sys,
// /etc/shadow and the docker socket are never in it. Executables in /usr/bin
// are not in it either: only the command and allowed_tools are mounted.
// Paths that are symlinks on the host (merged /usr) become symlinks.
var baseCandidates = []struct {
	path string
	exec bool // libraries are mmapped executable, so their mount may not be noexec
}{
	{"/bin", false}, {"/sbin", false},
	{"/lib", true}, {"/lib32", true}, {"/lib64", true}, {"/libx32", true},
	{"/usr/lib", true}, {"/usr/lib32", true}, {"/usr/lib64", true}, {"/usr/libx32", true},
	{"/usr/local/lib", true},
	{"/usr/share/zoneinfo", false}, {"/usr/share/ca-certificates", false},
	{"/etc/ssl", false}, {"/etc/ca-certificates", false},
	{"/etc/ld.so.cache", false}, {"/etc/ld.so.conf", false}, {"/etc/ld.so.conf.d", false},
	{"/etc/localtime", false},
}

// devices are bound from the host, read-write, and nothing else from /dev.
var devices = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"}

func systemBase(h Host) ([]Mount, error) {
	var out []Mount
	for _, c := range baseCandidates {
		exists, dir, link, err := h.Lstat(c.path)
		if err != nil {
			return nil, fmt.Errorf("system base %s: %w", c.path, err)
		}
		switch {
		case !exists:
			continue
		case link != "":
			out = append(out, Mount{Kind: KindSymlink, Source: link, Target: c.path, Origin: OriginBase})
		case c.path == "/bin" || c.path == "/sbin":
			// Real directories full of executables: only tools are mounted there.
			continue
		default:
			out = append(out, Mount{Kind: KindBind, Source: c.path, Target: c.path, Exec: c.exec, File: !dir, Origin: OriginBase})
		}
	}
	for _, d := range devices {
		out = append(out, Mount{Kind: KindBind, Source: d, Target: d, Writable: true, Devices: true, File: true, Origin: OriginSandbox})
	}
	for _, l := range [][2]string{{"/proc/self/fd", "/dev/fd"}, {"/proc/self/fd/0", "/dev/stdin"}, {"/proc/self/fd/1", "/dev/stdout"}, {"/proc/self/fd/2", "/dev/stderr"}} {
		out = append(out, Mount{Kind: KindSymlink, Source: l[0], Target: l[1], Origin: OriginSandbox})
	}
	return out, nil
}

// synthesized files replace the host's: no host user names, no host DNS.
func synthesized() []Mount {
	files := []struct{ path, data string }{
		{"/etc/passwd", "root:x:0:0:airlock sandbox:/tmp:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"},
		{"/etc/group", "root:x:0:\nnogroup:x:65534:\n"},
		{"/etc/hosts", "127.0.0.1\tlocalhost airlock\n::1\tlocalhost ip6-localhost ip6-loopback\n"},
		{"/etc/resolv.conf", "# airlock: there is no DNS inside the sandbox; HTTP_PROXY, HTTPS_PROXY and ALL_PROXY resolve names outside.\n"},
		{"/etc/nsswitch.conf", "passwd: files\ngroup: files\nhosts: files\n"},
	}
	out := make([]Mount, 0, len(files))
	for _, f := range files {
		out = append(out, Mount{Kind: KindFile, Target: f.path, Data: f.data, Origin: OriginSandbox})
	}
	return out
}

// String renders the plan for `airlock explain`: every step, in order,
// with the layer and the grant behind it.
func (pl *Plan) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "command:  %s\n", strings.Join(pl.Argv, " "))
	fmt.Fprintf(&b, "cwd:      %s\n", pl.Cwd)
	ns := make([]string, len(pl.Namespaces))
	for i, n := range pl.Namespaces {
		ns[i] = string(n)
	}
	fmt.Fprintf(&b, "\nnamespaces (kernel): %s; the command never runs as host root\n", strings.Join(ns, ", "))
	b.WriteString("\nroot filesystem (mount namespace; everything else on the host does not exist inside):\n")
	for _, m := range pl.Mounts {
		b.WriteString("  " + m.describe() + "\n")
	}
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
	} else {
		b.WriteString("  no net_hosts: no way out at all (no proxy, no DNS)\n")
	}
	b.WriteString("  connect() reaches only the sandbox's own loopback: its own servers and the proxy (the init verifies lo is the only interface)\n")
	b.WriteString("\nprocess (always): all capabilities dropped from every set, no_new_privs, new session, fds > 2 closed,\n")
	b.WriteString("  seccomp-bpf allow-list installed last before execve (io_uring, bpf, ptrace, mount, unshare, keyctl, ... refused)\n")
	if !pl.RequireLandlock {
		b.WriteString("  landlock: the policy accepts running without it when the kernel lacks it (allow_downgrade: landlock)\n")
	}
	b.WriteString("\nenvironment (everything else is cleared):\n")
	for _, e := range pl.Env {
		b.WriteString("  " + e + "\n")
	}
	b.WriteString("\nrlimits:\n")
	for _, r := range pl.Rlimits {
		fmt.Fprintf(&b, "  %-7s %d  (%s)\n", r.Resource, r.Value, r.Why)
	}
	return b.String()
}

func (m Mount) describe() string {
	mode := "ro"
	if m.Writable {
		mode = "rw"
	}
	exec := ",noexec"
	if m.Exec {
		exec = ""
	}
	switch m.Kind {
	case KindBind:
		src := ""
		if m.Source != m.Target {
			src = "  <- " + m.Source
		}
		nodev := ",nodev"
		if m.Devices {
			nodev = "" // a device node is only useful on a mount that allows devices
		}
		return fmt.Sprintf("%-7s %-34s %s,nosuid%s%s%s  [%s]", m.Kind, m.Target, mode, nodev, exec, src, m.Origin)
	case KindTmpfs:
		return fmt.Sprintf("%-7s %-34s rw,nosuid,nodev,noexec,size=%d  [%s]", m.Kind, m.Target, m.Size, m.Origin)
	case KindSymlink:
		return fmt.Sprintf("%-7s %-34s -> %s  [%s]", m.Kind, m.Target, m.Source, m.Origin)
	case KindStage:
		return fmt.Sprintf("%-7s %-34s tmpfs of %d bytes (max_write) holding what the sandbox writes to fs_write grants; never visible inside, copied back to the host when the run ends  [%s]", m.Kind, m.Target, m.Size, m.Origin)
	case KindOverlay, KindStagedFile:
		return fmt.Sprintf("%-7s %-34s rw,nosuid,nodev,noexec  <- %s: writes are staged (at most max_write) and copied back when the run ends, protected paths refused  [%s]", m.Kind, m.Target, m.Source, m.Origin)
	case KindReadonly:
		return fmt.Sprintf("%-7s %-34s read-only: %s  [protected]", m.Kind, m.Target, m.Why)
	case KindHide:
		return fmt.Sprintf("%-7s %-34s hidden: an empty read-only %s takes its place  [fs_deny]", m.Kind, m.Target, map[bool]string{true: "folder", false: "file"}[m.Dir])
	case KindProc:
		return fmt.Sprintf("%-7s %-34s the sandbox's own pids only; /proc/sys and friends read-only  [%s]", m.Kind, m.Target, m.Origin)
	default:
		return fmt.Sprintf("%-7s %-34s synthesized, read-only  [%s]", m.Kind, m.Target, m.Origin)
	}
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
	names := make([]string, 0, len(policy.BuiltinProtected))
	for _, e := range policy.BuiltinProtected {
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
