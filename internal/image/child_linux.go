package image

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/enforce/landlock"
	"github.com/airlock-sandbox/airlock/internal/enforce/seccomp"
)

// ChildArg0 is argv[0] of the re-executed unpack (sandbox.Init runs Child
// for it).
const ChildArg0 = "airlock-image-unpack"

// The child's fds: the socket to the caller, the new entry's root folder
// and, for an archive, the archive; the executable's fd, when the caller
// executed it through one, follows them.
const (
	childSock = 3
	childRoot = 4
	childSrc  = 5
)

// The ways the child confines itself (its argv[2]).
const (
	modeNamespaces = "ns"       // user, mount, pid, net, ipc namespaces; Landlock where the kernel has it
	modeLandlock   = "landlock" // Landlock alone, where user namespaces are missing
)

// The children's work (their argv[1]).
const (
	phaseResolve = "resolve" // read the image's documents and propose what to unpack
	phaseUnpack  = "unpack"  // unpack the layers the caller streams
)

// Child is the unpack's child: it confines itself and then either reads
// the image from the fds it was handed and proposes what to unpack
// (resolve), or unpacks into the entry's root the layers the caller
// streams to it (unpack). It never returns.
//
// Arguments: PHASE (resolve or unpack), MODE (ns or landlock), SOURCE
// (file, dir, or stream for unpack), EXE (fd when its executable's fd
// follows the others, self otherwise), ROOT (how the entry's root is
// handed: fd, its folder; mount, a detached bind of it; or, for mode ns,
// its path, to bind from the child's own mount tree). The resolver's
// root is a scratch folder the caller throws away.
//
// Preconditions:
//   - started by Unpack with the fds above
//   - with MODE ns: uid 0 of a new user namespace, alone in new mount,
//     pid, network and IPC namespaces
func Child() {
	runtime.LockOSThread() // the confinement is per thread where it cannot be for all (cgo builds)
	if err := runChild(); err != nil {
		var ce *confineError
		op := "error"
		if errors.As(err, &ce) {
			op = "confine"
		}
		_ = send(childSock, message{Op: op, Error: err.Error()}, -1) // the caller also sees exit 1
		os.Exit(1)
	}
	os.Exit(0)
}

// confineError is a failure to confine the child: the caller may try the
// other mode.
type confineError struct{ err error }

func (e *confineError) Error() string { return "confine the unpack: " + e.err.Error() }

func runChild() error {
	if len(os.Args) != 6 {
		return errors.New("usage: PHASE MODE SOURCE EXE ROOT (started by airlock, not by hand)")
	}
	phase, mode, source := os.Args[1], os.Args[2], os.Args[3]
	if os.Args[4] == "fd" {
		exe := childRoot + 1
		if source == "file" {
			exe = childSrc + 1
		}
		unix.Close(exe)
	}
	root, err := setup(phase, mode, os.Args[5])
	if err != nil {
		return err
	}
	if phase == phaseUnpack {
		return unpackStreamed(root)
	}
	var st *store
	if source == "file" {
		if st, err = archiveStore(os.NewFile(childSrc, "image")); err != nil {
			return err
		}
	} else {
		st = &store{opener: askCaller}
	}
	img, err := st.resolve()
	if err != nil {
		return err
	}
	p, err := st.proposal(img)
	if err != nil {
		return err
	}
	return send(childSock, p, -1)
}

// setup bounds and confines the child before it reads anything of the
// image, and returns the fd of its root. The bounds are hard limits, not
// raised again: the resolver writes no file, and the unpacker none larger
// than all of an image.
func setup(phase, mode, how string) (int, error) {
	fsize := int64(0)
	if phase == phaseUnpack {
		fsize = MaxBytes
	}
	if err := limitFileSize(fsize); err != nil {
		return -1, err
	}
	root, err := confine(mode, how)
	if err != nil {
		return -1, &confineError{err}
	}
	return root, nil
}

// unpackStreamed is the unpacker: it says it is ready, then unpacks into
// root each layer the caller streams, checking it against its diff_id.
func unpackStreamed(root int) error {
	if err := send(childSock, message{Op: "ready"}, -1); err != nil {
		return err
	}
	m, fd, err := recv(childSock)
	if fd >= 0 {
		unix.Close(fd)
	}
	if err != nil {
		return err
	}
	if m.Op != "unpack" {
		return fmt.Errorf("unexpected message %q", m.Op)
	}
	m.Limits.apply()
	diffIDs := m.DiffIDs
	x := newExtractor(root)
	defer x.close()
	for i := 0; ; i++ {
		m, fd, err := recv(childSock)
		if err != nil {
			return err
		}
		if m.Op == "end" && fd < 0 && i == len(diffIDs) {
			break
		}
		if m.Op != "layer" || fd < 0 || i >= len(diffIDs) {
			if fd >= 0 {
				unix.Close(fd)
			}
			return fmt.Errorf("unexpected message %q", m.Op)
		}
		f := os.NewFile(uintptr(fd), "layer")
		err = x.layer(f, diffIDs[i])
		f.Close()
		if err != nil {
			return fmt.Errorf("layer %d: %w", i+1, err)
		}
	}
	if err := x.finish(); err != nil {
		return err
	}
	return send(childSock, message{Op: "done"}, -1)
}

// limitFileSize makes n bytes the hard limit on the size of any file
// this process writes (RLIMIT_FSIZE): a write past it fails (EFBIG; the
// Go runtime ignores SIGXFSZ).
func limitFileSize(n int64) error {
	if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &unix.Rlimit{Cur: uint64(n), Max: uint64(n)}); err != nil {
		return fmt.Errorf("rlimit fsize: %w", err)
	}
	return nil
}

// askCaller opens a file of a layout folder: the caller opens it, beneath
// the folder, and hands over the fd.
func askCaller(name string) (*os.File, error) {
	if err := send(childSock, message{Op: "open", Name: name}, -1); err != nil {
		return nil, err
	}
	m, fd, err := recv(childSock)
	if err != nil {
		return nil, err
	}
	if m.Op != "file" || fd < 0 {
		if fd >= 0 {
			unix.Close(fd)
		}
		return nil, fmt.Errorf("%q: %s", name, m.Error)
	}
	return os.NewFile(uintptr(fd), name), nil
}

// confine confines the child and returns the fd of the root it unpacks
// into.
func confine(mode, how string) (int, error) {
	all := allThreads()
	limits := []struct {
		res int
		max uint64
	}{{unix.RLIMIT_NOFILE, 256}, {unix.RLIMIT_CORE, 0}, {unix.RLIMIT_MEMLOCK, 0}}
	for _, l := range limits {
		if err := unix.Setrlimit(l.res, &unix.Rlimit{Cur: l.max, Max: l.max}); err != nil {
			return -1, fmt.Errorf("rlimit %d: %w", l.res, err)
		}
	}
	// Not dumpable: no process of the same uid reads its memory or fds.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return -1, fmt.Errorf("dumpable: %w", err)
	}
	switch mode {
	case modeNamespaces:
		if err := newRoot(how); err != nil {
			return -1, err
		}
		// Landlock too where the kernel has it: the entry's root is all
		// the child may touch, and mounts are refused.
		if err := restrict("/root", "/denied", all, 2); err != nil && !errors.Is(err, errors.ErrUnsupported) {
			return -1, err
		}
		if err := dropCapabilities(all); err != nil {
			return -1, err
		}
		root, err := unix.Open("/root", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, err
		}
		return root, filterSyscalls()
	case modeLandlock:
		// No namespaces: Landlock is the confinement, and it must hold.
		// ABI 4: without a network namespace, Landlock must refuse TCP
		// connects too.
		if err := restrict(fmt.Sprintf("/proc/self/fd/%d", childRoot), "/", all, 4); err != nil {
			return -1, fmt.Errorf("%w: without user namespaces the unpack needs Landlock ABI 4 (Linux 6.7)", err)
		}
		return childRoot, filterSyscalls()
	}
	return -1, fmt.Errorf("unknown mode %q", mode)
}

// filterSyscalls installs the child's seccomp filter on every thread
// (TSYNC), last: it refuses what the steps before it needed.
func filterSyscalls() error {
	prog, err := childFilter()
	if err == nil {
		err = seccomp.Install(prog)
	}
	return err
}

// newRoot makes the child's root a read-only tmpfs holding only the
// entry's root folder, at /root (read-write, nosuid, nodev, noexec), and
// an empty file, /denied, for Landlock's self-test; the host's tree is
// detached.
func newRoot(how string) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / private: %w", err)
	}
	// Before the tmpfs: the entry's path may be below /tmp.
	tree, err := entryTree(how)
	if err != nil {
		return err
	}
	defer unix.Close(tree)
	const at = "/tmp"
	if err := unix.Mount("tmpfs", at, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=16k,nr_inodes=8,mode=0755"); err != nil {
		return fmt.Errorf("mount the root tmpfs: %w", err)
	}
	if err := unix.Mkdir(at+"/root", 0o755); err != nil {
		return err
	}
	fd, err := unix.Open(at+"/denied", unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o444)
	if err != nil {
		return err
	}
	unix.Close(fd)
	if err := unix.MoveMount(tree, "", unix.AT_FDCWD, at+"/root", unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("attach the entry's root: %w", err)
	}
	if err := unix.Mount("", at, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("make the root read-only: %w", err)
	}
	if err := unix.Chdir(at); err != nil {
		return err
	}
	// pivot_root(".", ".") stacks the old root on the new one; detaching
	// it leaves only the new root (pivot_root(2), NOTES).
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the host's root: %w", err)
	}
	return unix.Chdir("/")
}

// entryTree returns a detached bind of the entry's root, nosuid, nodev and
// noexec: the one handed as childRoot ("mount"), or one made here of the
// folder at path, which must be the folder of childRoot (a bind must come
// from this process's own mount tree, and the caller's fd is of the
// caller's).
func entryTree(how string) (int, error) {
	if how == "mount" {
		return childRoot, nil
	}
	if how == "fd" || how == "" || how[0] != '/' {
		return -1, fmt.Errorf("the entry's root is handed as %q: a path or a mount is needed", how)
	}
	// open_tree(2) and move_mount(2), Linux 5.2; mount_setattr(2), 5.12.
	tree, err := unix.OpenTree(unix.AT_FDCWD, how, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_SYMLINK_NOFOLLOW)
	if err != nil {
		return -1, fmt.Errorf("bind the entry's root: %w", err)
	}
	var a, b unix.Stat_t
	if err := unix.Fstat(tree, &a); err != nil || unix.Fstat(childRoot, &b) != nil || a.Dev != b.Dev || a.Ino != b.Ino {
		unix.Close(tree)
		return -1, fmt.Errorf("%s is not the entry's root it was handed", how)
	}
	unix.Close(childRoot)
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, attr); err != nil {
		unix.Close(tree)
		return -1, fmt.Errorf("the entry's mount flags: %w", err)
	}
	return tree, nil
}

// restrict applies Landlock, ABI minABI or later: read and write beneath
// dir, nothing else (no TCP connect from ABI 4, no signal or abstract
// socket out of the domain from ABI 6), and proves that denied is denied.
// ABI 2 is the least: linking across folders (REFER).
func restrict(dir, denied string, all bool, minABI int) error {
	_, err := landlock.Restrict(landlock.Config{
		Paths:             []landlock.PathRule{{Path: dir, Access: landlock.Read | landlock.Write}},
		ScopeSignals:      true,
		ScopeAbstractUnix: true,
		MinABI:            minABI,
		ThreadOnly:        !all,
		SelfTestPath:      denied,
	})
	return err
}

// allThreads reports whether a syscall can be made on every thread
// (syscall.AllThreadsSyscall): not in a binary that links cgo (-race
// builds), where the child's work all runs on its locked thread.
func allThreads() bool {
	_, _, errno := syscall.AllThreadsSyscall(unix.SYS_GETPID, 0, 0, 0)
	return errno != syscall.ENOTSUP
}

// dropCapabilities empties every capability set, on every thread (or the
// calling one), and locks the securebits (capabilities(7)).
func dropCapabilities(all bool) error {
	prctl := func(op, arg uintptr) syscall.Errno {
		var e syscall.Errno
		if all {
			_, _, e = syscall.AllThreadsSyscall(unix.SYS_PRCTL, op, arg, 0)
		} else {
			_, _, e = unix.RawSyscall(unix.SYS_PRCTL, op, arg, 0)
		}
		return e
	}
	for c := uintptr(0); c < 64; c++ {
		if e := prctl(unix.PR_CAPBSET_DROP, c); e != 0 && e != unix.EINVAL {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, e)
		}
	}
	// SECBIT_NOROOT|_LOCKED, SECBIT_NO_SETUID_FIXUP|_LOCKED, SECBIT_KEEP_CAPS_LOCKED,
	// SECBIT_NO_CAP_AMBIENT_RAISE|_LOCKED (linux/securebits.h).
	if e := prctl(unix.PR_SET_SECUREBITS, 0x01|0x02|0x04|0x08|0x20|0x40|0x80); e != 0 {
		return fmt.Errorf("lock securebits: %w", e)
	}
	if e := prctl(unix.PR_SET_NO_NEW_PRIVS, 1); e != 0 {
		return fmt.Errorf("no_new_privs: %w", e)
	}
	if e := capsetZero(all); e != 0 {
		return fmt.Errorf("capset: %w", e)
	}
	return nil
}
