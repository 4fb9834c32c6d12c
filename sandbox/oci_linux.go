package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/airlock-sandbox/airlock/export/oci"
	"github.com/airlock-sandbox/airlock/internal/enforce/cgroup"
	"github.com/airlock-sandbox/airlock/internal/enforce/namespace"
	"github.com/airlock-sandbox/airlock/internal/enforce/nsinit"
	"github.com/airlock-sandbox/airlock/internal/gvisor"
)

// ociRuntime is one runtime airlock can drive.
type ociRuntime struct {
	name   string
	bin    string
	hybrid bool // needs the cgroup2 mount hidden on hybrid hosts
	// sentry is set for gVisor's runsc: the container runs on a user-space
	// kernel (nsinit.LaunchInfo.Sentry), on platform.
	sentry   bool
	platform string
	flags    []string // before every subcommand
}

func findRuntime(name string) (ociRuntime, error) {
	candidates := map[string][]string{
		"runc":  {"/usr/sbin/runc", "/usr/bin/runc", "/usr/local/sbin/runc", "/usr/local/bin/runc"},
		"crun":  {"/usr/bin/crun", "/usr/local/bin/crun"},
		"runsc": gvisor.Candidates,
	}
	paths, ok := candidates[name]
	if !ok {
		return ociRuntime{}, fmt.Errorf("runtime %q: airlock drives runc, crun and runsc (gVisor)", name)
	}
	for _, p := range paths {
		if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 != 0 {
			rt := ociRuntime{name: name, bin: p, hybrid: name == "crun"}
			if name == "runsc" {
				rt.sentry, rt.platform = true, gvisor.Platform(p)
				// No network device (the sentry's loopback only: the
				// proxy comes in through a unix socket), and unix sockets
				// the bundle binds (only that one) may be connected. Not
				// --oci-seccomp: this runsc answers every errno rule with
				// EPERM (errnoRet is ignored), so clone3's ENOSYS becomes
				// EPERM and Go programs crash; the workload's syscalls are
				// gVisor's kernel's to serve, and the report says so.
				rt.flags = []string{"--platform=" + rt.platform, "--network=none", "--host-uds=open"}
			}
			return rt, nil
		}
	}
	return ociRuntime{}, fmt.Errorf("runtime %s is not installed (looked in %v): install it or use the default isolation", name, paths)
}

// ociBackend runs the plan as an OCI bundle under runc or crun, driven by
// the OCI launcher (nsinit.Launch): the container's pid 1 is an idle
// program, and each exec is `RUNTIME exec` with the plan's process.
type ociBackend struct{ runtime string }

// launch prepares the bundle, the network namespace with the proxy's
// listeners, the stage and the launcher, and starts the launcher.
func (o ociBackend) launch(b *box) (*control, error) {
	if !namespace.HostAdmin() {
		return nil, errors.New("isolation oci needs root on the host (CAP_SYS_ADMIN in the initial user namespace: the bundle maps the sandbox to an unprivileged host id), which this process lacks (a non-root user, or root in a container); use the default isolation")
	}
	runtimeName := o.runtime
	if runtimeName == "" {
		runtimeName = "runc"
	}
	rt, err := findRuntime(runtimeName)
	if err != nil {
		return nil, err
	}
	// The runtime makes the network namespace and applies what it
	// applies: no connect broker there, so no transparent egress (the
	// plan is compiled without, plan.BackendOCI).
	if b.pl.Proxy {
		b.enf.Egress = EgressProxy
	}
	id := pickHostID(b.pl.IDMap) // the bundle maps root inside to it (oci.Options.HostID)
	if rt.sentry {
		// gVisor has no overlay of a host folder to stage writes on: they
		// are made in place, which the policy must accept, by the
		// container's host uid.
		if err := sentryWrites(b); err != nil {
			return nil, err
		}
		if err := checkWritable(b.cfg.Policy.FSWrite()); err != nil {
			return nil, err
		}
	}
	ociJanitor() // cheap: a long-lived supervisor (serve) cleans up after others on every OCI run
	// The work directory carries the supervisor's pid and start time, so a
	// later run can tell it was left by a supervisor that died.
	name, err := cgroup.NewName(os.Getpid())
	if err != nil {
		return nil, err
	}
	tmp := filepath.Join(os.TempDir(), name)
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return nil, err
	}
	l := &ociLaunch{b: b, rt: rt, id: id, name: name, tmp: tmp}
	ctl, err := l.start()
	if err != nil {
		l.cleanup()
		return nil, err
	}
	return ctl, nil
}

// ociLaunch is one OCI sandbox being started, and what its teardown removes.
type ociLaunch struct {
	b        *box
	rt       ociRuntime
	id       int
	name     string
	tmp      string
	closers  []*os.File
	stageDir string
}

func (l *ociLaunch) start() (*control, error) {
	b := l.b
	var err error
	if b.stage, err = openStaging(b.pl); err != nil {
		return nil, err
	}
	stageFD := -1
	if !l.rt.sentry {
		if stageFD, err = ociStage(b.pl, l.id); err != nil {
			return nil, err
		}
	}
	l.stageDir = "-"
	if stageFD >= 0 {
		l.stageDir = filepath.Join(l.tmp, "stage")
		b.stage.setStage(stageFD) // the staging's from here on (closed by its close)
		if err := os.Mkdir(l.stageDir, 0o711); err != nil {
			return nil, err
		}
	}
	bundleDir := filepath.Join(l.tmp, "bundle")
	b.handOver()
	ob, err := oci.Config(b.pl, b.cfg.Policy, oci.Options{BundleDir: bundleDir, HostID: uint32(l.id), StageDir: map[bool]string{true: l.stageDir}[stageFD >= 0]})
	if err != nil {
		return nil, err
	}
	// The container's pid 1 is the init binary's idle program, bound in.
	initFile, err := l.pauseBinary(bundleDir)
	if err != nil {
		return nil, err
	}
	ob.Spec.Process.Args = []string{nsinit.PausePath}
	ob.Spec.Mounts = append(ob.Spec.Mounts, specs.Mount{Destination: nsinit.PausePath, Type: "bind", Source: filepath.Join(bundleDir, "pause"),
		Options: []string{"bind", "ro", "nosuid", "nodev"}})
	// The container's network namespace is the runtime's own (owned by the
	// container's user namespace, so `RUNTIME exec` can join it): the
	// launcher checks it holds only lo and makes the proxy's listeners in
	// it, which the supervisor serves.
	ob.Spec.Linux.CgroupsPath = ociCgroupParent + "/" + l.name
	if l.rt.sentry {
		if err := l.sentryBundle(ob); err != nil {
			return nil, err
		}
	}
	if err := ob.Write(bundleDir); err != nil {
		return nil, err
	}
	// The grants, in plan order: the launcher opens each one's root inside
	// the container for the file API.
	var grants []string
	for _, m := range b.pl.Mounts {
		if m.Grant() {
			grants = append(grants, m.Target)
		}
	}
	lj, _ := json.Marshal(nsinit.LaunchInfo{Grants: grants, Proxy: b.pl.Proxy && !l.rt.sentry, RuntimeFlags: l.rt.flags, Sentry: l.rt.sentry}) // plain data always encodes
	if err := os.WriteFile(filepath.Join(bundleDir, nsinit.LaunchFile), lj, 0o644); err != nil {
		return nil, err
	}
	if err := os.Chmod(l.tmp, 0o711); err != nil { // the runtime's user namespace must reach the bundle
		return nil, err
	}
	b.enf.Backend = "oci/" + l.rt.name
	b.noteEnvironment()
	b.enf.Namespaces, b.enf.Seccomp = true, true
	b.enf.Cgroup = "runtime:" + l.rt.name
	if l.rt.sentry {
		b.enf.Seccomp = false // the workload's syscalls never reach the host kernel
		b.enf.Platform = "gvisor/" + l.rt.platform
		b.enf.Weaker = append(b.enf.Weaker, sentryWeaker...)
		if err := l.serveSentryProxy(); err != nil {
			return nil, err
		}
	}
	b.enf.FSDenials = "not reported under isolation oci"
	b.sandboxID = l.id
	return l.startLauncher(initFile, stageFD)
}

// pauseBinary copies the init binary into the bundle, for the container's
// idle pid 1, and returns it opened (the launcher is executed through it).
func (l *ociLaunch) pauseBinary(bundleDir string) (*os.File, error) {
	f, err := openInit(l.b.cfg.Executable)
	if err != nil {
		return nil, fmt.Errorf("sandbox init binary: %w", err)
	}
	if f == nil {
		if f, err = os.Open("/proc/self/exe"); err != nil {
			return nil, err
		}
	}
	l.closers = append(l.closers, f)
	if err := os.MkdirAll(bundleDir, 0o755); err != nil {
		return nil, err
	}
	dst, err := os.OpenFile(filepath.Join(bundleDir, "pause"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return nil, err
	}
	_, err = io.Copy(dst, io.NewSectionReader(f, 0, 1<<40))
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	return f, err
}

// startLauncher starts the launcher as pid 1 of a new pid namespace with a
// private mount namespace.
func (l *ociLaunch) startLauncher(initFile *os.File, stageFD int) (*control, error) {
	b := l.b
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	child := os.NewFile(uintptr(pair[1]), "control")
	defer child.Close()
	lowers, lowerFiles, err := ociLowers(b.pl, l.id)
	if err != nil {
		unix.Close(pair[0])
		return nil, err
	}
	l.closers = append(l.closers, lowerFiles...)
	hide := "0"
	if l.rt.hybrid {
		hide = "1"
	}
	// fd 3 the init binary (executed through it), 4 the control socket,
	// 5 the stage, 6 and up the lower layers.
	extra := []*os.File{initFile, child}
	if stageFD >= 0 {
		dup, err := unix.FcntlInt(uintptr(stageFD), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			unix.Close(pair[0])
			return nil, fmt.Errorf("stage: %w", err)
		}
		sf := os.NewFile(uintptr(dup), "stage")
		l.closers = append(l.closers, sf)
		extra = append(extra, sf)
		extra = append(extra, lowerFiles...)
	} else {
		lowers = "-"
	}
	cmd := &exec.Cmd{Path: "/proc/self/fd/3", Args: []string{nsinit.LauncherArg0, hide, l.stageDir, lowers,
		l.rt.bin, filepath.Join(l.tmp, "state"), filepath.Join(l.tmp, "bundle"), l.name}}
	cmd.ExtraFiles = extra
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: unix.SIGKILL, Cloneflags: unix.CLONE_NEWPID | unix.CLONE_NEWNS}
	cmd.WaitDelay = time.Second
	ctl := newControl(cmd, pair[0])
	cmd.Stdout, cmd.Stderr = ctl.stderr, ctl.stderr
	if err := cmd.Start(); err != nil {
		ctl.close()
		return nil, fmt.Errorf("start the OCI launcher for %s: %w", l.rt.name, err)
	}
	child.Close()
	for _, f := range l.closers {
		f.Close() // the launcher has them now
	}
	l.closers = nil
	go func() {
		_ = cmd.Wait() // the status is read from ProcessState and the control messages
		close(ctl.exited)
	}()
	ctl.onExit = l.cleanup
	ctl.watch(func(stop <-chan struct{}) { watchOCILimits(b, l.name, stop) })
	if stageFD >= 0 {
		ctl.watch(func(stop <-chan struct{}) { b.stage.watch(stop, haltFull(b)) })
	}
	go readControl(b, ctl) // the launcher never sends a stage: the supervisor holds it
	return ctl, nil
}

// cleanup removes what the OCI sandbox leaves once its launcher is gone:
// the container's cgroups, the network namespace's thread, the work
// directory.
func (l *ociLaunch) cleanup() {
	for _, f := range l.closers {
		f.Close()
	}
	l.closers = nil
	// A halt is decided again from the kernel's counters, once everything
	// is dead: a run may end before the watcher's next look.
	ociLimitHit(l.b, l.name)
	removeOCICgroups(l.name)
	_ = os.RemoveAll(l.tmp) // the janitor retries what is left
	if l.rt.sentry {
		chownBack(l.b.cfg.Policy.FSWrite(), l.id)
	}
}

// ociCgroupParent is where containers' cgroups are created in every
// hierarchy, so leftovers can be found and attributed.
const ociCgroupParent = "/airlock-oci"

// ociCgroupDirs returns the container's cgroup directory in every mounted
// hierarchy (v1 controllers and cgroup2).
func ociCgroupDirs(id string) []string {
	var out []string
	ents, err := os.ReadDir("/sys/fs/cgroup")
	if err != nil {
		return nil
	}
	for _, e := range ents {
		out = append(out, filepath.Join("/sys/fs/cgroup", e.Name(), ociCgroupParent, id))
	}
	return append(out, filepath.Join("/sys/fs/cgroup", ociCgroupParent, id))
}

// removeOCICgroups removes a dead container's (empty) cgroup directories,
// children first.
func removeOCICgroups(id string) {
	for _, d := range ociCgroupDirs(id) {
		var dirs []string
		_ = filepath.WalkDir(d, func(p string, e os.DirEntry, err error) error {
			if err == nil && e.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			_ = unix.Rmdir(dirs[i]) // EBUSY while processes remain: the janitor retries later
		}
	}
}

// ociJanitor cleans up after supervisors that died during an OCI run (their
// containers died with the launcher's pid namespace): it removes work
// directories and container cgroups named for a supervisor that is gone.
// It identifies only names made by cgroup.NewName.
func ociJanitor() {
	if ents, err := os.ReadDir(os.TempDir()); err == nil {
		for _, e := range ents {
			if _, _, ok := cgroup.ParseName(e.Name()); ok && e.IsDir() && !cgroup.OwnerAlive(e.Name()) {
				_ = os.RemoveAll(filepath.Join(os.TempDir(), e.Name())) // best effort; the next run tries again
			}
		}
	}
	seen := map[string]bool{}
	for _, parent := range ociCgroupDirs("") {
		ents, err := os.ReadDir(parent)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if _, _, ok := cgroup.ParseName(e.Name()); ok && !seen[e.Name()] && !cgroup.OwnerAlive(e.Name()) {
				seen[e.Name()] = true
				removeOCICgroups(e.Name())
			}
		}
	}
}
