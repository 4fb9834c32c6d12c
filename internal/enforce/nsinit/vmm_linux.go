package nsinit

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/enforce/seccomp"
)

// VMMArg0 is argv[0] of the VMM launcher: pid 1 of the host-side sandbox
// of a microVM, which starts QEMU and bridges the control protocol to the
// guest over the link (vmlink.go).
const VMMArg0 = "airlock-vmm"

// VMMConfigFD is the pipe the supervisor writes the launcher's VMMConfig
// to (JSON, then EOF); ControlFD is the control socket, as for the init.
const VMMConfigFD = 3

// VMMConfig is what the supervisor tells the VMM launcher.
type VMMConfig struct {
	// Root is an empty folder the launcher mounts its own root on (a
	// tmpfs, in its private mount namespace).
	Root string `json:"root"`
	// QEMU is the VMM's argv; its paths are as the launcher's root shows
	// them (System, /vm, /export, the link's socket at VMMSocket).
	QEMU []string `json:"qemu"`
	// System are the host folders bound read-only into the launcher's root
	// at the same place: what QEMU itself needs to run (its binary and
	// libraries, its firmware).
	System []string `json:"system"`
	// Symlinks are top-level symlinks of the host's root to recreate
	// (/lib -> usr/lib on a merged-/usr system), name to target.
	Symlinks map[string]string `json:"symlinks,omitempty"`
	// Files are host files bound read-only at /vm/NAME (the kernel and the
	// initramfs), name to host path.
	Files map[string]string `json:"files"`
	// Exports are the host paths of the mount trees the "go" message
	// carries, in order: each is attached at /export + path, which QEMU
	// shares with the guest as its root (GuestRootTag).
	Exports []string `json:"exports"`
	// ExportFiles says which exports are files, not folders.
	ExportFiles []bool `json:"export_files"`
	// Narrow are the plan's fs_deny and protected paths inside the
	// exports (plan.KindHide, plan.KindReadonly), in plan order: the
	// export hides or write-protects them too, so the guest's kernel is
	// not the only thing that does.
	Narrow []VMMNarrow `json:"narrow,omitempty"`
	// Grants are the grant roots (plan.Mount.Grant, in plan order) as
	// host paths: the launcher opens each in its export and sends them to
	// the supervisor's file API ("mounts").
	Grants []string `json:"grants"`
	// Proxy makes the launcher listen on VMMProxySockets and send them to
	// the supervisor, and carry the guest's proxy connections to them.
	Proxy bool `json:"proxy,omitempty"`
	// Plan is the guest's plan (plan.Plan binary).
	Plan []byte `json:"plan"`
	// Boot bounds the wait for the guest's hello.
	Boot time.Duration `json:"boot"`
}

// VMMNarrow is one path the export hides (Hide) or makes read-only.
type VMMNarrow struct {
	Path string `json:"path"`
	Hide bool   `json:"hide,omitempty"`
}

// VMMSocket is where QEMU connects the link's virtio-serial port.
const VMMSocket = "/run/link.sock"

// VMM runs the VMM launcher and exits; it never returns.
//
// Preconditions:
//   - started by the supervisor with argv[0] == VMMArg0 as pid 1 of new
//     user, mount, pid, net, ipc and uts namespaces, with VMMConfigFD and
//     ControlFD open
func VMM() {
	if err := vmm(); err != nil {
		_ = Send(ControlFD, Message{Type: MsgError, Stage: "microvm", Error: err.Error()})
		fmt.Fprintln(os.Stderr, "airlock vmm:", err)
		os.Exit(125)
	}
	os.Exit(0)
}

func vmm() error {
	unix.CloseOnExec(VMMConfigFD)
	unix.CloseOnExec(ControlFD)
	// Nothing else the supervisor passed (the init binary it was executed
	// through) may reach QEMU.
	if err := unix.CloseRange(ControlFD+1, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return fmt.Errorf("close inherited fds: %w", err)
	}
	raw, err := io.ReadAll(io.LimitReader(os.NewFile(VMMConfigFD, "config"), 2*maxPlan))
	if err != nil {
		return fmt.Errorf("read the launcher's configuration: %w", err)
	}
	var c VMMConfig
	if err := json.Unmarshal(raw, &c); err != nil {
		return fmt.Errorf("launcher configuration: %w", err)
	}
	m, trees, err := Recv(ControlFD)
	if err != nil || m.Type != MsgGo || len(trees) != len(c.Exports) || len(c.ExportFiles) != len(c.Exports) {
		closeAll(trees)
		return fmt.Errorf("expected go with %d mount trees: %v, %d fds, %v", len(c.Exports), m.Type, len(trees), err)
	}
	ln, err := vmmRoot(&c, trees)
	closeAll(trees)
	if err != nil {
		return err
	}
	if err := sendExportedGrants(c.Grants); err != nil {
		ln.Close()
		return err
	}
	// Nothing below needs a privilege: QEMU runs with none, and cannot
	// gain any (no_new_privs; its own seccomp filter, -sandbox on).
	if err := dropCapabilities(); err != nil {
		return err
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	// QEMU writes the fs_write grants in place, idmapped to their owner:
	// a set-user-ID bit the guest asks for would be root's on the host.
	// A filter under QEMU's own refuses every such mode.
	prog, err := seccomp.NoSetID(seccomp.Options{})
	if err == nil {
		err = seccomp.Install(prog)
	}
	if err != nil {
		return fmt.Errorf("QEMU's filter against set-user-ID files: %w", err)
	}
	console := &consoleTail{}
	out := io.MultiWriter(os.Stderr, console)
	qemu := &exec.Cmd{Path: c.QEMU[0], Args: c.QEMU, Env: []string{}, Stdout: out, Stderr: out,
		SysProcAttr: &syscall.SysProcAttr{Pdeathsig: unix.SIGKILL, Setsid: true}}
	if err := qemu.Start(); err != nil {
		return fmt.Errorf("start %s: %w", c.QEMU[0], err)
	}
	exited := make(chan struct{})
	go func() { _ = qemu.Wait(); close(exited) }()
	conn, err := acceptBefore(ln, exited, 30*time.Second)
	ln.Close()
	if err != nil {
		_ = qemu.Process.Kill()
		<-exited
		return console.explain(err)
	}
	l := &link{r: conn, w: conn, max: hostMaxFrame}
	if err := helloAndPlan(l, c, exited); err != nil {
		_ = qemu.Process.Kill()
		<-exited
		return console.explain(err)
	}
	go func() { <-exited; conn.Close() }()
	bridgeHost(l)
	_ = qemu.Process.Kill()
	<-exited
	return nil
}

// vmmRoot builds the launcher's root on c.Root and moves into it: QEMU's
// own system folders, the kernel and initramfs, the exported trees and a
// listening socket for the link; then the root is made read-only.
func vmmRoot(c *VMMConfig, trees []int) (net.Listener, error) {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return nil, fmt.Errorf("make mounts private: %w", err)
	}
	r := c.Root
	if err := unix.Mount("tmpfs", r, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=4m"); err != nil {
		return nil, fmt.Errorf("root tmpfs: %w", err)
	}
	bindRO := func(src, dst string, dir bool) error {
		if dir {
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return err
			}
		} else {
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(dst, nil, 0o644); err != nil {
				return err
			}
		}
		if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind %s: %w", src, err)
		}
		if err := unix.Mount("", dst, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
			return fmt.Errorf("bind %s read-only: %w", src, err)
		}
		return nil
	}
	for _, s := range c.System {
		if _, err := os.Stat(s); errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err := bindRO(s, filepath.Join(r, s), true); err != nil {
			return nil, err
		}
	}
	for name, target := range c.Symlinks {
		if err := os.Symlink(target, filepath.Join(r, name)); err != nil {
			return nil, err
		}
	}
	for name, src := range c.Files {
		if err := bindRO(src, filepath.Join(r, "vm", name), false); err != nil {
			return nil, err
		}
	}
	for _, d := range []string{"dev", "run", "proc"} {
		if err := os.MkdirAll(filepath.Join(r, d), 0o755); err != nil {
			return nil, err
		}
	}
	for _, d := range []string{"null", "zero", "urandom", "random"} {
		if err := bindRO("/dev/"+d, filepath.Join(r, "dev", d), false); err != nil {
			return nil, err
		}
		// Device nodes need dev on their own bind.
		if err := unix.Mount("", filepath.Join(r, "dev", d), "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID, ""); err != nil {
			return nil, err
		}
	}
	exp := filepath.Join(r, "export")
	for _, d := range []string{"", "dev", "proc", "sys", "tmp"} {
		if err := os.MkdirAll(filepath.Join(exp, d), 0o755); err != nil {
			return nil, err
		}
	}
	// Parents before children: a tree attached below another is placed
	// on the host path inside it.
	order := make([]int, len(trees))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return len(c.Exports[order[a]]) < len(c.Exports[order[b]]) })
	for _, i := range order {
		dst := filepath.Join(exp, c.Exports[i])
		if !strings.HasPrefix(dst, exp+"/") {
			return nil, fmt.Errorf("export %q leaves the export folder", c.Exports[i])
		}
		if c.ExportFiles[i] {
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil && !errors.Is(err, unix.EROFS) {
				return nil, err
			}
			if f, err := os.OpenFile(dst, os.O_CREATE|os.O_RDONLY, 0o644); err == nil {
				f.Close()
			}
		} else if err := os.MkdirAll(dst, 0o755); err != nil && !errors.Is(err, unix.EROFS) {
			return nil, err
		}
		// move_mount(2), Linux 5.2.
		if err := unix.MoveMount(trees[i], "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return nil, fmt.Errorf("attach %s: %w", c.Exports[i], err)
		}
	}
	// The pid namespace's own /proc, mounted while the host's is still
	// visible (the kernel refuses a proc mount in a user namespace that
	// sees none: mount_too_revealing).
	if err := unix.Mount("proc", filepath.Join(r, "proc"), "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return nil, fmt.Errorf("mount /proc: %w", err)
	}
	if err := narrowExport(r, exp, c.Narrow); err != nil {
		return nil, err
	}
	if err := unix.Chdir(r); err != nil {
		return nil, err
	}
	// pivot_root(".", "."), then detach the old root stacked below it.
	if err := unix.PivotRoot(".", "."); err != nil {
		return nil, fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return nil, fmt.Errorf("detach the host's root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return nil, err
	}
	ln, err := net.Listen("unix", VMMSocket)
	if err != nil {
		return nil, fmt.Errorf("listen for the link: %w", err)
	}
	if c.Proxy {
		if err := listenProxySockets(); err != nil {
			ln.Close()
			return nil, err
		}
	}
	// The root itself (and the export's skeleton) is read-only from here.
	if err := unix.Mount("", "/", "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		ln.Close()
		return nil, fmt.Errorf("make the root read-only: %w", err)
	}
	return ln, nil
}

// consoleTail keeps the end of QEMU's output (its errors, the guest's
// console), for the error that says why a VM never came up.
type consoleTail struct {
	mu  sync.Mutex
	buf []byte // guarded by mu
}

const consoleKeep = 2 << 10

func (t *consoleTail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > consoleKeep {
		t.buf = t.buf[len(t.buf)-consoleKeep:]
	}
	return len(p), nil
}

// explain adds the end of the console to err.
func (t *consoleTail) explain(err error) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := strings.TrimSpace(string(t.buf)); s != "" {
		return fmt.Errorf("%w; QEMU and the guest said: %s", err, s)
	}
	return err
}

// sendExportedGrants opens each grant root in the export, as QEMU serves
// it to the guest, and sends them to the supervisor.
func sendExportedGrants(grants []string) error {
	root, err := unix.Open("/export", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(root)
	var fds []int
	defer func() { closeAll(fds) }()
	for _, g := range grants {
		fd, err := unix.Openat2(root, strings.TrimPrefix(g, "/"), &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_SYMLINKS})
		if err != nil {
			return fmt.Errorf("open grant %s in the export: %w", g, err)
		}
		fds = append(fds, fd)
	}
	return Send(ControlFD, Message{Type: MsgMounts}, fds...)
}

// narrowExport hides (an empty read-only folder or file over it) or
// makes read-only each path of narrow that exists in the export as a
// folder or a regular file; a symlink is left to the guest's init, which
// never follows one there either.
func narrowExport(root, exp string, narrow []VMMNarrow) error {
	empty := filepath.Join(root, ".empty")
	if err := os.WriteFile(empty, nil, 0o444); err != nil {
		return err
	}
	for _, n := range narrow {
		dst := filepath.Join(exp, n.Path)
		if !strings.HasPrefix(dst, exp+"/") {
			return fmt.Errorf("narrowed path %q leaves the export folder", n.Path)
		}
		var st unix.Stat_t
		if err := unix.Lstat(dst, &st); err != nil {
			continue // absent: the guest's init keeps it from being created
		}
		dir := st.Mode&unix.S_IFMT == unix.S_IFDIR
		if !dir && st.Mode&unix.S_IFMT != unix.S_IFREG {
			continue
		}
		var err error
		switch {
		case n.Hide && dir:
			err = unix.Mount("tmpfs", dst, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k,mode=0555")
		case n.Hide:
			err = unix.Mount(empty, dst, "", unix.MS_BIND, "")
			if err == nil {
				err = unix.Mount("", dst, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
			}
		default:
			err = unix.Mount(dst, dst, "", unix.MS_BIND|unix.MS_REC, "")
			if err == nil {
				err = unix.Mount("", dst, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, "")
			}
		}
		if err != nil {
			return fmt.Errorf("narrow %s in the export: %w", n.Path, err)
		}
	}
	return nil
}

// acceptBefore accepts the link's one connection, unless QEMU exits or
// the wait passes first.
func acceptBefore(ln net.Listener, exited <-chan struct{}, wait time.Duration) (net.Conn, error) {
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() { c, err := ln.Accept(); ch <- res{c, err} }()
	select {
	case r := <-ch:
		return r.c, r.err
	case <-exited:
		return nil, errors.New("QEMU exited before it connected the link")
	case <-time.After(wait):
		return nil, fmt.Errorf("QEMU did not connect the link in %s", wait)
	}
}

// helloAndPlan waits for the guest's hello and sends it the plan.
func helloAndPlan(l *link, c VMMConfig, exited <-chan struct{}) error {
	got := make(chan error, 1)
	go func() {
		f, err := l.recv()
		if err == nil && f.kind != frameHello {
			err = fmt.Errorf("expected hello, got frame kind %d", f.kind)
		}
		got <- err
	}()
	boot := c.Boot
	if boot <= 0 {
		boot = 60 * time.Second
	}
	select {
	case err := <-got:
		if err != nil {
			return fmt.Errorf("the guest did not boot: %w", err)
		}
	case <-exited:
		return errors.New("the guest powered off before it was up")
	case <-time.After(boot):
		return fmt.Errorf("the guest did not boot in %s", boot)
	}
	return l.send(framePlan, "", c.Plan)
}
