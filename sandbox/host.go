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

	"github.com/airlock-sandbox/airlock/internal/image"
	"github.com/airlock-sandbox/airlock/plan"
	"github.com/airlock-sandbox/airlock/policy"
)

// Plan compiles the plan this Cmd would run on its isolation, without
// running anything. What a run makes for itself stands in: the landlock
// backend's scratch folder is named $TMPDIR/airlock-scratch-RANDOM (a
// run's name is random), and a policy's credentials add no trust bundle
// (a run's holds the CA it makes; an export adds no credential).
func (c *Cmd) Plan() (*plan.Plan, error) {
	if c.Policy == nil {
		return nil, errNoPolicy
	}
	return c.Config.compile(c.request(c.standIn()))
}

// Explain is Plan as the run's init gets it, for airlock explain: a
// policy's credentials add the trust bundle at plan.CABundlePath (on
// every backend but landlock, which refuses them), whose content, the
// host's roots and the CA each run makes, stands as a placeholder here.
func (c *Cmd) Explain() (*plan.Plan, error) {
	if c.Policy == nil {
		return nil, errNoPolicy
	}
	t := c.standIn()
	if t.Backend != plan.BackendLandlock {
		t.CABundle = func([]string) ([]byte, error) {
			return []byte("# the host's trusted roots (or those SSL_CERT_FILE names), then the CA airlock makes for each run\n"), nil
		}
	}
	return c.Config.compile(c.request(t))
}

// standIn is the target of c's isolation with a stand-in for the landlock
// backend's scratch folder.
func (c *Cmd) standIn() plan.Target {
	t := plan.Target{Backend: targetOf(c.Isolation)}
	if t.Backend == plan.BackendLandlock {
		t.Scratch = filepath.Join(os.TempDir(), "airlock-scratch-RANDOM")
	}
	return t
}

// request is the plan.Request of c's command, for target t.
func (c *Cmd) request(t plan.Target) plan.Request {
	return plan.Request{Argv: c.Args, Cwd: c.Dir, CommandIsGranted: c.CommandIsGranted, Target: t}
}

// targetOf is the backend a plan is compiled for under an isolation
// (Config.Isolation); an unknown one compiles for the namespaces backend
// (backendFor refuses it).
func targetOf(isolation string) plan.Backend {
	switch isolation {
	case IsolationLandlock, IsolationOCI, IsolationGVisor, IsolationMicroVM:
		return plan.Backend(isolation)
	}
	return plan.BackendNamespaces
}

// compile compiles req under the policy as the sandbox sees it (its view:
// placed grants at their places), in the policy's environment, and then
// points every grant's mount at its host path.
func (cfg Config) compile(req plan.Request) (*plan.Plan, error) {
	h, err := cfg.environment(&req)
	if err != nil {
		return nil, err
	}
	p := cfg.Policy
	if !p.Placed() {
		return plan.Compile(p, req, h)
	}
	pl, err := plan.Compile(p.View(), req, placedHost{h, p})
	if err != nil {
		return nil, err
	}
	for i, m := range pl.Mounts {
		if m.Origin != plan.OriginFSRead && m.Origin != plan.OriginFSWrite || m.Source == "" {
			continue
		}
		if host, ok := p.HostOf(m.Source); ok {
			pl.Mounts[i].Source = host
		}
	}
	return pl, nil
}

// placedHost answers Compile's questions about the view's paths: a path at
// a placed grant's place is asked of the host path it stands for.
type placedHost struct {
	*hostFS
	p *policy.Policy
}

func (h placedHost) Lstat(path string) (exists, dir bool, link string, err error) {
	if host, ok := h.p.HostOf(path); ok {
		path = host
	}
	return h.hostFS.Lstat(path)
}

// environment resolves the policy's rootfs for req: a folder as it is, or
// an image unpacked (once, cached by the digest of what it unpacks to, in
// a confined child: see internal/image) below Config.ImageCache, and
// returns the hostFS that looks tools up in it.
func (cfg Config) environment(req *plan.Request) (*hostFS, error) {
	root := cfg.Policy.Rootfs()
	if root == "" || !image.IsImage(root) {
		return newHostFS(root)
	}
	cache := cfg.ImageCache
	if cache == "" {
		dir, err := os.UserCacheDir()
		if err != nil {
			return nil, fmt.Errorf("rootfs %s is an image and there is no cache folder to unpack it in (%v): set Config.ImageCache, or XDG_CACHE_HOME", root, err)
		}
		cache = filepath.Join(dir, "airlock", "images")
	}
	if err := os.MkdirAll(cache, 0o700); err != nil {
		return nil, fmt.Errorf("image cache %s: %w", cache, err)
	}
	// The cache's own path may go through symlinks ($HOME); what is
	// checked below is the unpacked root's real path.
	cache, err := filepath.EvalSymlinks(cache)
	if err != nil {
		return nil, fmt.Errorf("image cache: %w", err)
	}
	u, err := unpackImage(root, cache)
	if err != nil {
		return nil, fmt.Errorf("rootfs: %w", err)
	}
	req.Rootfs, req.RootfsDigest = u.Dir, u.Digest
	return newHostFS(u.Dir)
}

var errNoPolicy = errors.New("sandbox: Config.Policy is nil: build one with policy.Parse, policy.New or policy.Default")

// hostFS answers plan.Host from the real filesystem. It is portable:
// explain and export compile plans on any OS.
type hostFS struct {
	// root is the environment's root filesystem, where tools and loaders
	// are looked up, symlinks resolved within it; "" is the host's own.
	root    string
	env     func(string) (string, bool)
	loaders map[string]bool
}

// newHostFS checks an environment's root filesystem and returns the
// hostFS that looks tools up in it ("" for the host's own). The root must
// be a real folder (no symlink in its path), owned by root or by this
// user and writable by no one else: what the sandbox sees as its /usr/lib
// and tools must not change under it.
func newHostFS(root string) (*hostFS, error) {
	if root == "" {
		return &hostFS{}, nil
	}
	real, err := filepath.EvalSymlinks(root)
	if err != nil {
		return nil, fmt.Errorf("rootfs %s: %w: name a folder holding a root filesystem (e.g. made by debootstrap)", root, err)
	}
	if real != root {
		return nil, fmt.Errorf("rootfs %s: the path goes through a symlink (it is %s): name the real folder", root, real)
	}
	fi, err := os.Stat(root)
	if err != nil {
		return nil, fmt.Errorf("rootfs %s: %w", root, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("rootfs %s is not a folder: name a folder holding a root filesystem (an image must be unpacked first)", root)
	}
	if err := ownedSafely(root, fi); err != nil {
		return nil, err
	}
	for _, d := range []string{"/usr", "/usr/lib"} {
		// Lstat: a link to the host's /usr/lib would bind the host's.
		if fi, err := os.Lstat(root + d); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("rootfs %s has no %s folder (a real folder, not a symlink): it does not look like a root filesystem (debootstrap, or an unpacked image, makes one)", root, d)
		}
	}
	return &hostFS{root: root}, nil
}

// Lstat answers for a host path. Inside the environment's root, a symlink
// above the asked path is refused, so the host's own folders can never
// stand in for the environment's (ROOT/usr -> /usr).
func (h *hostFS) Lstat(path string) (exists, dir bool, link string, err error) {
	if h.root != "" && strings.HasPrefix(path, h.root+"/") {
		rel := strings.TrimPrefix(path, h.root)
		for p := filepath.Dir(rel); p != "/" && p != "."; p = filepath.Dir(p) {
			fi, err := os.Lstat(h.root + p)
			if err == nil && fi.Mode()&fs.ModeSymlink != 0 {
				return false, false, "", fmt.Errorf("rootfs %s: %s is a symlink, above %s: an environment's system folders must be real folders", h.root, p, rel)
			}
		}
	}
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
	candidates, err := toolCandidates(name)
	if err != nil {
		return "", "", err
	}
	if h.root != "" {
		return h.lookToolIn(name, candidates)
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

// toolCandidates returns where a tool name may be: its absolute path, or
// each folder of plan.SandboxPath for a bare name.
func toolCandidates(name string) ([]string, error) {
	if strings.HasPrefix(name, "/") {
		return []string{filepath.Clean(name)}, nil
	}
	if strings.Contains(name, "/") {
		return nil, fmt.Errorf("tool %q: use a bare name or an absolute path", name)
	}
	var out []string
	for _, d := range filepath.SplitList(plan.SandboxPath) {
		out = append(out, filepath.Join(d, name))
	}
	return out, nil
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
		var err error
		if h.root == "" {
			_, err = os.Stat(l)
		} else {
			_, err = resolveIn(h.root, l) // an environment's loader is an inside path
		}
		if err == nil {
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

// lookToolIn is LookTool inside the environment's root filesystem: the
// candidates are inside paths, each resolved with every symlink taken
// relative to the root (an absolute link leads to ROOT/..., and .. stops
// at the root), so nothing outside the root is ever bound.
func (h *hostFS) lookToolIn(name string, candidates []string) (inside, real string, err error) {
	for _, c := range candidates {
		r, err := resolveIn(h.root, c)
		if err != nil {
			continue
		}
		fi, err := os.Lstat(h.root + r)
		if err != nil || !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
			continue
		}
		dir, err := resolveIn(h.root, filepath.Dir(c))
		if err != nil {
			continue
		}
		h.noteLoader(h.root + r)
		return filepath.Join(dir, filepath.Base(c)), h.root + r, nil
	}
	return "", "", fmt.Errorf("%w: %q is not an executable file on %s in the environment %s", ErrNotFound, name, plan.SandboxPath, h.root)
}

// maxLinks bounds the symlinks resolveIn follows, as the kernel's 40.
const maxLinks = 40

// resolveIn returns the inside path p with every symlink resolved within
// root: absolute link text starts again at root, and .. never climbs
// above it. With root "" it resolves on the host.
func resolveIn(root, p string) (string, error) {
	// Not cleaned first: .. after a symlink is the parent of its target.
	rest := strings.Split(p, "/")
	cur, links := "/", 0
	for len(rest) > 0 {
		part := rest[0]
		rest = rest[1:]
		switch part {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, part)
		fi, err := os.Lstat(root + next)
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		if links++; links > maxLinks {
			return "", fmt.Errorf("%s: %w", p, syscall.ELOOP)
		}
		link, err := os.Readlink(root + next)
		if err != nil {
			return "", err
		}
		if strings.HasPrefix(link, "/") {
			cur = "/"
		}
		rest = append(strings.Split(link, "/"), rest...)
	}
	return cur, nil
}

// ownedSafely refuses an environment's root that someone other than root
// or this user owns, or that its group or others may write.
func ownedSafely(root string, fi fs.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil // not a Unix file system: the sandbox runs on Linux only
	}
	if st.Uid != 0 && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("rootfs %s is owned by uid %d: an environment must be owned by root or by the user running airlock", root, st.Uid)
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("rootfs %s is writable by its group or others (mode %04o): chmod go-w it", root, fi.Mode().Perm())
	}
	return nil
}
