package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/airlock-sandbox/airlock/export/oci"
	"github.com/airlock-sandbox/airlock/internal/enforce/cgroup"
	"github.com/airlock-sandbox/airlock/internal/enforce/netns"
	"github.com/airlock-sandbox/airlock/plan"
	"github.com/airlock-sandbox/airlock/policy/budget"
)

// launcherArg0 is argv[0] of airlock re-executed to launch an OCI runtime.
// The launcher is pid 1 of a new pid namespace (and has a private mount
// namespace): when the supervisor dies, Pdeathsig kills the launcher-turned-
// runtime, and with pid 1 gone the kernel kills every process in the
// namespace, the container's included. So a container cannot outlive its
// supervisor. Arguments: HIDE_CGROUP2 ("1" or "0"), NETNS_FILE, STAGE_DIR
// ("-" for none), LOWERS (a comma-separated list of staged grant indices,
// or "-"), then the runtime's argv. fd 3 is the network namespace to bind
// at NETNS_FILE; fd 4, with a STAGE_DIR, the stage's detached tmpfs to
// attach there; fds 5 and up are read-only clones of the staged folders,
// attached at STAGE_DIR/N/lower for each N of LOWERS in turn, where the
// runtime's overlays take them as their lower layer (the runtime mounts
// with the container's unprivileged id, which may not reach the grant's
// own host path).
const launcherArg0 = "airlock-oci-launcher"

// launcherNetnsFD and launcherStageFD are the launcher's inherited fds.
const (
	launcherNetnsFD = 3
	launcherStageFD = 4
)

// launch never returns on success.
//
// Preconditions:
//   - started by execOCI with CLONE_NEWPID|CLONE_NEWNS, as root
func launch() {
	runtime.LockOSThread()
	fail := func(err error) {
		fmt.Fprintf(os.Stderr, "airlock: launch runtime: %v\n", err)
		os.Exit(125)
	}
	if len(os.Args) < 6 {
		fail(errors.New("usage: HIDE_CGROUP2 NETNS_FILE STAGE_DIR LOWERS RUNTIME [ARG]..."))
	}
	hide, nsFile, stageDir, lowers, argv := os.Args[1] == "1", os.Args[2], os.Args[3], os.Args[4], os.Args[5:]
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		fail(fmt.Errorf("make / private: %w", err))
	}
	// The runtime reads /proc/<pid> of its own children: /proc must show
	// this pid namespace.
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		fail(fmt.Errorf("mount /proc for the launcher's pid namespace: %w", err))
	}
	if hide {
		// crun refuses the hybrid cgroup layout unless cgroup2 is hidden (DESIGN §7).
		if err := unix.Unmount("/sys/fs/cgroup/unified", unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			fail(fmt.Errorf("hide cgroup2: %w", err))
		}
	}
	// Pin the network namespace at a path only this mount namespace sees:
	// nothing is left on the host when the launcher dies.
	if err := unix.Mount(fmt.Sprintf("/proc/self/fd/%d", launcherNetnsFD), nsFile, "", unix.MS_BIND, ""); err != nil {
		fail(fmt.Errorf("bind the network namespace: %w", err))
	}
	unix.Close(launcherNetnsFD)
	if stageDir != "-" {
		// Attached only in this mount namespace: the runtime's overlays
		// find their upper folders here, and nothing is left on the host.
		if err := unix.MoveMount(launcherStageFD, "", unix.AT_FDCWD, stageDir, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			fail(fmt.Errorf("attach the stage: %w", err))
		}
		unix.Close(launcherStageFD)
		if lowers != "-" {
			for i, n := range strings.Split(lowers, ",") {
				fd := launcherStageFD + 1 + i
				if err := unix.MoveMount(fd, "", unix.AT_FDCWD, filepath.Join(stageDir, n, "lower"), unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
					fail(fmt.Errorf("attach staged folder %s: %w", n, err))
				}
				unix.Close(fd)
			}
		}
	}
	fail(unix.Exec(argv[0], argv, os.Environ()))
}

// ociRuntime is one runtime airlock can drive.
type ociRuntime struct {
	name   string
	bin    string
	hybrid bool // needs the cgroup2 mount hidden on hybrid hosts
}

func findRuntime(name string) (ociRuntime, error) {
	candidates := map[string][]string{
		"runc": {"/usr/sbin/runc", "/usr/bin/runc", "/usr/local/sbin/runc", "/usr/local/bin/runc"},
		"crun": {"/usr/bin/crun", "/usr/local/bin/crun"},
	}
	paths, ok := candidates[name]
	if !ok {
		return ociRuntime{}, fmt.Errorf("runtime %q: airlock drives runc and crun (runsc does not start airlock's bundle yet)", name)
	}
	for _, p := range paths {
		if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 != 0 {
			return ociRuntime{name: name, bin: p, hybrid: name == "crun"}, nil
		}
	}
	return ociRuntime{}, fmt.Errorf("runtime %s is not installed (looked in %v): install it or use the default isolation", name, paths)
}

// execOCI runs the plan as an OCI bundle under runc or crun, with
// airlock's egress proxy, deadline, output cap and report around it.
func (r *run) execOCI(ctx context.Context, pl *plan.Plan) {
	defer r.finish()
	if os.Geteuid() != 0 {
		r.fail(errors.New("isolation oci needs root (the bundle maps the sandbox to an unprivileged host id); run as root or use the default isolation"))
		return
	}
	rt, err := findRuntime(r.c.Runtime)
	if err != nil {
		r.fail(err)
		return
	}
	hostID := uint32(hostID())
	if err := checkWritable(r.c.Policy.FSWrite(), hostID); err != nil {
		r.fail(err)
		return
	}
	ociJanitor() // cheap: a long-lived supervisor (serve) cleans up after others on every OCI run
	// The work directory carries the supervisor's pid and start time, so a
	// later run can tell it was left by a supervisor that died.
	name, err := cgroup.NewName(os.Getpid())
	if err != nil {
		r.fail(err)
		return
	}
	tmp := filepath.Join(os.TempDir(), name)
	if err := os.Mkdir(tmp, 0o700); err != nil {
		r.fail(err)
		return
	}
	defer os.RemoveAll(tmp)
	bundleDir := filepath.Join(tmp, "bundle")
	st, err := openStaging(pl)
	if err != nil {
		r.fail(err)
		return
	}
	defer st.close()
	stageFD, err := ociStage(pl, int(hostID))
	if err != nil {
		r.fail(err)
		return
	}
	stageDir := "-"
	if stageFD >= 0 {
		stageDir = filepath.Join(tmp, "stage")
		if err := os.Mkdir(stageDir, 0o711); err != nil {
			unix.Close(stageFD)
			r.fail(err)
			return
		}
		st.setStage(stageFD) // the staging's from here on (closed by st.close)
	}
	b, err := oci.Config(pl, r.c.Policy, oci.Options{BundleDir: bundleDir, HostID: hostID, StageDir: map[bool]string{true: stageDir}[stageFD >= 0]})
	if err != nil {
		r.fail(err)
		return
	}

	// The container joins a network namespace airlock made: only lo, and
	// the proxy's listeners served from here.
	nsPath, listeners, release, err := makeNetns(pl.Proxy)
	if err != nil {
		r.fail(err)
		return
	}
	defer release()
	nsFD, err := os.Open(nsPath)
	if err != nil {
		r.fail(fmt.Errorf("open the container's network namespace: %w", err))
		return
	}
	defer nsFD.Close()
	nsFile := filepath.Join(tmp, "netns") // bound by the launcher, in its own mount namespace
	if err := os.WriteFile(nsFile, nil, 0o444); err != nil {
		r.fail(err)
		return
	}
	for i, ns := range b.Spec.Linux.Namespaces {
		if ns.Type == specs.NetworkNamespace {
			b.Spec.Linux.Namespaces[i].Path = nsFile
		}
	}
	b.Spec.Linux.CgroupsPath = ociCgroupParent + "/" + name
	if err := b.Write(bundleDir); err != nil {
		r.fail(err)
		return
	}
	if err := os.Chmod(tmp, 0o711); err != nil { // the runtime's user namespace must reach the bundle
		r.fail(err)
		return
	}
	ip := &initProc{}
	if len(listeners) > 0 {
		ip.serveProxy(r, listeners)
		defer func() {
			if p := ip.proxy.Load(); p != nil {
				_ = p.Close()
			}
		}()
	}
	r.report.Enforcement.Namespaces = true
	r.report.Enforcement.Seccomp = true
	r.report.Enforcement.Cgroup = "runtime:" + rt.name
	r.report.Enforcement.FSDenials = "not reported under isolation oci"

	id := name // the container is named like the work dir, for the janitor
	state := filepath.Join(tmp, "state")
	stdout := &capture{r: r, tee: r.c.Stdout, halted: make(chan struct{}, 1)}
	stderr := &capture{r: r, tee: r.c.Stderr, halted: make(chan struct{}, 1)}
	hide := "0"
	if rt.hybrid {
		hide = "1"
	}
	exe := r.c.Executable
	if exe == "" {
		exe = "/proc/self/exe"
	}
	lowers, lowerFiles, err := ociLowers(pl)
	if err != nil {
		r.fail(err)
		return
	}
	defer func() {
		for _, f := range lowerFiles {
			f.Close()
		}
	}()
	cmd := &exec.Cmd{Path: exe, Args: []string{launcherArg0, hide, nsFile, stageDir, lowers, rt.bin, "--root", state, "run", "--bundle", bundleDir, id}}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = r.c.Stdin, stdout, stderr
	cmd.ExtraFiles = []*os.File{nsFD} // fd 3: launcherNetnsFD
	if stageFD >= 0 {
		dup, err := unix.FcntlInt(uintptr(stageFD), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			r.fail(fmt.Errorf("stage: %w", err))
			return
		}
		stageFile := os.NewFile(uintptr(dup), "stage")
		defer stageFile.Close()
		cmd.ExtraFiles = append(cmd.ExtraFiles, stageFile)     // fd 4: launcherStageFD
		cmd.ExtraFiles = append(cmd.ExtraFiles, lowerFiles...) // fds 5 and up
	}
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: unix.SIGKILL, Cloneflags: unix.CLONE_NEWPID | unix.CLONE_NEWNS}
	cmd.WaitDelay = time.Second
	runtime.LockOSThread() // Pdeathsig is tied to this thread
	defer runtime.UnlockOSThread()
	if err := cmd.Start(); err != nil {
		r.fail(fmt.Errorf("start %s: %w", rt.name, err))
		return
	}
	// The runtime records pids as its own pid namespace numbers them, so
	// `runtime kill` from here could hit an unrelated host process: end the
	// container by killing the launcher, pid 1 of the namespace that holds it.
	kill := func() { _ = cmd.Process.Kill() } // already gone is fine
	// A clean `run` deletes its container; after a kill the runtime's
	// cgroup directories are left (empty) and removed here.
	defer removeOCICgroups(id)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	timer := time.NewTimer(time.Until(r.meter.Deadline()))
	defer timer.Stop()
	stopWatch := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		if stageFD >= 0 {
			st.watch(stopWatch, haltFull(r, kill))
		}
	}()
	var waitErr error
	meterDone := r.meter.Done() // a charge the container provoked blew the budget
	cancelled := ctx.Done()
loop:
	for {
		select {
		case <-timer.C:
			r.halt(budget.MaxWall, "the run passed max_wall and the container was killed")
			kill()
		case <-cancelled:
			cancelled = nil
			r.halt(budget.Interrupted, "the caller stopped the run ("+context.Cause(ctx).Error()+"): the container was killed")
			kill()
		case <-stdout.halted:
			kill()
		case <-stderr.halted:
			kill()
		case <-meterDone:
			meterDone = nil
			r.halt("", haltReason(r.meter.HaltedBy()))
			kill()
		case waitErr = <-done:
			break loop
		}
	}
	close(stopWatch)
	<-watched
	r.report.Stdout, r.report.StdoutTruncated = stdout.result()
	r.report.Stderr, r.report.StderrTruncated = stderr.result()
	if ps := cmd.ProcessState; ps != nil {
		r.report.Usage.CPUMS = (ps.UserTime() + ps.SystemTime()).Milliseconds()
	}
	// The launcher was pid 1 of the container's pid namespace: with it
	// reaped, nothing of the container runs, and the stage is still.
	written, full := st.usage()
	if full {
		r.halt(budget.MaxWrite, "the run wrote max_write bytes to its fs_write grants; the write past it failed (no space left), and the run was stopped")
	}
	r.report.Usage.WriteBytes = written
	r.report.Writes = st.writeBack(r)
	if r.reportHalt() {
		return
	}
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(waitErr, &ee):
		code = ee.ExitCode()
	case waitErr != nil:
		r.fail(fmt.Errorf("%s: %w", rt.name, waitErr))
		return
	}
	r.report.ExitCode = code
	if code > 128 && code < 128+65 {
		s := code - 128
		r.report.Signal = &s
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

// checkWritable refuses an fs_write grant the container's host id cannot
// write: the runtimes here have no idmapped binds, so ownership is real.
func checkWritable(dirs []string, id uint32) error {
	for _, d := range dirs {
		var st unix.Stat_t
		if err := unix.Stat(d, &st); err != nil {
			return fmt.Errorf("fs_write %q: %w", d, err)
		}
		ok := (st.Uid == id && st.Mode&0o200 != 0) || (st.Gid == id && st.Mode&0o020 != 0) || st.Mode&0o002 != 0
		if !ok {
			return fmt.Errorf("fs_write %q is not writable by the container's host uid %d (owner %d, mode %o): isolation oci has no idmapped mounts; make it writable (e.g. chmod 1777 or a group) or use the default isolation", d, id, st.Uid, st.Mode&0o777)
		}
	}
	return nil
}

// makeNetns creates a network namespace holding only lo on a dedicated OS
// thread that stays in it until release is called, and returns the
// namespace's /proc path for the runtime to join. Nothing is mounted on the
// host: if the supervisor dies, the thread and the namespace go with it.
// When the plan has a proxy, it also returns the proxy's listening sockets
// created inside the namespace.
func makeNetns(proxy bool) (path string, fds []int, release func(), err error) {
	type result struct {
		path string
		fds  []int
		err  error
	}
	ch := make(chan result, 1)
	stop := make(chan struct{})
	go func() {
		// The thread switches network namespace and never rejoins the
		// scheduler's pool: the goroutine exits locked, so Go ends the thread.
		runtime.LockOSThread()
		var res result
		fail := func(e error) {
			for _, f := range res.fds {
				unix.Close(f)
			}
			ch <- result{err: e}
		}
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			fail(fmt.Errorf("unshare network namespace: %w", err))
			return
		}
		if err := netns.LoopbackUp(); err != nil {
			fail(err)
			return
		}
		if proxy {
			for _, port := range []int{plan.HTTPProxyPort, plan.SOCKSProxyPort} {
				fd, err := netns.Listen(port)
				if err != nil {
					fail(err)
					return
				}
				res.fds = append(res.fds, fd)
			}
		}
		res.path = fmt.Sprintf("/proc/%d/task/%d/ns/net", os.Getpid(), unix.Gettid())
		ch <- res
		<-stop // keep the namespace's path valid until the container has run
	}()
	res := <-ch
	if res.err != nil {
		return "", nil, nil, res.err
	}
	return res.path, slices.Clip(res.fds), func() { close(stop) }, nil
}
