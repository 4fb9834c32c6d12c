package oci

import (
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/airlock-sandbox/airlock/plan"
	"github.com/airlock-sandbox/airlock/policy"
)

// DefaultHostID is the host uid and gid that uid 0 in the bundle maps to
// when neither the plan (IDMap.HostUID) nor Options.HostID names one: the
// first id of the range a root supervisor picks from (plan.IDMap), far
// above ordinary accounts and the usual subordinate id ranges.
const DefaultHostID = 1 << 30

// Version is the ociVersion written. The config uses what runtime-spec
// 1.0.2 defines, plus defaultErrnoRet (1.1), which an older runtime ignores
// and whose value, EPERM, is its default anyway, and the recursive mount
// attributes rro, rnosuid, rnodev and rnoexec (1.1), which the runtime
// must know: runc 1.1 or later, crun 1.8 (the versions the tests run).
// crun 1.8 refuses any version but 1.0.x, so the bundle claims the oldest
// one it fits.
const Version = "1.0.2"

// FilesDir is the bundle subdirectory holding the synthesized files that
// the config binds read-only (/etc/passwd, /etc/hosts, ...).
const FilesDir = "files"

// PolicyAnnotation is the config.json annotation that carries the policy
// the bundle was exported from, as canonical policy JSON.
const PolicyAnnotation = "org.airlock-sandbox.policy"

// Options configures Config. The zero value exports a bundle whose root is
// the "rootfs" directory next to config.json, for this binary's
// architecture, running as DefaultHostID.
type Options struct {
	// BundleDir is the absolute directory config.json will live in; bind
	// sources of synthesized files are made absolute against it. Empty
	// leaves them relative to the bundle, which runc resolves but other
	// runtimes may not.
	BundleDir string

	// Rootfs is root.path: relative to the bundle or absolute. Empty means
	// "rootfs", which Write creates as an empty skeleton holding only the
	// mount points and the plan's symlinks (everything else is bound).
	Rootfs string

	// HostID is the unprivileged host uid and gid that uid and gid 0
	// inside map to, when the plan's IDMap has no HostUID and HostGID
	// picked by a runtime. Zero means DefaultHostID. fs_write
	// directories must be writable by it.
	HostID uint32

	// Arch is the GOARCH the seccomp section is written for. Empty means
	// the architecture this binary was built for.
	Arch string

	// StageDir is the absolute host folder holding the stage (see
	// plan/stage.go), for a supervisor that copies the writes
	// back: fs_write folders become overlays of StageDir/N/lower (the
	// grant, attached there by the supervisor) whose upper and work folders
	// are StageDir/N/upper and StageDir/N/work, fs_write files binds of
	// StageDir/N/file. The supervisor creates them, writable by HostID.
	// Empty exports for a runtime alone: fs_write grants are plain
	// read-write binds, and nothing bounds what the container writes to
	// them (max_write and the write-back refusals need a supervisor).
	StageDir string

	// Init is the absolute host path of airlock's init binary, which the
	// bundle binds read-only at InitPath and runs as its pid 1 in front of
	// the command: it forwards signals, reaps orphans and enforces
	// max_wall (exit 124), none of which a runtime does for a bare
	// command. Empty leaves the command as pid 1, for a supervisor that
	// does all that itself (airlock's own --isolation oci).
	Init string
}

// InitPath is where a bundle with Options.Init binds airlock's init inside
// (internal/enforce/nsinit.BundleInitPath).
const InitPath = "/.airlock/init"

// File is one thing Write puts in the bundle besides config.json.
type File struct {
	Path string // slash-separated, relative to the bundle directory
	Data string // content of a regular file (mode 0444)
	Link string // when set, Path is a symlink with this text instead
	Dir  bool   // when set, Path is an empty directory instead
}

// Bundle is an exported OCI bundle, in memory.
type Bundle struct {
	Spec  *specs.Spec
	Files []File // synthesized files and, with the default Rootfs, the rootfs symlinks

	ownRootfs bool // Write creates the rootfs skeleton (Options.Rootfs was empty)
}

// rlimitNames maps the plan's getrlimit(2) names to OCI types.
var rlimitNames = map[string]string{
	"core": "RLIMIT_CORE", "nofile": "RLIMIT_NOFILE", "fsize": "RLIMIT_FSIZE", "cpu": "RLIMIT_CPU",
	"nproc": "RLIMIT_NPROC", "as": "RLIMIT_AS", "data": "RLIMIT_DATA", "stack": "RLIMIT_STACK",
}

// Config builds the bundle for a compiled plan. The policy it came from is
// only embedded (PolicyAnnotation); everything the runtime enforces comes
// from the plan. It fails when a plan step has no OCI equivalent.
func Config(pl *plan.Plan, p *policy.Policy, opts Options) (*Bundle, error) {
	if pl == nil || p == nil {
		return nil, errors.New("oci: config: plan and policy are required")
	}
	// An exported sandbox has no connect broker: its programs use the
	// proxy variables, and there is no DNS inside.
	pl, err := plan.WithoutTransparentEgressCopy(pl)
	if err != nil {
		return nil, err
	}
	uids, gids, err := idMappings(pl.IDMap, opts.HostID)
	if err != nil {
		return nil, err
	}
	ns, err := namespaces(pl.Namespaces)
	if err != nil {
		return nil, err
	}
	rootfs := opts.Rootfs
	if rootfs == "" {
		rootfs = "rootfs"
	}
	sc, err := Seccomp(pl.Seccomp, opts.Arch)
	if err != nil {
		return nil, err
	}
	if len(pl.Capabilities) != 0 || !pl.NoNewPrivileges {
		return nil, fmt.Errorf("oci: config: the plan keeps capabilities %v or lacks no_new_privileges: compile it with plan.Compile", pl.Capabilities)
	}
	pj, err := p.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("oci: config: policy: %w", err)
	}
	b := &Bundle{Spec: &specs.Spec{
		Version:     Version,
		Root:        &specs.Root{Path: rootfs, Readonly: true},
		Hostname:    pl.Hostname,
		Annotations: map[string]string{PolicyAnnotation: string(pj)},
		Process: &specs.Process{
			User: specs.User{UID: 0, GID: 0},
			Args: pl.Argv,
			Env:  pl.Env,
			Cwd:  pl.Cwd,
			// Empty sets, not nil: a nil Capabilities leaves the runtime's
			// defaults in place. The plan keeps none (checked above).
			Capabilities:    &specs.LinuxCapabilities{},
			NoNewPrivileges: pl.NoNewPrivileges,
		},
		Linux: &specs.Linux{
			UIDMappings: uids,
			GIDMappings: gids,
			Namespaces:  ns,
			Resources:   resources(pl.Limits),
			Seccomp:     sc,
			MaskedPaths: pl.MaskedPaths,
			// /dev is the runtime's own tmpfs, outside max_scratch: read-only
			// once the runtime has made its nodes, as under the namespaces
			// backend (device nodes stay writable on a read-only mount).
			ReadonlyPaths: append(slices.Clone(pl.ReadonlyPaths), "/dev"),
		},
	}}
	for _, r := range pl.Rlimits {
		name, ok := rlimitNames[r.Resource]
		if !ok {
			return nil, fmt.Errorf("oci: config: rlimit %q has no OCI name", r.Resource)
		}
		if r.Hard < r.Value {
			return nil, fmt.Errorf("oci: config: rlimit %s: hard %d below soft %d", r.Resource, r.Hard, r.Value)
		}
		b.Spec.Process.Rlimits = append(b.Spec.Process.Rlimits, specs.POSIXRlimit{Type: name, Hard: r.Hard, Soft: r.Value})
	}
	b.ownRootfs = opts.Rootfs == ""
	mounts := pl.Mounts
	if opts.Init != "" {
		if !filepath.IsAbs(opts.Init) {
			return nil, fmt.Errorf("oci: config: init binary %q: give an absolute host path", opts.Init)
		}
		// The deadline travels in the arguments, as a Go duration.
		b.Spec.Process.Args = append([]string{InitPath, pl.Limits.Wall.String(), "--"}, pl.Argv...)
		mounts = append(slices.Clone(mounts), plan.Mount{Kind: plan.KindBind, Source: opts.Init, Target: InitPath, Exec: true, File: true, Origin: plan.OriginSandbox})
	}
	if err := b.addMounts(mounts, opts.BundleDir, opts.StageDir, b.ownRootfs); err != nil {
		return nil, err
	}
	return b, nil
}

// namespaceTypes maps the plan's namespaces to OCI's names.
var namespaceTypes = map[plan.Namespace]specs.LinuxNamespaceType{
	plan.NamespaceUser: specs.UserNamespace, plan.NamespaceMount: specs.MountNamespace,
	plan.NamespacePID: specs.PIDNamespace, plan.NamespaceNet: specs.NetworkNamespace,
	plan.NamespaceIPC: specs.IPCNamespace, plan.NamespaceUTS: specs.UTSNamespace,
	plan.NamespaceCgroup: specs.CgroupNamespace,
}

// namespaces lists the plan's namespaces, each a new one (no path).
func namespaces(ns []plan.Namespace) ([]specs.LinuxNamespace, error) {
	if len(ns) == 0 {
		return nil, errors.New("oci: config: the plan lists no namespaces: compile it with plan.Compile")
	}
	out := make([]specs.LinuxNamespace, 0, len(ns))
	for _, n := range ns {
		t, ok := namespaceTypes[n]
		if !ok {
			return nil, fmt.Errorf("oci: config: namespace %q has no OCI form", n)
		}
		out = append(out, specs.LinuxNamespace{Type: t})
	}
	return out, nil
}

// idMappings maps 0 inside to one host id, by the plan's rule: the ids a
// runtime picked and recorded in the plan, else hostID, else
// DefaultHostID. The bundle is run by a root runtime, so an unfilled plan
// gets an id from the unprivileged range, never the host's root.
func idMappings(m plan.IDMap, hostID uint32) (uids, gids []specs.LinuxIDMapping, err error) {
	if m.Size != 1 {
		return nil, nil, fmt.Errorf("oci: config: the plan maps %d ids: airlock maps exactly one (root inside)", m.Size)
	}
	uid, gid := m.HostUID, m.HostGID
	if uid == 0 || gid == 0 {
		uid = hostID
		if uid == 0 {
			uid = DefaultHostID
		}
		gid = uid
	}
	return []specs.LinuxIDMapping{{ContainerID: 0, HostID: uid, Size: m.Size}},
		[]specs.LinuxIDMapping{{ContainerID: 0, HostID: gid, Size: m.Size}}, nil
}

// resources maps the plan's limits onto cgroup limits. max_cpu is CPU
// time, not a rate, so it has no cgroup form (the plan's RLIMIT_CPU
// carries it).
func resources(lim plan.Limits) *specs.LinuxResources {
	mem, pids := lim.Memory, lim.Pids
	swap := mem // memory+swap = memory: no swap
	return &specs.LinuxResources{
		Memory: &specs.LinuxMemory{Limit: &mem, Swap: &swap},
		Pids:   &specs.LinuxPids{Limit: &pids},
	}
}

// addMounts translates the plan's root filesystem steps, in order.
func (b *Bundle) addMounts(ms []plan.Mount, bundleDir, stageDir string, ownRootfs bool) error {
	spec := b.Spec
	// /dev: a fresh tmpfs; the plan binds the device nodes into it.
	spec.Mounts = append(spec.Mounts, specs.Mount{Destination: "/dev", Type: "tmpfs", Source: "tmpfs",
		Options: []string{"nosuid", "noexec", "strictatime", "mode=755", "size=65536k", "nr_inodes=4096"}})
	for _, m := range ms {
		switch m.Kind {
		case plan.KindBind:
			spec.Mounts = append(spec.Mounts, specs.Mount{Destination: m.Target, Type: "bind", Source: m.Source, Options: bindOptions(m)})
		case plan.KindTmpfs:
			spec.Mounts = append(spec.Mounts, specs.Mount{Destination: m.Target, Type: "tmpfs", Source: "tmpfs",
				Options: []string{"nosuid", "nodev", "noexec", "mode=1777", fmt.Sprintf("size=%d", m.Size), fmt.Sprintf("nr_inodes=%d", m.Inodes())}})
		case plan.KindProc:
			spec.Mounts = append(spec.Mounts, specs.Mount{Destination: m.Target, Type: "proc", Source: "proc",
				Options: []string{"nosuid", "nodev", "noexec"}})
		case plan.KindFile:
			rel := path.Join(FilesDir, m.Target)
			b.Files = append(b.Files, File{Path: rel, Data: m.Data})
			src := rel
			if bundleDir != "" {
				src = filepath.Join(bundleDir, filepath.FromSlash(rel))
			}
			spec.Mounts = append(spec.Mounts, specs.Mount{Destination: m.Target, Type: "bind", Source: src,
				Options: []string{"bind", "ro", "nosuid", "nodev", "noexec"}})
		case plan.KindSymlink:
			// The runtimes make /dev/fd and /dev/std* themselves in the /dev
			// tmpfs; other links live in the (read-only) root.
			if strings.HasPrefix(m.Target, "/dev/") {
				continue
			}
			if ownRootfs {
				b.Files = append(b.Files, File{Path: path.Join("rootfs", m.Target), Link: m.Source})
			}
		case plan.KindDir:
			if ownRootfs {
				b.Files = append(b.Files, File{Path: path.Join("rootfs", m.Target), Dir: true})
			}
		case plan.KindStage:
			// Made by the supervisor outside the container (StageDir).
		case plan.KindOverlay, plan.KindStagedFile:
			spec.Mounts = append(spec.Mounts, stagedMount(m, stageDir))
		case plan.KindReadonly:
			// The host path itself, read-only, over the grant's view of it:
			// the same content (the grant's lower layer is that host folder).
			spec.Mounts = append(spec.Mounts, specs.Mount{Destination: m.Target, Type: "bind", Source: m.Target, Options: bindOptions(m)})
		case plan.KindHide:
			if m.Dir {
				spec.Mounts = append(spec.Mounts, specs.Mount{Destination: m.Target, Type: "tmpfs", Source: "tmpfs",
					Options: []string{"ro", "nosuid", "nodev", "noexec", "size=4k", "nr_inodes=2", "mode=0555"}})
				continue
			}
			rel := path.Join(FilesDir, ".airlock-empty")
			if !hasFile(b.Files, rel) {
				b.Files = append(b.Files, File{Path: rel})
			}
			src := rel
			if bundleDir != "" {
				src = filepath.Join(bundleDir, filepath.FromSlash(rel))
			}
			spec.Mounts = append(spec.Mounts, specs.Mount{Destination: m.Target, Type: "bind", Source: src,
				Options: []string{"bind", "ro", "nosuid", "nodev", "noexec"}})
		default:
			return fmt.Errorf("oci: config: mount %s at %s: kind has no OCI form", m.Kind, m.Target)
		}
	}
	return nil
}

// bindOptions spells out the plan's flags (plan.Mount.Flags) for a bind.
// A recursive bind of a folder is an rbind whose flags are recursive too
// (rro, rnosuid, rnodev, rnoexec: mount_setattr(2) with AT_RECURSIVE;
// runtime-spec 1.1, see Version), as airlock's own init sets them.
// Without them runc makes only the top mount read-only and leaves a mount
// below a grant writable, with its suid bits and device nodes, and crun
// 1.8 does not apply nosuid, nodev or noexec to a writable bind at all. A
// file has nothing below it, and crun refuses recursive attributes on one,
// so a file's rbind carries the plain flags only.
func bindOptions(m plan.Mount) []string {
	f := m.Flags()
	o := []string{"bind", "rw"}
	if f.Recursive {
		o[0] = "rbind"
	}
	if f.ReadOnly {
		o[1] = "ro"
	}
	rec := f.Recursive && !m.File
	for _, opt := range []struct {
		on       bool
		top, rec string
	}{{f.ReadOnly, "", "rro"}, {f.NoSuid, "nosuid", "rnosuid"}, {f.NoDev, "nodev", "rnodev"}, {f.NoExec, "noexec", "rnoexec"}} {
		if opt.on && opt.top != "" {
			o = append(o, opt.top)
		}
		if opt.on && rec {
			o = append(o, opt.rec)
		}
	}
	return o
}

// stagedMount is a staged fs_write grant: with a stage, an overlay (or a
// bind of the staged copy); without one, a plain read-write bind.
func stagedMount(m plan.Mount, stageDir string) specs.Mount {
	if stageDir == "" {
		return specs.Mount{Destination: m.Target, Type: "bind", Source: m.Source, Options: bindOptions(m)}
	}
	dir := filepath.Join(stageDir, fmt.Sprint(m.Stage))
	if m.Kind == plan.KindStagedFile {
		return specs.Mount{Destination: m.Target, Type: "bind", Source: filepath.Join(dir, "file"), Options: bindOptions(m)}
	}
	// userxattr: the runtime mounts it inside the container's user
	// namespace, where overlayfs may set only user.* xattrs (Linux 5.11).
	return specs.Mount{Destination: m.Target, Type: "overlay", Source: "overlay", Options: []string{
		"userxattr", "lowerdir=" + filepath.Join(dir, "lower"), "upperdir=" + filepath.Join(dir, "upper"), "workdir=" + filepath.Join(dir, "work"),
		"nosuid", "nodev", "noexec"}}
}

func hasFile(fs []File, p string) bool {
	for _, f := range fs {
		if f.Path == p {
			return true
		}
	}
	return false
}
