package sandbox

import (
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/airlock-sandbox/airlock/plan"
)

// Plan compiles the plan this Cmd would run, without running anything.
func (c *Cmd) Plan() (*plan.Plan, error) {
	if c.Policy == nil {
		return nil, errNoPolicy
	}
	return plan.Compile(c.Policy, plan.Request{Argv: c.Args, Cwd: c.Dir, CommandIsGranted: c.CommandIsGranted}, &hostFS{})
}

var errNoPolicy = errors.New("sandbox: Config.Policy is nil: build one with policy.Parse, policy.New or policy.Default")

// hostFS answers plan.Host from the real filesystem. It is portable:
// explain and export compile plans on any OS.
type hostFS struct {
	env     func(string) (string, bool)
	loaders map[string]bool
}

func (h *hostFS) Lstat(path string) (exists, dir bool, link string, err error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return false, false, "", nil // ENOTDIR: a parent is a file (a single-file grant's .git)
	}
	if err != nil {
		return false, false, "", err
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		l, err := os.Readlink(path)
		return true, false, l, err
	}
	return true, fi.IsDir(), "", nil
}

// LookTool finds name on plan.SandboxPath (or at its absolute path) and
// returns where the sandbox sees it and the real file to bind there.
func (h *hostFS) LookTool(name string) (inside, real string, err error) {
	var candidates []string
	if strings.HasPrefix(name, "/") {
		candidates = []string{filepath.Clean(name)}
	} else {
		if strings.Contains(name, "/") {
			return "", "", fmt.Errorf("tool %q: use a bare name or an absolute path", name)
		}
		for _, d := range filepath.SplitList(plan.SandboxPath) {
			candidates = append(candidates, filepath.Join(d, name))
		}
	}
	for _, c := range candidates {
		r, err := filepath.EvalSymlinks(c)
		if err != nil {
			continue
		}
		fi, err := os.Stat(r)
		if err != nil || !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
			continue
		}
		dir, err := filepath.EvalSymlinks(filepath.Dir(c))
		if err != nil {
			continue
		}
		h.noteLoader(r)
		return filepath.Join(dir, filepath.Base(c)), r, nil
	}
	return "", "", fmt.Errorf("%w: %q is not an executable file on %s", ErrNotFound, name, plan.SandboxPath)
}

// ErrNotFound is wrapped when the command or a tool does not exist (exit 127).
var ErrNotFound = errors.New("sandbox: not found")

func (h *hostFS) noteLoader(path string) {
	f, err := elf.Open(path)
	if err != nil {
		return // a script: its interpreter must itself be an allowed tool
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		b := make([]byte, p.Filesz)
		if _, err := p.ReadAt(b, 0); err == nil {
			if h.loaders == nil {
				h.loaders = map[string]bool{}
			}
			h.loaders[strings.TrimRight(string(b), "\x00")] = true
		}
	}
}

func (h *hostFS) Loader() []string {
	var out []string
	for _, l := range slices.Sorted(maps.Keys(h.loaders)) {
		if _, err := os.Stat(l); err == nil {
			out = append(out, l)
		}
	}
	return out
}

func (h *hostFS) Env(name string) (string, bool) {
	if h.env == nil {
		return os.LookupEnv(name)
	}
	return h.env(name)
}
