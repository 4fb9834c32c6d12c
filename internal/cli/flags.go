package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/pathspec"
)

// ListFlag collects a repeatable flag.
type ListFlag []string

func (l *ListFlag) String() string     { return fmt.Sprint(*l) }
func (l *ListFlag) Set(v string) error { *l = append(*l, v); return nil }

// CommaListFlag is a repeatable flag whose values may also be lists
// separated by commas: --allow-downgrade max_memory,max_pids.
type CommaListFlag []string

func (l *CommaListFlag) String() string { return fmt.Sprint(*l) }
func (l *CommaListFlag) Set(v string) error {
	for _, e := range strings.Split(v, ",") {
		if e = strings.TrimSpace(e); e == "" {
			return fmt.Errorf("empty name in %q: give names separated by commas, e.g. max_memory,max_pids", v)
		}
		*l = append(*l, e)
	}
	return nil
}

// PolicyFlags are the policy flags of run, explain, export and mcp: a
// policy file and the grants and budgets added to it. The zero value is
// ready for Register.
type PolicyFlags struct {
	file                             string
	fsRead, fsWrite, hosts, tools    ListFlag
	fsDeny, fsProtect, fsUnprotect   ListFlag
	env, credentials                 ListFlag
	downgrade                        CommaListFlag
	maxWall, maxCPU                  string
	maxOutput, maxMemory, maxScratch string
	maxWrite                         string
	maxOps, maxPids                  int64
	cwd                              string
	rootfs                           string
	wd                               string // the process's working folder, read by Build
}

// Register adds the policy flags to fs.
func (f *PolicyFlags) Register(fs *flag.FlagSet) {
	fs.StringVar(&f.file, "policy", "", "policy `FILE` (YAML or JSON); without it nothing is granted")
	fs.Var(&f.fsRead, "fs-read", "grant read access to `PATH` (repeatable)")
	fs.Var(&f.fsWrite, "fs-write", "grant read and write access to `PATH` (repeatable); writes are staged and copied back when the run ends")
	fs.Var(&f.fsDeny, "fs-deny", "hide `PATH` inside a grant: neither readable nor writable (repeatable)")
	fs.Var(&f.fsProtect, "fs-protect", "keep `PATH` inside an fs_write grant read-only, never written back (repeatable)")
	fs.Var(&f.fsUnprotect, "fs-unprotect", "leave `PATH` of the built-in protected list writable, e.g. ./proj/.vscode (repeatable; airlock explain lists the protected paths)")
	fs.Var(&f.hosts, "net-host", "allow egress to `HOST[:PORT]` through the proxy (repeatable)")
	fs.Var(&f.tools, "tool", "allow executing `TOOL` (repeatable)")
	fs.Var(&f.env, "env", "pass `NAME` (or set NAME=VALUE) into the sandbox (repeatable)")
	fs.Var(&f.credentials, "credential", "have the proxy set header HEADER on requests to HOST to the value of airlock's own environment variable ENV, which the sandbox never sees (`HOST:HEADER=ENV`, repeatable; HTTPS to HOST is terminated with a per-run CA trusted inside)")
	fs.Var(&f.downgrade, "allow-downgrade", "accept running without `LAYER` if the host lacks it (landlock, max_memory, max_cpu, max_pids, fs_audit, namespaces, proc; repeatable, or several separated by commas)")
	fs.StringVar(&f.maxWall, "max-wall", "", "wall-clock deadline, e.g. 30s")
	fs.StringVar(&f.maxCPU, "max-cpu", "", "CPU time of the whole tree, e.g. 10s")
	fs.StringVar(&f.maxOutput, "max-output", "", "stdout+stderr bytes kept before the run is halted, e.g. 1MiB")
	fs.StringVar(&f.maxMemory, "max-memory", "", "memory limit, e.g. 512MiB")
	fs.StringVar(&f.maxScratch, "max-scratch", "", "size of the /tmp tmpfs, e.g. 64MiB")
	fs.StringVar(&f.maxWrite, "max-write", "", "bytes the run may add to its fs_write grants, e.g. 256MiB (at most max_memory: staged writes are held in memory)")
	fs.Int64Var(&f.maxOps, "max-ops", 0, "boundary crossings (egress requests, execs, tool calls)")
	fs.Int64Var(&f.maxPids, "max-pids", 0, "processes and threads at once")
	fs.StringVar(&f.rootfs, "rootfs", "", "run in the environment whose root filesystem is `DIR` (e.g. made by debootstrap): its system base and tools stand in for the host's (namespaces isolation only)")
	fs.StringVar(&f.cwd, "cwd", "", "working `DIR` inside the sandbox, relative to the current folder like every path (default: the current folder when a grant covers it, else the first fs_write grant, else /tmp)")
}

// Build reads the policy file (if any) and applies the flags on top.
// Flags only add grants or tighten budgets.
func (f *PolicyFlags) Build() (*policy.Policy, error) {
	p := policy.Default()
	if f.file != "" {
		var err error
		if p, err = ReadPolicyFile(f.file); err != nil {
			return nil, err
		}
	}
	o := policy.Overrides{FSRead: f.fsRead, FSWrite: f.fsWrite, FSDeny: f.fsDeny, FSProtect: f.fsProtect, FSUnprotect: f.fsUnprotect,
		NetHosts: f.hosts, AllowedTools: f.tools, Env: f.env, AllowDowngrade: f.downgrade, Credentials: f.credentials, Rootfs: f.rootfs}
	var errs []error
	dur := func(name, v string, dst *time.Duration) {
		if v == "" {
			return
		}
		d, err := policy.ParseDuration(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("--%s %q: %w", name, v, err))
			return
		}
		*dst = d
	}
	size := func(name, v string, dst *int64) {
		if v == "" {
			return
		}
		n, err := policy.ParseSize(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("--%s %q: %w", name, v, err))
			return
		}
		*dst = n
	}
	dur("max-wall", f.maxWall, &o.Budget.Wall)
	dur("max-cpu", f.maxCPU, &o.Budget.CPU)
	size("max-output", f.maxOutput, &o.Budget.OutputBytes)
	size("max-memory", f.maxMemory, &o.Budget.Memory)
	size("max-scratch", f.maxScratch, &o.Budget.Scratch)
	size("max-write", f.maxWrite, &o.Budget.Write)
	if f.maxOps < 0 || f.maxPids < 0 {
		errs = append(errs, errors.New("--max-ops and --max-pids must be positive"))
	}
	o.Budget.Ops, o.Budget.Pids = f.maxOps, f.maxPids
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	wd, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	if f.wd, err = pathspec.Abs(wd, "."); err != nil {
		return nil, fmt.Errorf("the current folder %q: %w", wd, err)
	}
	return p.With(o, f.wd)
}

// Cwd returns the working folder inside the sandbox for the policy p that
// Build returned. A relative --cwd resolves against the current folder like
// every path on the command line; an absolute one is a folder as the
// sandbox sees it. Without --cwd it is the current folder when p grants it
// (fs_read or fs_write, not hidden by fs_deny), as a command started with
// a relative path expects; else "", the library's default (the first
// fs_write grant, else /tmp). A host folder below a placed grant is named
// at its place. Cwd does not check that a --cwd outside the grants is
// allowed: the sandbox refuses it.
func (f *PolicyFlags) Cwd(p *policy.Policy) (string, error) {
	if f.cwd != "" {
		if f.wd == "" {
			return "", errors.New("--cwd: the current folder is unknown: call Build first")
		}
		if strings.HasPrefix(f.cwd, "/") {
			return f.cwd, nil
		}
		c, err := pathspec.Abs(f.wd, f.cwd)
		if err != nil {
			return "", fmt.Errorf("--cwd %q: %w", f.cwd, err)
		}
		return p.Inside(c), nil
	}
	if f.wd != "" && p.CanRead(f.wd) {
		return p.Inside(f.wd), nil
	}
	return "", nil
}

// NewFlagSet returns a flag set that reports errors on stderr and prints
// synopsis and the flags as its usage. Parse it with Parse, which prints
// the usage that -h and --help ask for on stdout.
func NewFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: %s\n\nflags:\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// IsHelp reports whether the argument a asks for the usage: -h, -help or
// --help.
func IsHelp(a string) bool { return a == "-h" || a == "-help" || a == "--help" }

// Parse parses args with fs. For -h or --help it prints fs's usage on
// stdout (help was asked for, so it is the output) and returns
// flag.ErrHelp: the command exits 0. For a bad flag it prints the error
// and the usage on fs's output (stderr) and returns the error.
func Parse(fs *flag.FlagSet, args []string, stdout io.Writer) error {
	usage := fs.Usage
	fs.Usage = func() {} // printed below, where it belongs
	err := fs.Parse(args)
	fs.Usage = usage
	switch {
	case errors.Is(err, flag.ErrHelp):
		out := fs.Output()
		fs.SetOutput(stdout)
		fs.Usage()
		fs.SetOutput(out)
	case err != nil:
		fs.Usage()
	}
	return err
}

// ReadPolicyFile reads and validates a policy file named on the command
// line (--policy, --ceiling, --config, policy check): at most
// policy.MaxInputSize bytes are read, and relative paths in it resolve
// against its folder. Every command reads policy files through it.
func ReadPolicyFile(file string) (*policy.Policy, error) {
	abs, err := filepath.Abs(file)
	if err != nil {
		return nil, fmt.Errorf("read policy %s: %w", file, err)
	}
	f, err := os.Open(abs)
	if err != nil {
		return nil, fmt.Errorf("read policy: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, policy.MaxInputSize+1))
	if err != nil {
		return nil, fmt.Errorf("read policy %s: %w", file, err)
	}
	return policy.Parse(data, policy.ParseOptions{File: file, BaseDir: filepath.Dir(abs)})
}
