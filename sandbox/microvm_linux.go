package sandbox

import (
	"encoding/json"
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

	"github.com/airlock-sandbox/airlock/internal/enforce/cgroup"
	"github.com/airlock-sandbox/airlock/internal/enforce/mount"
	"github.com/airlock-sandbox/airlock/internal/enforce/namespace"
	"github.com/airlock-sandbox/airlock/internal/enforce/nsinit"
	"github.com/airlock-sandbox/airlock/plan"
	"github.com/airlock-sandbox/airlock/policy"
)

// The microVM backend: the sandbox gets a kernel of its own. QEMU's
// microvm machine boots a Debian guest kernel with an initramfs airlock
// builds (airlock's init as /init, and the 9p and virtio modules it
// loads); the guest mounts, over virtio-9p, a share that holds exactly the
// plan's bind sources, and runs the same init with the same plan in new
// namespaces of the guest kernel (mounts, Landlock, seccomp, capabilities,
// rlimits), with the plan's pids and memory limits on a cgroup of the
// guest's. The guest has no network device: the proxy's ports on the
// sandbox's loopback are carried to the supervisor's egress proxy. The
// control protocol, the output and those connections cross one
// virtio-serial port (internal/enforce/nsinit, vmlink.go, vmproxy_linux.go).
//
// QEMU itself runs in a sandbox of airlock's on the host: the VMM
// launcher, pid 1 of new user, mount, pid, net, ipc and uts namespaces as
// an unprivileged host uid, sees only QEMU's own system folders, the
// kernel, the initramfs and the exported trees (read-only but for fs_write
// grants), has no capabilities and no_new_privs, and QEMU adds its own
// seccomp filter (-sandbox on). A cgroup on the host holds the launcher
// and QEMU (the VM's memory and threads, and max_cpu for the whole VM).
// The deadline and the output cap are the box's, on the host: they kill
// the launcher, and with it QEMU.
//
// Why the guest's root is a share of the plan's sources and not an image:
// the guest's init then applies the plan exactly as on the host (the same
// mount steps from the same paths), and what QEMU can reach is what the
// plan grants, nothing more.

// BackendMicroVM is the report's name of the microVM backend.
const BackendMicroVM = "microvm"

// microvmQEMU is where Debian's qemu-system-x86 puts the VMM.
const microvmQEMU = "/usr/bin/qemu-system-x86_64"

// microvmModules are what the guest loads: the virtio-mmio transport, the
// serial port of the link and the 9p share (their dependencies come along).
var microvmModules = []string{"virtio_mmio", "virtio_console", "9pnet_virtio", "9p"}

// microvmGuestOverhead is the guest RAM beyond max_memory: the guest
// kernel and the init (the sandbox's own cgroup in the guest gets
// max_memory).
const microvmGuestOverhead = 128 << 20

// What the host's cgroup gives the VMM launcher and QEMU beyond the
// guest's RAM (QEMU itself, its 64 MiB translation cache, 9p buffers),
// and their threads (QEMU's 9p worker pool grows to 64).
const (
	microvmVMMMemory = 256 << 20
	microvmVMMPids   = 256
)

// microvmBoot bounds the boot, under software emulation.
const microvmBoot = 60 * time.Second

// microvmCache is where the guest's initramfs is built once per init
// binary and kernel, and the kernel extracted once per image.
const microvmCache = "/var/cache/airlock/microvm"

// weakerMicroVM is what every microVM run differs in from the namespace
// backend, for the report's enforcement.weaker.
var weakerMicroVM = []string{
	"microvm: the guest has no network device: egress is airlock's proxy only (HTTP_PROXY and ALL_PROXY on the sandbox's loopback, carried over a virtio-serial port); programs that ignore the proxy variables reach nothing (no transparent egress)",
	"microvm: max_cpu counts the whole VM's CPU time (QEMU's: the boot and the emulation's own cost too), so a program gets less than max_cpu of its own; max_memory is the guest's sandbox cgroup, and the VM as a whole gets max_memory (at least 64 MiB) + 128 MiB of guest RAM, and 256 MiB more for QEMU",
	"microvm: filesystem denials are not reported",
	"microvm: software emulation (TCG): a boot costs seconds, and programs run several times slower than on the host",
}

// weakerMicroVMHost says, for each cgroup downgrade, what a microVM run
// gives up when the host cannot make the VM's cgroup (the guest's own
// cgroup still holds the sandbox).
var weakerMicroVMHost = map[policy.Downgrade]string{
	policy.DowngradeMemory: "max_memory: no memory cgroup on the host: QEMU's own memory (beyond the guest's RAM, its translation cache and buffers) is not bounded there; in the guest the sandbox's cgroup still holds max_memory, and the guest's RAM is max_memory (at least 64 MiB) + 128 MiB",
	policy.DowngradePids:   "max_pids: no pids cgroup on the host: QEMU's threads are not bounded there; in the guest the sandbox's cgroup still holds max_pids",
	policy.DowngradeCPU:    "max_cpu: no cpu cgroup on the host: nothing counts the VM's CPU time; in the guest RLIMIT_CPU bounds each process's CPU time, not the tree's",
}

// microvmBackend runs the sandbox in a microVM.
type microvmBackend struct{}

// launch refuses what the microVM cannot enforce, prepares the guest's
// kernel and initramfs, and starts the VMM launcher; the guest's init
// sends "ready" through it once the plan is in place in the guest.
func (microvmBackend) launch(b *box) (*control, error) {
	if !namespace.HostAdmin() {
		return nil, errors.New("isolation microvm needs root on the host (the VMM's sandbox maps it to an unprivileged host uid and idmaps the grants), which this process lacks: run as root, or use the default isolation")
	}
	// The guest has no network device: its only way out is the proxy's
	// ports on the sandbox's loopback, carried over the link. No connect
	// broker there, so no transparent egress (the plan is compiled
	// without, plan.BackendMicroVM). Credentials: the proxy adds them; the
	// run's CA reaches the guest in the plan's trust bundle (a file the
	// guest's init writes).
	var err error
	if b.pl.Proxy {
		b.enf.Egress = EgressProxy
	}
	if _, err := os.Stat(microvmQEMU); err != nil {
		return nil, fmt.Errorf("isolation microvm needs QEMU (%s: %v): apt-get install qemu-system-x86", microvmQEMU, err)
	}
	k, err := findGuestKernel()
	if err != nil {
		return nil, err
	}
	if err := microvmWrites(b); err != nil {
		return nil, err
	}
	initrd, err := microvmInitramfs(b.cfg.Executable, k)
	if err != nil {
		return nil, err
	}
	k.boot = microvmVmlinux(k)
	// No stage (writes are made in place): the staging holds the grant
	// roots the launcher sends, for a session's file API.
	if b.stage, err = openStaging(b.pl); err != nil {
		return nil, err
	}
	// The host's cgroup holds the VMM launcher and QEMU: the VM's memory
	// (the guest's RAM, QEMU's own and its translation cache) and threads
	// are bounded, and max_cpu counts QEMU's CPU time, the whole VM's.
	vmLim := b.pl.Limits
	vmLim.Memory = microvmRAM(b.pl) + microvmVMMMemory
	vmLim.Pids = microvmVMMPids
	if b.lim, err = newLimits(vmLim, b.sink); err != nil {
		b.stage.close()
		return nil, err
	}
	if b.lim.group != nil {
		b.enf.Cgroup = b.lim.host.Version
	}
	for _, d := range b.lim.downgrades {
		b.downgradedAs(policy.Downgrade(d), weakerMicroVMHost[policy.Downgrade(d)])
	}
	fail := func(err error) (*control, error) {
		b.lim.finish(b)
		b.stage.close()
		b.stage, b.lim = nil, nil
		return nil, err
	}
	ociJanitor() // the work folders of supervisors that died (named as OCI's are)
	name, err := cgroup.NewName(os.Getpid())
	if err != nil {
		return fail(err)
	}
	tmp := filepath.Join(os.TempDir(), name)
	if err := os.Mkdir(tmp, 0o711); err != nil {
		return fail(err)
	}
	if err := os.Chmod(tmp, 0o711); err != nil { // the launcher's uid must reach it
		_ = os.RemoveAll(tmp)
		return fail(err)
	}
	b.enf.Backend = BackendMicroVM
	b.noteEnvironment()
	b.enf.Platform = "qemu-microvm/tcg"
	b.enf.GuestKernel = k.version
	b.enf.FSDenials = "not reported under isolation microvm"
	b.enf.Weaker = append(b.enf.Weaker, weakerMicroVM...)
	ctl, err := startVMM(b, k, initrd, tmp)
	if err != nil {
		_ = os.RemoveAll(tmp)
		return fail(err)
	}
	ctl.onExit = func() { _ = os.RemoveAll(tmp) } // the janitor retries what is left
	go readControl(b, ctl)
	return ctl, nil
}

// microvmWrites refuses fs_write folders unless the policy accepts writes
// in place (the 9p share writes the host folder; the plan's write grants
// are plain binds: plan.BackendMicroVM).
func microvmWrites(b *box) error {
	return writeInPlace(b, "under isolation microvm fs_write folders are written in place through the guest's 9p share (they are not staged): max_write is not enforced and new protected paths (git hooks, rc files) can be created; add staged_writes to allow_downgrade to accept that, or grant single files")
}

// startVMM starts the VMM launcher in its namespaces, gives it the trees
// to export and its configuration, and returns it as the box's control
// process.
func startVMM(b *box, k guestKernel, initrd, tmp string) (*control, error) {
	exports, files, mounts := microvmExports(b.pl)
	b.handOver()
	raw, err := b.pl.MarshalBinary()
	if err != nil {
		return nil, err
	}
	memMiB := microvmRAM(b.pl) >> 20
	qemu := []string{microvmQEMU,
		"-M", "microvm,x-option-roms=off,rtc=on",
		"-accel", "tcg,tb-size=64",
		"-cpu", "max", "-smp", "1", "-m", strconv.FormatInt(memMiB, 10),
		"-nodefaults", "-no-user-config", "-display", "none", "-nic", "none", "-no-reboot",
		"-serial", "stdio",
		"-kernel", "/vm/vmlinuz", "-initrd", "/vm/initrd",
		"-append", guestCmdline(),
		"-device", "virtio-serial-device,max_ports=2",
		"-chardev", "socket,id=link,path=" + nsinit.VMMSocket,
		"-device", "virtserialport,chardev=link,name=" + nsinit.GuestPort,
		"-fsdev", "local,id=root,path=/export,security_model=none,multidevs=remap",
		"-device", "virtio-9p-device,fsdev=root,mount_tag=" + nsinit.GuestRootTag,
		"-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
	}
	links := map[string]string{}
	for _, l := range []string{"bin", "sbin", "lib", "lib32", "lib64", "libx32"} {
		if t, err := os.Readlink("/" + l); err == nil {
			links[l] = t
		}
	}
	var grants []string
	var narrow []nsinit.VMMNarrow
	for _, m := range b.pl.Mounts {
		if m.Grant() {
			grants = append(grants, m.Source)
		}
		if m.Kind == plan.KindHide || m.Kind == plan.KindReadonly {
			if host, ok := hostPathOf(b.pl, m.Target); ok {
				narrow = append(narrow, nsinit.VMMNarrow{Path: host, Hide: m.Kind == plan.KindHide})
			}
		}
	}
	cfg, err := json.Marshal(nsinit.VMMConfig{Root: tmp, Grants: grants, Narrow: narrow, Proxy: b.pl.Proxy, QEMU: qemu, System: []string{"/usr"}, Symlinks: links,
		Files: map[string]string{"vmlinuz": k.boot, "initrd": initrd}, Exports: exports, ExportFiles: files, Plan: raw, Boot: microvmBoot})
	if err != nil {
		return nil, err
	}
	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer cfgR.Close()
	defer cfgW.Close()
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	child := os.NewFile(uintptr(pair[1]), "control")
	defer child.Close()
	initFile, err := openInit(b.cfg.Executable)
	if err != nil {
		unix.Close(pair[0])
		return nil, fmt.Errorf("sandbox init binary: %w", err)
	}
	if initFile == nil {
		if initFile, err = os.Open("/proc/self/exe"); err != nil {
			unix.Close(pair[0])
			return nil, err
		}
	}
	defer initFile.Close()
	id := pickHostID(plan.DefaultIDMap())
	cmd := &exec.Cmd{Path: "/proc/self/fd/5", Args: []string{nsinit.VMMArg0}, Env: []string{}, ExtraFiles: []*os.File{cfgR, child, initFile},
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags:                 unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS,
			UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: id, Size: 1}},
			GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: id, Size: 1}},
			GidMappingsEnableSetgroups: true,
			Credential:                 &syscall.Credential{Uid: 0, Gid: 0, Groups: []uint32{}},
			Pdeathsig:                  unix.SIGKILL,
			Setsid:                     true,
		}, WaitDelay: time.Second}
	ctl := newControl(cmd, pair[0])
	cmd.Stdout, cmd.Stderr = ctl.stderr, ctl.stderr
	start := cmd.Start
	if b.lim.group != nil {
		start = func() error { return b.lim.group.Start(cmd) } // in the group from its first instruction
	}
	if err := start(); err != nil {
		if cmd.Process != nil {
			_ = cmd.Process.Kill() // it waits for its configuration: it ran nothing
			_ = cmd.Wait()
		}
		ctl.close()
		return nil, fmt.Errorf("start the VMM launcher: %w", err)
	}
	go func() {
		_ = cmd.Wait() // the status is read from ProcessState and the control messages
		close(ctl.exited)
	}()
	fail := func(err error) (*control, error) {
		ctl.kill()
		<-ctl.exited
		ctl.close()
		return nil, err
	}
	trees, err := cloneExports(cmd.Process.Pid, mounts)
	if err != nil {
		return fail(err)
	}
	err = nsinit.Send(ctl.sock, nsinit.Message{Type: nsinit.MsgGo, IDMaps: len(trees)}, trees...)
	closeFDs(trees)
	if err == nil {
		_, err = cfgW.Write(cfg)
	}
	if err != nil {
		return fail(fmt.Errorf("start the VMM launcher: %w (%s)", err, ctl.why()))
	}
	b.sandboxID = id
	if b.lim.group != nil {
		ctl.watch(func(stop <-chan struct{}) { b.lim.watch(b, stop, b.kill) })
	}
	return ctl, nil
}

// hostPathOf maps a path inside the sandbox to the host path the export
// holds it at, through the grant whose target holds it (a placed grant
// has another target than its source); false when no grant does.
func hostPathOf(pl *plan.Plan, inside string) (string, bool) {
	best := -1
	for i, m := range pl.Mounts {
		if !m.Grant() || (inside != m.Target && !strings.HasPrefix(inside, strings.TrimSuffix(m.Target, "/")+"/")) {
			continue
		}
		if best < 0 || len(m.Target) > len(pl.Mounts[best].Target) {
			best = i
		}
	}
	if best < 0 {
		return "", false
	}
	m := pl.Mounts[best]
	return m.Source + strings.TrimPrefix(inside, m.Target), true
}

// microvmRAM is the guest's RAM: max_memory for the sandbox's cgroup in
// the guest, and microvmGuestOverhead for the guest's kernel and init.
func microvmRAM(pl *plan.Plan) int64 {
	return max(pl.Limits.Memory, 64<<20) + microvmGuestOverhead
}

// microvmExports returns the plan's bind sources the guest needs, once
// each: their host paths, whether each is a file, and the steps to clone.
// Sources under /dev are the guest's own devices.
func microvmExports(pl *plan.Plan) ([]string, []bool, []plan.Mount) {
	seen := map[string]bool{}
	var paths []string
	var files []bool
	var ms []plan.Mount
	for _, m := range pl.Mounts {
		if !m.Cloned() || seen[m.Source] || m.Source == "/dev" || strings.HasPrefix(m.Source, "/dev/") {
			continue
		}
		if _, err := os.Lstat(m.Source); err != nil && m.Optional {
			continue
		}
		seen[m.Source] = true
		paths = append(paths, m.Source)
		files = append(files, m.File)
		ms = append(ms, m)
	}
	return paths, files, ms
}

// cloneExports clones each export with the supervisor's access, idmapped
// through the launcher's user namespace for grants (as cloneBinds does
// for airlock's own init), so QEMU reads and writes them as the caller.
func cloneExports(pid int, ms []plan.Mount) ([]int, error) {
	ns, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/ns/user", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open the VMM launcher's user namespace: %w", err)
	}
	defer unix.Close(ns)
	var fds []int
	for _, m := range ms {
		userns := -1
		if m.IDMap {
			userns = ns
		}
		m.Exec = true // the guest's own mounts decide noexec
		fd, err := mount.Clone(m, userns)
		if err != nil {
			closeFDs(fds)
			return nil, err
		}
		fds = append(fds, fd)
	}
	return fds, nil
}
