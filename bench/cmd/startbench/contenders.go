package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/airlock-sandbox/airlock/internal/enforce/seccomp"
	"github.com/airlock-sandbox/airlock/plan"
)

// cleanEnv is the environment every contender's outer process gets: the
// same three variables airlock leaves its command, so no contender pays for
// a bigger environment than another.
var cleanEnv = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp", "LANG=C.UTF-8"}

// Contender is one way of running a command: bare, or inside some sandbox.
type Contender struct {
	// Name is the label used in tables and charts.
	Name string
	// Equivalence says what of airlock's default sandbox this contender
	// also does and what it does not.
	Equivalence string
	// Available is false when the probe run failed; Reason says why.
	Available bool
	Reason    string

	// command builds the process for argv; release runs after Wait.
	command func(ctx context.Context, argv []string) (cmd *exec.Cmd, release func(), err error)
	// start starts cmd; nil means cmd.Start.
	start func(cmd *exec.Cmd) error
}

// Start starts a process that Command returned.
func (c *Contender) Start(cmd *exec.Cmd) error {
	if c.start != nil {
		return c.start(cmd)
	}
	return cmd.Start()
}

// Run starts cmd and waits for it.
func (c *Contender) Run(cmd *exec.Cmd) error {
	if err := c.Start(cmd); err != nil {
		return err
	}
	return cmd.Wait()
}

// Command returns the process that runs argv under c, and a func to call
// after it has been waited for.
func (c *Contender) Command(ctx context.Context, argv []string) (*exec.Cmd, func(), error) {
	cmd, release, err := c.command(ctx, argv)
	if err != nil {
		return nil, nil, err
	}
	if cmd.Env == nil {
		cmd.Env = cleanEnv
	}
	if release == nil {
		release = func() {}
	}
	return cmd, release, nil
}

// probe runs /bin/true once under c and records whether that worked.
func (c *Contender) probe(ctx context.Context) {
	cmd, release, err := c.Command(ctx, []string{"/bin/true"})
	if err != nil {
		c.Reason = err.Error()
		return
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = c.Run(cmd)
	release()
	if err != nil {
		line, _, _ := strings.Cut(strings.TrimSpace(out.String()), "\n")
		c.Reason = fmt.Sprintf("%v: %s", err, line)
		return
	}
	c.Available = true
}

func plain(path string, prefix ...string) func(ctx context.Context, argv []string) (*exec.Cmd, func(), error) {
	return func(ctx context.Context, argv []string) (*exec.Cmd, func(), error) {
		args := append(append(prefix[:len(prefix):len(prefix)], "--"), argv...)
		if path == "" {
			return exec.CommandContext(ctx, argv[0], argv[1:]...), nil, nil
		}
		return exec.CommandContext(ctx, path, args...), nil, nil
	}
}

// binPaths returns where p is seen inside a root whose /bin is a symlink
// to usr/bin (its directory resolved, its base name kept, as airlock mounts
// it), and the real file to bind there.
func binPaths(p string) (visible, real string, err error) {
	dir, err := filepath.EvalSymlinks(filepath.Dir(p))
	if err != nil {
		return "", "", err
	}
	real, err = filepath.EvalSymlinks(p)
	if err != nil {
		return "", "", err
	}
	return filepath.Join(dir, filepath.Base(p)), real, nil
}

// systemBase lists what `airlock explain` shows as the read-only system
// base (directories and files bound from the host) on this machine.
var systemBase = []string{
	"/usr/lib", "/usr/lib64", "/usr/local/lib", "/usr/share/zoneinfo", "/usr/share/ca-certificates",
	"/etc/ssl", "/etc/ca-certificates", "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d",
}

// synthesized are the small /etc files airlock writes for the sandbox.
var synthesized = map[string]string{
	"passwd":        "root:x:0:0:root:/tmp:/bin/sh\nsandbox:x:1000:1000:sandbox:/tmp:/bin/sh\n",
	"group":         "root:x:0:\nsandbox:x:1000:\n",
	"hosts":         "127.0.0.1 localhost\n::1 localhost\n",
	"resolv.conf":   "nameserver 127.0.0.1\n",
	"nsswitch.conf": "passwd: files\ngroup: files\nhosts: files\n",
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// writeEtc writes the synthesized files to dir/etc for bwrap and the
// OCI runtimes to bind.
func writeEtc(dir string) error {
	if err := os.MkdirAll(filepath.Join(dir, "etc"), 0o755); err != nil {
		return err
	}
	for name, body := range synthesized {
		if err := os.WriteFile(filepath.Join(dir, "etc", name), []byte(body), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// writeSeccompBPF writes airlock's own filter (seccomp.Build, the program
// nsinit installs) as struct sock_filter[] for bwrap --seccomp.
func writeSeccompBPF(path string) error {
	prog, err := seccomp.Build(plan.DefaultSeccomp(), seccomp.Options{})
	if err != nil {
		return err
	}
	var b bytes.Buffer
	for _, in := range prog {
		binary.Write(&b, binary.LittleEndian, in.Code)
		b.WriteByte(in.Jt)
		b.WriteByte(in.Jf)
		binary.Write(&b, binary.LittleEndian, in.K)
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

// bwrapContender runs bubblewrap in the configuration closest to airlock's
// default sandbox: the same namespaces, the same system base bound
// read-only, the same synthesized /etc files, airlock's seccomp program,
// no capabilities, a new session and a clean environment.
func bwrapContender(work string) (*Contender, error) {
	bpf := filepath.Join(work, "airlock-seccomp.bpf")
	if err := writeSeccompBPF(bpf); err != nil {
		return nil, fmt.Errorf("seccomp program for bwrap: %w", err)
	}
	if err := writeEtc(work); err != nil {
		return nil, err
	}
	c := &Contender{
		Name: "bwrap",
		Equivalence: "same 7 namespaces (--unshare-all minus nothing: user, mount, pid, net, ipc, uts, cgroup), " +
			"same read-only system base and synthesized /etc files, only the command bound from /usr/bin, " +
			"--proc /proc, --dev /dev, --tmpfs /tmp, --cap-drop ALL, --new-session, --die-with-parent, --clearenv, " +
			"and airlock's own seccomp BPF program via --seccomp; NOT done: Landlock, cgroup limits, " +
			"rlimits, unprivileged host uid (as root bwrap keeps host uid 0 mapped), tmpfs size cap, " +
			"noexec on /tmp and the base",
	}
	c.command = func(ctx context.Context, argv []string) (*exec.Cmd, func(), error) {
		args, err := bwrapArgs(work, argv)
		if err != nil {
			return nil, nil, err
		}
		f, err := os.Open(bpf)
		if err != nil {
			return nil, nil, err
		}
		cmd := exec.CommandContext(ctx, "bwrap", append([]string{"--seccomp", "3"}, args...)...)
		cmd.ExtraFiles = []*os.File{f}
		return cmd, func() { f.Close() }, nil
	}
	return c, nil
}

func bwrapArgs(work string, argv []string) ([]string, error) {
	visible, real, err := binPaths(argv[0])
	if err != nil {
		return nil, err
	}
	a := []string{
		"--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--clearenv",
		"--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin", "--setenv", "HOME", "/tmp",
		"--setenv", "LANG", "C.UTF-8", "--setenv", "TMPDIR", "/tmp", "--setenv", "USER", "sandbox",
		"--symlink", "usr/bin", "/bin", "--symlink", "usr/sbin", "/sbin",
		"--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
	}
	for _, p := range systemBase {
		if exists(p) {
			a = append(a, "--ro-bind", p, p)
		}
	}
	a = append(a, "--symlink", "/usr/share/zoneinfo/Etc/UTC", "/etc/localtime",
		"--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp")
	for name := range synthesized {
		a = append(a, "--ro-bind", filepath.Join(work, "etc", name), "/etc/"+name)
	}
	a = append(a, "--ro-bind", real, visible, "--chdir", "/tmp", "--")
	return append(append(a, visible), argv[1:]...), nil
}

// firejailContender runs firejail with no profile and the strictest
// generic options. firejail hides what it blacklists rather than building
// a root from grants, so the host's /usr and /etc stay visible.
func firejailContender() *Contender {
	return &Contender{
		Name: "firejail",
		Equivalence: "--noprofile --net=none --ipc-namespace --private --private-tmp --private-dev " +
			"--caps.drop=all --seccomp --nonewprivs --nogroups --noroot; NOT equivalent: host /usr, /etc " +
			"and most of / stay visible (deny-list, not a root made of grants), default seccomp deny-list, " +
			"no cgroup limits, no Landlock",
		command: plain("firejail", "--noprofile", "--quiet", "--net=none", "--ipc-namespace", "--private",
			"--private-tmp", "--private-dev", "--caps.drop=all", "--seccomp", "--nonewprivs",
			"--nogroups", "--noroot"),
	}
}

var containerSeq atomic.Int64

// ociContender runs runc or crun on a bundle made by ociBundle. crun
// refuses this VM's hybrid cgroup layout, so it is started from a thread
// whose mount namespace hides the cgroup2 mount (hiddenCgroup2Launcher).
func ociContender(name, work string, cache *bundleCache) *Contender {
	state := filepath.Join(work, name+"-state")
	c := &Contender{
		Name: name,
		Equivalence: "OCI bundle written by the benchmark: user (uid 0 → host 100000), mount, pid, net, ipc, uts, " +
			"cgroup namespaces; read-only root made of the same system base, synthesized /etc files and the command; " +
			"proc, tmpfs /dev and /tmp (size cap, noexec); no capabilities; noNewPrivileges; airlock's syscall " +
			"allow-list as an OCI seccomp section (argument rules approximated); pids/memory limits",
	}
	global := []string{"--root", state}
	if name == "crun" {
		start, err := hiddenCgroup2Launcher()
		if err != nil {
			c.Reason = err.Error()
		}
		c.start = start
		c.Equivalence += "; started in a private mount namespace without /sys/fs/cgroup/unified (crun refuses hybrid cgroups)"
	}
	c.command = func(ctx context.Context, argv []string) (*exec.Cmd, func(), error) {
		bundle, err := cache.get(argv)
		if err != nil {
			return nil, nil, err
		}
		id := fmt.Sprintf("ab%d-%d", os.Getpid(), containerSeq.Add(1))
		args := append(global[:len(global):len(global)], "run", "--bundle", bundle, id)
		return exec.CommandContext(ctx, name, args...), nil, nil
	}
	return c
}
