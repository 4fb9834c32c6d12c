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
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/airlock-sandbox/airlock/export/oci"
	"github.com/airlock-sandbox/airlock/internal/enforce/cgroup"
	"github.com/airlock-sandbox/airlock/internal/enforce/netns"
	"github.com/airlock-sandbox/airlock/internal/plan"
	"github.com/airlock-sandbox/airlock/policy/budget"
)

// hybridArg0 is argv[0] of airlock re-executed to launch a runtime (crun)
// that refuses a hybrid cgroup layout: Init hides the cgroup2 mount in a
// private mount namespace, then execs the runtime.
const hybridArg0 = "airlock-hybrid-exec"

// hybridExec never returns on success.
func hybridExec() {
	runtime.LockOSThread() // unshare applies to this thread, which then execs
	fail := func(err error) {
		fmt.Fprintf(os.Stderr, "airlock: launch runtime: %v\n", err)
		os.Exit(125)
	}
	if len(os.Args) < 2 {
		fail(errors.New("no runtime given"))
	}
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		fail(fmt.Errorf("unshare mount namespace: %w", err))
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		fail(fmt.Errorf("make / private: %w", err))
	}
	if err := unix.Unmount("/sys/fs/cgroup/unified", unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		fail(fmt.Errorf("hide cgroup2: %w", err))
	}
	fail(unix.Exec(os.Args[1], os.Args[1:], os.Environ()))
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
	ociJanitorOnce.Do(func() { ociJanitor(rt) })
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
	b, err := oci.Config(pl, r.c.Policy, oci.Options{BundleDir: bundleDir, HostID: hostID})
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
	for i, ns := range b.Spec.Linux.Namespaces {
		if ns.Type == specs.NetworkNamespace {
			b.Spec.Linux.Namespaces[i].Path = nsPath
		}
	}
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

	id := "airlock-" + newID()
	state := filepath.Join(tmp, "state")
	stdout := &capture{r: r, tee: r.c.Stdout, halted: make(chan struct{}, 1)}
	stderr := &capture{r: r, tee: r.c.Stderr, halted: make(chan struct{}, 1)}
	argv := []string{rt.bin, "--root", state, "run", "--bundle", bundleDir, id}
	cmd := exec.Command(argv[0], argv[1:]...)
	if rt.hybrid {
		exe := r.c.Executable
		if exe == "" {
			exe = "/proc/self/exe"
		}
		cmd = &exec.Cmd{Path: exe, Args: append([]string{hybridArg0}, argv...)}
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = r.c.Stdin, stdout, stderr
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: unix.SIGKILL}
	cmd.WaitDelay = time.Second
	runtime.LockOSThread() // Pdeathsig is tied to this thread
	defer runtime.UnlockOSThread()
	if err := cmd.Start(); err != nil {
		r.fail(fmt.Errorf("start %s: %w", rt.name, err))
		return
	}
	kill := func() {
		kctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = exec.CommandContext(kctx, rt.bin, "--root", state, "kill", id, "KILL").Run() // the container may be gone
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = exec.CommandContext(dctx, rt.bin, "--root", state, "delete", "--force", id).Run() // gone already after a clean run
	}()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	timer := time.NewTimer(time.Until(r.meter.Deadline()))
	defer timer.Stop()
	var waitErr error
loop:
	for {
		select {
		case <-timer.C:
			r.halt(budget.MaxWall, "the run passed max_wall and the container was killed")
			kill()
		case <-ctx.Done():
			r.halt("", "the caller cancelled the run")
			kill()
		case <-stdout.halted:
			kill()
		case <-stderr.halted:
			kill()
		case waitErr = <-done:
			break loop
		}
	}
	r.report.Stdout, r.report.StdoutTruncated = stdout.result()
	r.report.Stderr, r.report.StderrTruncated = stderr.result()
	if ps := cmd.ProcessState; ps != nil {
		r.report.Usage.CPUMS = (ps.UserTime() + ps.SystemTime()).Milliseconds()
	}
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

var ociJanitorOnce sync.Once

// ociJanitor cleans up after supervisors that died during an OCI run: for
// every airlock work directory whose owner is gone it force-deletes the
// containers recorded in its runtime state (killing an orphaned container
// still running) and removes the directory. It identifies only
// directories named by cgroup.NewName.
func ociJanitor(rt ociRuntime) {
	ents, err := os.ReadDir(os.TempDir())
	if err != nil {
		return
	}
	for _, e := range ents {
		if _, _, ok := cgroup.ParseName(e.Name()); !ok || !e.IsDir() || cgroup.OwnerAlive(e.Name()) {
			continue
		}
		dir := filepath.Join(os.TempDir(), e.Name())
		state := filepath.Join(dir, "state")
		if ids, err := os.ReadDir(state); err == nil {
			for _, id := range ids {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_ = exec.CommandContext(ctx, rt.bin, "--root", state, "delete", "--force", id.Name()).Run() // best effort: the container may be gone
				cancel()
			}
		}
		_ = os.RemoveAll(dir) // best effort; the next run tries again
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
