package doctor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/enforce/mount"
	"github.com/airlock-sandbox/airlock/internal/enforce/namespace"
	"github.com/airlock-sandbox/airlock/plan"
)

// nobody is the uid and gid the probes run unprivileged work as.
const nobody = 65534

// probeTimeout bounds each probe that starts a process.
const probeTimeout = 5 * time.Second

func kernelRelease() (string, error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "", fmt.Errorf("uname: %w", err)
	}
	return unix.ByteSliceToString(u.Release[:]), nil
}

// isRoot reports whether the supervisor takes the privileged path: root
// on the host, with CAP_SYS_ADMIN in the initial user namespace (root in a
// container is not).
func isRoot() bool { return namespace.HostAdmin() }

// isContainerRoot reports uid 0 without that capability: root in a
// container.
func isContainerRoot() bool { return os.Geteuid() == 0 && !namespace.HostAdmin() }

// probeProc mounts a fresh procfs in new user, mount and pid namespaces,
// as the sandbox's init does, with unshare(1). Without unshare it reads
// this process's mounts instead: the kernel refuses a new procfs in a
// user namespace while mounts cover parts of the /proc it can see
// (mount_too_revealing in fs/namespace.c), which is what a container's
// masks do.
func probeProc() error {
	unshare, err := lookBinary("/usr/bin/unshare", "/bin/unshare")
	if err != nil {
		return procCovered()
	}
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, unshare, "--user", "--map-root-user", "--mount", "--pid", "--fork", "--mount-proc", "true")
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.Dir = "/"
	if out, err := cmd.CombinedOutput(); err != nil {
		if covered := procCovered(); covered != nil {
			return covered
		}
		return fmt.Errorf("a new procfs in a user namespace was refused: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// procCovered returns an error naming the mounts over parts of /proc, or
// nil when there are none besides binfmt_misc (an empty folder, which the
// kernel allows).
func procCovered() error {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil // nothing to say
	}
	var covered []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		if mp := f[4]; strings.HasPrefix(mp, "/proc/") && mp != "/proc/sys/fs/binfmt_misc" {
			covered = append(covered, mp)
		}
	}
	if len(covered) == 0 {
		return nil
	}
	if len(covered) > 4 {
		covered = append(covered[:4], "…")
	}
	return fmt.Errorf("mounts cover parts of /proc (%s), as a container's masks do, so the kernel refuses a new procfs in a user namespace", strings.Join(covered, ", "))
}

// lookBinary returns the first of names that is an executable file.
func lookBinary(names ...string) (string, error) {
	for _, n := range names {
		if fi, err := os.Stat(n); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return n, nil
		}
	}
	return "", fmt.Errorf("none of %s is installed", strings.Join(names, ", "))
}

// startInNamespaces starts cat(1) in the namespaces every plan gives a
// sandbox (plan.DefaultNamespaces, through the clone flags the sandbox
// uses), mapped by the plan's rule (root: an id from the unprivileged
// range; otherwise the caller), and returns it blocked on its stdin;
// closing stdin ends it. cmd.Start returns only once execve succeeded, so
// the namespaces exist when it returns.
func startInNamespaces(ctx context.Context) (*exec.Cmd, *os.File, error) {
	cat, err := lookBinary("/usr/bin/cat", "/bin/cat")
	if err != nil {
		return nil, nil, err
	}
	ns := plan.DefaultNamespaces()
	cloneFlags, err := namespace.CloneFlags(ns)
	if err != nil {
		return nil, nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	defer r.Close()
	root := namespace.HostAdmin()
	id, gid := os.Getuid(), os.Getgid()
	if root {
		idm := plan.DefaultIDMap()
		id = int(idm.Pick(uint32(os.Getpid())))
		gid = id
	}
	cmd := exec.CommandContext(ctx, cat)
	cmd.Stdin = r
	cmd.Env = []string{}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:                 cloneFlags,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: id, Size: 1}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: gid, Size: 1}},
		GidMappingsEnableSetgroups: root,
		Pdeathsig:                  unix.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, nil, fmt.Errorf("clone %s namespaces: %w%s", namespaceList(ns), err, usernsHint())
	}
	return cmd, w, nil
}

// stop ends a process from startInNamespaces.
func stop(cmd *exec.Cmd, stdin *os.File) {
	stdin.Close()
	_ = cmd.Wait() // cat exits 0 at end of input; a kill by the context is fine too
}

func probeUserNS() error {
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	cmd, stdin, err := startInNamespaces(ctx)
	if err != nil {
		return err
	}
	stop(cmd, stdin)
	return nil
}

// probeUnprivilegedUserNS runs `unshare --user true` as nobody. Without
// unshare(1) it falls back to the sysctls that forbid it.
func probeUnprivilegedUserNS() error {
	unshare, err := lookBinary("/usr/bin/unshare", "/bin/unshare")
	if err != nil {
		if hint := usernsHint(); hint != "" {
			return errors.New(strings.TrimPrefix(hint, "; "))
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, unshare, "--user", "true")
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{}}}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("unshare --user as uid %d: %w: %s%s", nobody, err, strings.TrimSpace(string(out)), usernsHint())
	}
	return nil
}

// probeAppArmor reads AppArmor's user namespace restriction from this
// host's procfs and, where it is set, checks that the namespaces this
// process creates get their capabilities.
func probeAppArmor() AppArmor {
	a := readAppArmor("/proc")
	if a.restricted() {
		a.Mount = probeNamespaceMount()
	}
	return a
}

// probeNamespaceMount starts true(1) in new user and mount namespaces,
// mapped to the caller, and has it unshare one more mount namespace and
// make its mounts private before execve (SysProcAttr.Unshareflags), as the
// sandbox's init does first. That needs CAP_SYS_ADMIN in the new user
// namespace: Ubuntu's unprivileged_userns profile, which an unconfined
// program's new namespaces get, denies it, while starting a process in
// them still works. The mounts change only in the namespace that exits.
func probeNamespaceMount() error {
	tr, err := lookBinary("/usr/bin/true", "/bin/true")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, tr)
	cmd.Env = []string{}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:   unix.CLONE_NEWUSER | unix.CLONE_NEWNS,
		Unshareflags: unix.CLONE_NEWNS,
		UidMappings:  []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings:  []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
		Pdeathsig:    unix.SIGKILL,
	}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("a mount in a new user namespace failed: %w", err)
	}
	return nil
}

// usernsHint names the sysctls that forbid user namespaces on this host,
// as "; name is value" clauses, or "" when none does.
func usernsHint() string {
	var h []string
	for _, s := range []struct{ file, bad string }{
		{"/proc/sys/user/max_user_namespaces", "0"},
		{"/proc/sys/kernel/unprivileged_userns_clone", "0"},             // Debian
		{"/proc/sys/kernel/apparmor_restrict_unprivileged_userns", "1"}, // Ubuntu 23.10+
	} {
		if b, err := os.ReadFile(s.file); err == nil && strings.TrimSpace(string(b)) == s.bad {
			h = append(h, strings.TrimPrefix(strings.ReplaceAll(s.file, "/", "."), ".proc.sys.")+" is "+s.bad)
		}
	}
	if len(h) == 0 {
		return ""
	}
	return "; " + strings.Join(h, "; ")
}

// probeSeccomp checks seccomp(2) filter mode through procfs: the actions
// file exists only with CONFIG_SECCOMP_FILTER (Linux 4.14), and the filter
// returns kill_process, errno and allow.
func probeSeccomp() error {
	if _, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl PR_GET_SECCOMP: %w: the kernel needs CONFIG_SECCOMP", err)
	}
	b, err := os.ReadFile("/proc/sys/kernel/seccomp/actions_avail")
	if err != nil {
		return fmt.Errorf("seccomp filter mode: %w: the kernel needs CONFIG_SECCOMP_FILTER (Linux 4.14+)", err)
	}
	have := strings.Fields(string(b))
	for _, a := range []string{"kill_process", "errno", "allow"} {
		if !contains(have, a) {
			return fmt.Errorf("seccomp: action %s missing from %q", a, strings.TrimSpace(string(b)))
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// probeWritable checks with access(2) that a group directory may be made
// in dir. It creates nothing.
func probeWritable(dir string) error {
	if dir == "" {
		return errors.New("own cgroup unknown")
	}
	if err := unix.Access(dir, unix.W_OK|unix.X_OK); err != nil {
		return fmt.Errorf("access %s: %w", dir, err)
	}
	return nil
}

// probeIDMap idmaps a detached clone of a temporary directory through the
// user namespace of a probe process, as a root run does for every grant
// (open_tree(2) and mount_setattr(2) MOUNT_ATTR_IDMAP, Linux 5.12; the
// filesystem must support it). The clone is never attached anywhere.
func probeIDMap() error {
	dir, err := os.MkdirTemp("", "airlock-doctor-")
	if err != nil {
		return err
	}
	defer os.Remove(dir)
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	cmd, stdin, err := startInNamespaces(ctx)
	if err != nil {
		return err
	}
	defer stop(cmd, stdin)
	ns, err := unix.Open("/proc/"+strconv.Itoa(cmd.Process.Pid)+"/ns/user", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open probe user namespace: %w", err)
	}
	defer unix.Close(ns)
	// Cloned as a grant is: recursive, with the plan's flags.
	tree, err := mount.Clone(plan.Mount{Kind: plan.KindBind, Source: dir, Target: dir, Writable: true, IDMap: true, Recursive: true, Origin: "doctor"}, ns)
	if err != nil {
		return err
	}
	return unix.Close(tree)
}

// probeMicroVM finds what --isolation microvm boots (the sandbox's own
// rules: sandbox.findGuestKernel) and whether KVM runs a guest.
func probeMicroVM() MicroVM {
	m := MicroVM{QEMU: "/usr/bin/qemu-system-x86_64", KVM: probeKVM()}
	if _, err := os.Stat(m.QEMU); err != nil {
		m.Err = fmt.Errorf("%s: %w: apt-get install qemu-system-x86", m.QEMU, err)
		return m
	}
	mods, _ := filepath.Glob("/lib/modules/*/kernel/fs/9p/9p.ko")
	for _, p := range mods {
		v := strings.Split(strings.TrimPrefix(p, "/lib/modules/"), "/")[0]
		if _, err := os.Stat("/boot/vmlinuz-" + v); err == nil && v > m.Kernel {
			m.Kernel = v
		}
	}
	if m.Kernel == "" {
		m.Err = errors.New("no guest kernel with the 9p modules in /boot and /lib/modules: apt-get install linux-image-amd64")
	}
	return m
}
