package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

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
	// Every makes the cold start measure this contender in one round out
	// of Every (a microVM boot takes seconds); 0 or 1: every round.
	Every int `json:"-"`

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

// bwrapContender runs bubblewrap on the plan airlock compiles for the
// command: the same root filesystem (every mount of the plan: system
// base, synthesized /etc files, /dev nodes, /proc, a size-capped /tmp, only
// the command bound from /usr/bin), a read-only root, the same environment
// and working directory, the same namespaces, airlock's own seccomp filter
// (read from a running airlock sandbox), no capabilities, a new session.
func bwrapContender(ctx context.Context, work, airlockBin string, ps *plans) (*Contender, error) {
	progs, err := airlockFilters(ctx, airlockBin)
	if err != nil {
		return nil, fmt.Errorf("airlock's seccomp filter for bwrap: %w", err)
	}
	var bpfs []string
	for i, p := range progs {
		f := filepath.Join(work, fmt.Sprintf("airlock-seccomp-%d.bpf", i))
		if err := os.WriteFile(f, p, 0o644); err != nil {
			return nil, err
		}
		bpfs = append(bpfs, f)
	}
	c := &Contender{
		Name: "bwrap",
		Equivalence: "the mounts of airlock's plan for the command (`airlock explain`: read-only system base, " +
			"synthesized /etc files, the /dev nodes and links, --proc /proc, a size-capped --tmpfs /tmp, only the command bound " +
			"from /usr/bin), --remount-ro /, the plan's environment (--clearenv), cwd and hostname, --unshare-all " +
			"(user, mount, pid, net, ipc, uts, cgroup), --cap-drop ALL, --new-session, --die-with-parent, and airlock's own " +
			"seccomp filter (" + fmt.Sprint(len(progs)) + " program(s) read from a running airlock sandbox with " +
			"PTRACE_SECCOMP_GET_FILTER) via --add-seccomp-fd; NOT done: Landlock, cgroup limits, rlimits, unprivileged " +
			"host uid (as root bwrap keeps host uid 0 mapped), noexec mounts",
	}
	var mu sync.Mutex
	roots := map[string][]string{} // guarded by mu: argv joined by NUL → bwrapArgs
	rootArgs := func(argv []string) ([]string, error) {
		key := strings.Join(argv, "\x00")
		mu.Lock()
		defer mu.Unlock()
		if r, ok := roots[key]; ok {
			return r, nil
		}
		pl, err := ps.get(argv)
		if err != nil {
			return nil, err
		}
		r, err := bwrapArgs(pl, filepath.Join(work, "bwrap-files", fmt.Sprint(len(roots))))
		if err != nil {
			return nil, err
		}
		roots[key] = r
		return r, nil
	}
	c.command = func(ctx context.Context, argv []string) (*exec.Cmd, func(), error) {
		root, err := rootArgs(argv)
		if err != nil {
			return nil, nil, err
		}
		var args []string
		var files []*os.File
		release := func() {
			for _, f := range files {
				f.Close()
			}
		}
		for _, b := range bpfs {
			f, err := os.Open(b)
			if err != nil {
				release()
				return nil, nil, err
			}
			args = append(args, "--add-seccomp-fd", fmt.Sprint(3+len(files)))
			files = append(files, f)
		}
		cmd := exec.CommandContext(ctx, "bwrap", append(args, root...)...)
		cmd.ExtraFiles = files
		return cmd, release, nil
	}
	return c, nil
}

// bwrapArgs translates the plan into bubblewrap options. The synthesized
// files are written below files. A mount kind bubblewrap cannot express is
// an error, never a weaker sandbox.
func bwrapArgs(pl *plan.Plan, files string) ([]string, error) {
	a := []string{"--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--clearenv",
		"--hostname", pl.Hostname}
	for _, e := range pl.Env {
		k, v, _ := strings.Cut(e, "=")
		a = append(a, "--setenv", k, v)
	}
	for i, m := range pl.Mounts {
		switch m.Kind {
		case plan.KindSymlink:
			a = append(a, "--symlink", m.Source, m.Target)
		case plan.KindDir:
			a = append(a, "--dir", m.Target)
		case plan.KindProc:
			a = append(a, "--proc", m.Target)
		case plan.KindTmpfs:
			a = append(a, "--perms", "1777", "--size", fmt.Sprint(m.Size), "--tmpfs", m.Target)
		case plan.KindBind:
			op := "--ro-bind"
			switch {
			case strings.HasPrefix(m.Target, "/dev/"):
				op = "--dev-bind" // a device node is useless on a nodev mount
			case m.Writable:
				op = "--bind"
			}
			if m.Optional {
				op += "-try"
			}
			a = append(a, op, m.Source, m.Target)
		case plan.KindFile:
			f := filepath.Join(files, fmt.Sprint(i))
			if err := os.MkdirAll(files, 0o755); err != nil {
				return nil, err
			}
			if err := os.WriteFile(f, []byte(m.Data), 0o444); err != nil {
				return nil, err
			}
			a = append(a, "--ro-bind", f, m.Target)
		default:
			return nil, fmt.Errorf("bwrap: plan mount %s at %s has no bubblewrap form", m.Kind, m.Target)
		}
	}
	a = append(a, "--remount-ro", "/", "--chdir", pl.Cwd, "--")
	return append(a, pl.Argv...), nil
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

// ociContender runs runc or crun on the bundle airlock exports for the
// command (bundleCache). crun refuses this VM's hybrid cgroup layout, so it
// is started from a thread whose mount namespace hides the cgroup2 mount
// (hiddenCgroup2Launcher).
func ociContender(name, work string, cache *bundleCache) *Contender {
	state := filepath.Join(work, name+"-state")
	c := &Contender{
		Name: name,
		Equivalence: "the bundle `airlock export oci` writes for the command (export/oci: oci.Config on airlock's plan, " +
			"Bundle.Write): user (uid 0 → one unprivileged host id), mount, pid, net, ipc, uts, cgroup namespaces; " +
			"read-only root holding the plan's mounts (system base, synthesized /etc files, /dev nodes, proc, " +
			"size-capped noexec /tmp, the command); runc's masked and read-only /proc paths; no capabilities; " +
			"noNewPrivileges; rlimits; memory (no swap) and pids limits; airlock's seccomp allow-list as the " +
			"export's OCI seccomp section (the ioctl TIOCSTI/TIOCLINUX refusals kept); NOT done: Landlock",
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
