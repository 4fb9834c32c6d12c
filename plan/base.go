package plan

import "fmt"

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
	// Architecture-independent data, read-only and never executable: time
	// zones, CA certificates, fonts, and the data files that libraries in
	// /usr/lib reach through links (matplotlib's mpl-data, for one).
	{"/usr/share", false},
	{"/etc/ssl", false}, {"/etc/ca-certificates", false},
	{"/etc/ld.so.cache", false}, {"/etc/ld.so.conf", false}, {"/etc/ld.so.conf.d", false},
	{"/etc/localtime", false},
	// Debian's package manager wires some libraries through links here
	// (libblas.so.3 -> /etc/alternatives/libblas.so.3-x86_64-linux-gnu ->
	// /usr/lib/.../blas/libblas.so.3, which numpy needs). It holds only
	// links: one leads somewhere only where the sandbox already sees its
	// target, so it widens nothing but the names of the host's choices.
	{"/etc/alternatives", false},
	// Configuration that libraries read from /etc as part of their
	// install, holding no secret: Debian's matplotlib reads its defaults
	// from /etc/matplotlibrc and refuses to import without it; Python's
	// mimetypes and others read /etc/mime.types.
	{"/etc/matplotlibrc", false}, {"/etc/mime.types", false},
}

// devices are bound from the host, read-write, and nothing else from /dev.
var devices = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"}

// systemBase binds the base candidates from root ("" for the host's own,
// else an environment's root filesystem) at their own paths inside.
func systemBase(h Host, root string) ([]Mount, error) {
	var out []Mount
	for _, c := range baseCandidates {
		exists, dir, link, err := h.Lstat(root + c.path)
		if err != nil {
			return nil, fmt.Errorf("system base %s: %w", root+c.path, err)
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
			out = append(out, Mount{Kind: KindBind, Source: root + c.path, Target: c.path, Exec: c.exec, File: !dir, Origin: OriginBase})
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
		{"/etc/resolv.conf", plainResolv},
		{"/etc/nsswitch.conf", plainNSSwitch},
	}
	out := make([]Mount, 0, len(files))
	for _, f := range files {
		out = append(out, Mount{Kind: KindFile, Target: f.path, Data: f.data, Origin: OriginSandbox})
	}
	return out
}
