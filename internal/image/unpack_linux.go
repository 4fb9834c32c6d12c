package image

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/plan/spec"
)

// testMode, when set, is the only mode Unpack tries, and childName the
// child's argv[0] (tests).
var (
	testMode  string
	childName = ChildArg0
)

// maxOpens bounds the files a layout's unpack may ask for: the index,
// the manifests, the config and the layers.
const maxOpens = 2*MaxLayers + 16

// Unpack makes src (an OCI layout folder, or an OCI or Docker archive)
// into a root filesystem below cache, or finds it there. The image is read
// and unpacked by a confined child (see the package doc); this process
// only opens files, checks and gives what the child made, and renames it
// into place.
func Unpack(src, cache string, opt Options) (*Unpacked, error) {
	c, err := openCache(cache)
	if err != nil {
		return nil, err
	}
	defer c.close()
	in, dir, err := openSource(src)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", src, err)
	}
	defer in.Close()
	uid, gid := childIDs(c)
	// The child's death signal is tied to the thread that starts it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	modes := []string{modeNamespaces, modeLandlock}
	if testMode != "" {
		modes = []string{testMode}
	}
	var why []string
	for _, mode := range modes {
		u, err := unpackOnce(c, in, dir, mode, uid, gid, opt)
		var ce *confineError
		if errors.As(err, &ce) {
			why = append(why, mode+": "+ce.Error())
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", src, err)
		}
		return u, nil
	}
	return nil, fmt.Errorf("image %s: the unpack could not be confined (%s): airlock never unpacks an image unconfined; enable user namespaces or Landlock (see airlock doctor), or unpack it yourself and give the folder as rootfs", src, strings.Join(why, "; "))
}

// childIDs returns who the child runs as: this user, or, for root, an
// unprivileged id from the range the sandboxes' roots are mapped to.
func childIDs(c *cache) (uid, gid int) {
	if c.uid != 0 {
		return c.uid, c.gid
	}
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand does not fail on Linux
	id := int(spec.DefaultIDMap().Pick(binary.LittleEndian.Uint32(b[:])))
	return id, id
}

// openSource opens the image: a folder or a regular file (not a fifo or
// a device, which could block or never end).
func openSource(src string) (f *os.File, dir bool, err error) {
	fd, err := unix.Open(src, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, false, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, false, err
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		dir = true
	case unix.S_IFREG:
	default:
		unix.Close(fd)
		return nil, false, errors.New("neither a folder nor a regular file: give an OCI layout folder or an image archive")
	}
	return os.NewFile(uintptr(fd), src), dir, nil
}

// unpackOnce runs one child in mode. A *confineError says the child could
// not confine itself (or start so): nothing was read.
func unpackOnce(c *cache, in *os.File, dir bool, mode string, uid, gid int, opt Options) (*Unpacked, error) {
	t, err := c.newTemp(uid, gid)
	if err != nil {
		return nil, err
	}
	defer c.drop(t)
	ch, err := startChild(mode, in, dir, t.rootFD, path.Join(c.dir, t.name, entryRoot), uid, gid, opt.Executable)
	if err != nil {
		return nil, err
	}
	defer ch.stop()
	var key, doc string
	for {
		m, fd, err := recv(ch.sock)
		if err != nil {
			return nil, ch.died(err)
		}
		switch m.Op {
		case "open":
			if fd >= 0 {
				unix.Close(fd)
			}
			if ch.opens++; !dir || ch.opens > maxOpens {
				return nil, fmt.Errorf("the unpack asked for more files than an image has: airlock bug, or the child was taken over")
			}
			f, err := openBeneath(in, m.Name)
			if err != nil {
				err = send(ch.sock, message{Op: "error", Error: err.Error()}, -1)
			} else {
				err = send(ch.sock, message{Op: "file"}, int(f.Fd()))
				f.Close()
			}
			if err != nil {
				return nil, ch.died(err)
			}
			continue
		case "image":
			if fd >= 0 {
				unix.Close(fd)
			}
			if key != "" {
				return nil, errors.New("the unpack named its image twice")
			}
			if err := checkImage(m); err != nil {
				return nil, err
			}
			var digest string
			doc, digest = Key(m.Kind, m.Config, m.Layers)
			key = strings.TrimPrefix(digest, "sha256:")
			found, err := c.lookup(key, doc)
			if err != nil || found {
				_ = send(ch.sock, message{Op: "stop"}, -1)
				if err != nil {
					return nil, err
				}
				ch.wait()
				return &Unpacked{Dir: path.Join(c.dir, key, entryRoot), Digest: digest, Cached: true}, nil
			}
			if err := send(ch.sock, message{Op: "unpack", Limits: current()}, -1); err != nil {
				return nil, ch.died(err)
			}
			continue
		case "done":
			if fd >= 0 {
				unix.Close(fd)
			}
			if key == "" {
				return nil, errors.New("the unpack finished without naming its image")
			}
			if err := ch.wait(); err != nil {
				return nil, err
			}
			cached, err := c.commit(t, key, doc, uid, gid)
			if err != nil {
				return nil, err
			}
			return &Unpacked{Dir: path.Join(c.dir, key, entryRoot), Digest: "sha256:" + key, Cached: cached}, nil
		case "confine":
			if fd >= 0 {
				unix.Close(fd)
			}
			return nil, &confineError{errors.New(strings.TrimPrefix(m.Error, "confine the unpack: "))}
		default:
			if fd >= 0 {
				unix.Close(fd)
			}
			if m.Error == "" {
				m.Error = fmt.Sprintf("unexpected message %q", m.Op)
			}
			return nil, errors.New(m.Error)
		}
	}
}

// checkImage checks what the child says the image is.
func checkImage(m message) error {
	if m.Kind != KindOCI && m.Kind != KindDocker || !validDigest(m.Config) || len(m.Layers) > MaxLayers {
		return errors.New("the unpack named its image wrongly: airlock bug, or the child was taken over")
	}
	for _, l := range m.Layers {
		if !validDigest(l) {
			return errors.New("the unpack named its image wrongly: airlock bug, or the child was taken over")
		}
	}
	return nil
}

// openBeneath opens the regular file name of the layout folder dir for
// the child: beneath the folder, through no symlink, magic link or other
// mount (openat2(2), Linux 5.6).
func openBeneath(dir *os.File, name string) (*os.File, error) {
	if name == "" || len(name) > MaxName || path.Clean(name) != name || strings.HasPrefix(name, "/") || strings.HasPrefix(name, "../") || name == ".." {
		return nil, fmt.Errorf("%q is not a plain relative path", name)
	}
	fd, err := unix.Openat2(int(dir.Fd()), name, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_NOCTTY,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	})
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV) {
		return nil, fmt.Errorf("%q in the layout is reached through a symlink or a mount: the image is refused", name)
	}
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, fmt.Errorf("%q in the layout is not a regular file", name)
	}
	return os.NewFile(uintptr(fd), name), nil
}

// child is a started unpack child.
type child struct {
	cmd    *exec.Cmd
	sock   int
	stderr *tail
	opens  int
	waited bool
	err    error // its exit, once waited
}

// startChild starts the child in mode with the entry's root rootFD (at
// rootPath, owned by uid, gid) and the image in (an archive's fd, or the
// folder, which stays here).
func startChild(mode string, in *os.File, dir bool, rootFD int, rootPath string, uid, gid int, exe *os.File) (*child, error) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("unpack socket: %w", err)
	}
	theirs := os.NewFile(uintptr(pair[1]), "unpack")
	defer theirs.Close()
	root0 := os.Geteuid() == 0
	rootArg := "fd"
	var root int
	if mode == modeNamespaces && root0 {
		// The child (an unprivileged uid) cannot reach the entry by its
		// path: it is handed a detached bind of it, nosuid, nodev and
		// noexec (open_tree(2), Linux 5.2; mount_setattr(2), 5.12).
		root, err = unix.OpenTree(rootFD, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
		if err == nil {
			attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC}
			if err = unix.MountSetattr(root, "", unix.AT_EMPTY_PATH, attr); err != nil {
				unix.Close(root)
			}
		}
		rootArg = "mount"
	} else {
		root, err = unix.Dup(rootFD)
		if mode == modeNamespaces {
			// The child binds the entry from its own copy of the mount
			// tree, by this path, and checks it is the folder of the fd.
			rootArg = rootPath
		}
	}
	if err != nil {
		unix.Close(pair[0])
		if mode == modeNamespaces {
			return nil, &confineError{fmt.Errorf("bind the entry for new namespaces: %w", err)}
		}
		return nil, fmt.Errorf("hand the entry to the unpack: %w", err)
	}
	rootFile := os.NewFile(uintptr(root), "root")
	defer rootFile.Close()
	files := []*os.File{theirs, rootFile}
	source := "dir"
	if !dir {
		files, source = append(files, in), "file"
	}
	argv0, how := "/proc/self/exe", "self"
	if exe != nil {
		files = append(files, exe)
		argv0, how = "/proc/self/fd/"+strconv.Itoa(2+len(files)), "fd"
	}
	attr := &syscall.SysProcAttr{Pdeathsig: unix.SIGKILL, Setsid: true}
	switch mode {
	case modeNamespaces:
		attr.Cloneflags = unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS | unix.CLONE_NEWCGROUP
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: gid, Size: 1}}
		attr.GidMappingsEnableSetgroups = root0 // root drops its supplementary groups; a user cannot
		attr.Credential = &syscall.Credential{Uid: 0, Gid: 0, Groups: []uint32{}, NoSetGroups: !root0}
	case modeLandlock:
		if root0 {
			attr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
		}
	}
	ch := &child{sock: pair[0], stderr: &tail{max: 4096}}
	ch.cmd = &exec.Cmd{Path: argv0, Args: []string{childName, mode, source, how, rootArg}, Env: []string{}, ExtraFiles: files,
		SysProcAttr: attr, Stderr: ch.stderr, WaitDelay: time.Second}
	if err := ch.cmd.Start(); err != nil {
		unix.Close(pair[0])
		if mode == modeNamespaces {
			return nil, &confineError{fmt.Errorf("start in new user namespaces: %w", err)}
		}
		return nil, fmt.Errorf("start the unpack: %w", err)
	}
	return ch, nil
}

// wait waits for the child's exit, once, and returns what it says.
func (ch *child) wait() error {
	if ch.waited {
		return ch.err
	}
	ch.waited = true
	if err := ch.cmd.Wait(); err != nil {
		ch.err = fmt.Errorf("the unpack exited: %v%s", err, ch.stderr.said())
	}
	return ch.err
}

// died explains a broken conversation with the child by its exit.
func (ch *child) died(err error) error {
	_ = ch.cmd.Process.Kill()
	if werr := ch.wait(); werr != nil {
		return werr
	}
	return fmt.Errorf("the unpack: %w%s", err, ch.stderr.said())
}

// stop ends the child (killed if it still runs) and closes the socket.
func (ch *child) stop() {
	if !ch.waited {
		_ = ch.cmd.Process.Kill()
		_ = ch.wait()
	}
	unix.Close(ch.sock)
}

// tail keeps the first max bytes written to it (the child's stderr: a
// Go runtime panic, say).
type tail struct {
	max int
	b   bytes.Buffer
}

func (t *tail) Write(p []byte) (int, error) {
	if room := t.max - t.b.Len(); room > 0 {
		t.b.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

func (t *tail) said() string {
	if s := strings.TrimSpace(t.b.String()); s != "" {
		return ": " + s
	}
	return ""
}
