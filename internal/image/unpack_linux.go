package image

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/plan/spec"
)

// testMode, when set, is the only mode Unpack tries; resolverArg0 and
// unpackerArg0 are the children's argv[0] (tests stand a taken-over child
// in for one of them).
var (
	testMode     string
	resolverArg0 = ChildArg0
	unpackerArg0 = ChildArg0
)

// unpackDeadline is how long the children of one Unpack may run in all
// (tests lower it).
var unpackDeadline = MaxDuration

// maxOpens bounds the files a layout's resolver may ask for: the index,
// the manifests and the config.
const maxOpens = 16

// Unpack makes src (an OCI layout folder, or an OCI or Docker archive)
// into a root filesystem below cache, or finds it there. The image is
// read by confined children (see the package doc); this process only
// opens files, reads and checks the blobs it hands on, and checks, gives
// and renames into place what the unpack made.
func Unpack(src, cache string, opt Options) (*Unpacked, error) {
	c, err := openCache(cache)
	if err != nil {
		return nil, err
	}
	defer c.close()
	c.sweep()
	in, dir, err := openSource(src)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", src, err)
	}
	defer in.Close()
	uid, gid := childIDs(c)
	// The children's death signal is tied to the thread that starts them.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	modes := []string{modeNamespaces, modeLandlock}
	if testMode != "" {
		modes = []string{testMode}
	}
	u := &unpack{c: c, in: in, dir: dir, uid: uid, gid: gid, exe: opt.Executable, deadline: time.Now().Add(unpackDeadline)}
	var why []string
	for _, mode := range modes {
		u.mode = mode
		res, err := u.run()
		var ce *confineError
		if errors.As(err, &ce) {
			why = append(why, mode+": "+ce.Error())
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", src, err)
		}
		return res, nil
	}
	return nil, fmt.Errorf("image %s: the unpack could not be confined (%s): airlock never unpacks an image unconfined; enable user namespaces or Landlock (see airlock doctor), or unpack it yourself and give the folder as rootfs", src, strings.Join(why, "; "))
}

// unpack is one Unpack's state.
type unpack struct {
	c        *cache
	in       *os.File // the archive, or the layout's folder (dir)
	dir      bool
	mode     string
	uid, gid int // the children's
	exe      *os.File
	deadline time.Time
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

// run unpacks the image with children confined in u.mode. A
// *confineError says a child could not confine itself (or start so):
// nothing was unpacked.
func (u *unpack) run() (*Unpacked, error) {
	p, err := u.resolve()
	if err != nil {
		return nil, err
	}
	if err := u.checkProposal(p); err != nil {
		return nil, err
	}
	blobs := make([]string, len(p.Layers))
	for i, l := range p.Layers {
		blobs[i] = l.Digest
	}
	doc, digest := Key(p.Kind, p.Config.Digest, blobs, p.DiffIDs)
	key := strings.TrimPrefix(digest, "sha256:")
	found, err := u.c.lookup(key, doc)
	if err != nil {
		return nil, err
	}
	if found {
		return &Unpacked{Dir: path.Join(u.c.dir, key, entryRoot), Digest: digest, Cached: true}, nil
	}
	t, err := u.c.newTemp(u.uid, u.gid)
	if err != nil {
		return nil, err
	}
	defer u.c.drop(t)
	if err := u.unpackLayers(t, p); err != nil {
		return nil, err
	}
	cached, err := u.c.commit(t, key, doc, u.uid, u.gid)
	if err != nil {
		return nil, err
	}
	return &Unpacked{Dir: path.Join(u.c.dir, key, entryRoot), Digest: digest, Cached: cached}, nil
}

// resolve runs the resolver, in a scratch entry thrown away after it,
// and returns what it proposes. Nothing it says is trusted: the proposal
// is checked (checkProposal) and the blobs it names are read and checked
// here.
func (u *unpack) resolve() (message, error) {
	scratch, err := u.c.newTemp(u.uid, u.gid)
	if err != nil {
		return message{}, err
	}
	defer u.c.drop(scratch)
	source := "file"
	if u.dir {
		source = "dir"
	}
	ch, err := u.start(resolverArg0, phaseResolve, source, scratch)
	if err != nil {
		return message{}, err
	}
	defer ch.stop()
	for {
		m, fd, err := recv(ch.sock)
		if fd >= 0 {
			unix.Close(fd)
		}
		if err != nil {
			return message{}, ch.died(err)
		}
		switch m.Op {
		case "open":
			if ch.opens++; !u.dir || ch.opens > maxOpens {
				return message{}, ch.refuse("the image's reader asked for more files than an image's documents")
			}
			f, err := openBeneath(u.in, m.Name)
			if err != nil {
				err = send(ch.sock, message{Op: "error", Error: err.Error()}, -1)
			} else {
				err = send(ch.sock, message{Op: "file"}, int(f.Fd()))
				f.Close()
			}
			if err != nil {
				return message{}, ch.died(err)
			}
		case "image":
			// The resolver has nothing more to say: it is ended (stop),
			// and what it proposed is checked, not its exit.
			return m, nil
		case "confine":
			return message{}, &confineError{errors.New(strings.TrimPrefix(m.Error, "confine the unpack: "))}
		default:
			return message{}, ch.said(m)
		}
	}
}

// checkProposal checks the resolver's proposal p: its fields are well
// formed and within the bounds, and the config's blob is where p says,
// of its size and digest.
func (u *unpack) checkProposal(p message) error {
	bad := func(what string) error {
		return fmt.Errorf("the image's reader proposed %s: airlock bug, or the reader was taken over by the image; the image is refused", what)
	}
	if p.Kind != KindOCI && p.Kind != KindDocker || u.dir && p.Kind != KindOCI {
		return bad(fmt.Sprintf("the kind %q", p.Kind))
	}
	if p.Config == nil || len(p.Layers) > MaxLayers || len(p.Layers) != len(p.DiffIDs) {
		return bad("no config, or not one diff_id per layer")
	}
	var total int64
	for i, b := range append([]blob{*p.Config}, p.Layers...) {
		if !validDigest(b.Digest) || b.Size < 0 || b.Off < 0 {
			return bad(fmt.Sprintf("the blob %+v", b))
		}
		if i > 0 {
			if !validDigest(p.DiffIDs[i-1]) {
				return bad(fmt.Sprintf("the diff_id %q", p.DiffIDs[i-1]))
			}
			total += b.Size
		}
	}
	if p.Config.Size > maxJSON {
		return fmt.Errorf("the image's config is %d bytes, over the %d a config may have: the image is refused", p.Config.Size, maxJSON)
	}
	if max := maxBlobs(); total > max {
		return fmt.Errorf("the image's layers are %d bytes, over the %d airlock reads: %s", total, max, tooLarge)
	}
	r, err := u.openBlob(*p.Config)
	if err != nil {
		return err
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		return fmt.Errorf("the config %s: %w", p.Config.Digest, err)
	}
	if int64(len(b)) != p.Config.Size || digestOf(b) != p.Config.Digest {
		return fmt.Errorf("the config's blob is not %s (%d bytes): the image is damaged or was altered", p.Config.Digest, p.Config.Size)
	}
	return nil
}

// maxBlobs bounds the bytes of all layers' blobs as they are stored:
// gzip adds a little to what does not compress.
func maxBlobs() int64 { return maxStream() + maxStream()/64 }

// openBlob opens the bytes of b: a layout's blob by its digest, beneath
// the folder, of b.Size bytes; or b.Size bytes at b.Off of the archive.
func (u *unpack) openBlob(b blob) (io.ReadCloser, error) {
	if !u.dir {
		var st unix.Stat_t
		if err := unix.Fstat(int(u.in.Fd()), &st); err != nil {
			return nil, err
		}
		if b.Off > st.Size || b.Size > st.Size-b.Off {
			return nil, fmt.Errorf("blob %s is said to be past the archive's end: the image is damaged or was altered", b.Digest)
		}
		return io.NopCloser(io.NewSectionReader(u.in, b.Off, b.Size)), nil
	}
	name, err := blobPath(b.Digest)
	if err != nil {
		return nil, err
	}
	f, err := openBeneath(u.in, name)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, err
	}
	if st.Size != b.Size {
		f.Close()
		return nil, fmt.Errorf("blob %s is %d bytes, not the %d its descriptor says: the image is damaged or was altered", b.Digest, st.Size, b.Size)
	}
	return struct {
		io.Reader
		io.Closer
	}{io.LimitReader(f, b.Size), f}, nil
}

// unpackLayers runs the unpacker into t and streams it the layers' blobs
// of p, each checked here against its digest as it goes: the unpacker
// sees those bytes and nothing else, and its done is taken only once
// every blob it was given was the one the key names.
func (u *unpack) unpackLayers(t *temp, p message) error {
	ch, err := u.start(unpackerArg0, phaseUnpack, "stream", t)
	if err != nil {
		return err
	}
	defer ch.stop()
	m, fd, err := recv(ch.sock)
	if fd >= 0 {
		unix.Close(fd)
	}
	switch {
	case err != nil:
		return ch.died(err)
	case m.Op == "confine":
		return &confineError{errors.New(strings.TrimPrefix(m.Error, "confine the unpack: "))}
	case m.Op != "ready":
		return ch.said(m)
	}
	if err := send(ch.sock, message{Op: "unpack", DiffIDs: p.DiffIDs, Limits: current()}, -1); err != nil {
		return ch.died(err)
	}
	for i, l := range p.Layers {
		if err := u.stream(ch, l); err != nil {
			return fmt.Errorf("layer %d (%s): %w", i+1, l.Digest, err)
		}
	}
	if err := send(ch.sock, message{Op: "end"}, -1); err != nil {
		return ch.died(err)
	}
	m, fd, err = recv(ch.sock)
	if fd >= 0 {
		unix.Close(fd)
	}
	if err != nil {
		return ch.died(err)
	}
	if m.Op != "done" {
		return ch.said(m)
	}
	return ch.wait()
}

// stream sends the unpacker a pipe and writes the blob b into it,
// hashing what it writes; a blob that is not b fails the unpack.
func (u *unpack) stream(ch *child, b blob) error {
	r, err := u.openBlob(b)
	if err != nil {
		return err
	}
	defer r.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	defer pw.Close()
	err = send(ch.sock, message{Op: "layer"}, int(pr.Fd()))
	pr.Close()
	if err != nil {
		return ch.died(err)
	}
	h := newHashingReader(r)
	buf := make([]byte, 256<<10)
	for {
		n, rerr := h.Read(buf)
		if n > 0 {
			if _, err := pw.Write(buf[:n]); err != nil {
				return ch.died(err) // the unpacker stopped reading
			}
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			return ch.refuse(fmt.Sprintf("read the blob: %v", rerr))
		}
	}
	if h.n != b.Size || h.digest() != b.Digest {
		return ch.refuse(fmt.Sprintf("the blob is %s (%d bytes), not %s (%d bytes): the image is damaged or was altered", h.digest(), h.n, b.Digest, b.Size))
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
	cmd     *exec.Cmd
	sock    int
	stderr  *tail
	opens   int
	waited  bool
	err     error // its exit, once waited
	timer   *time.Timer
	expired atomic.Bool // killed at the deadline
}

// start starts a child (argv0, for phase) in u.mode with the entry t's
// root, and the image's file when source is "file". It is killed at the
// unpack's deadline.
func (u *unpack) start(argv0, phase, source string, t *temp) (*child, error) {
	var in *os.File
	if source == "file" {
		in = u.in
	}
	ch, err := startChild(argv0, phase, u.mode, in, source, t.rootFD, path.Join(u.c.dir, t.name, entryRoot), u.uid, u.gid, u.exe)
	if err != nil {
		return nil, err
	}
	ch.timer = time.AfterFunc(time.Until(u.deadline), func() {
		ch.expired.Store(true)
		_ = ch.cmd.Process.Kill()
	})
	return ch, nil
}

// startChild starts the child argv0 for phase in mode with the entry's
// root rootFD (at rootPath, owned by uid, gid) and, for source "file",
// the archive in.
func startChild(argv0, phase, mode string, in *os.File, source string, rootFD int, rootPath string, uid, gid int, exe *os.File) (*child, error) {
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
	if source == "file" {
		files = append(files, in)
	}
	exeArg, how := "/proc/self/exe", "self"
	if exe != nil {
		files = append(files, exe)
		exeArg, how = "/proc/self/fd/"+strconv.Itoa(2+len(files)), "fd"
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
	ch.cmd = &exec.Cmd{Path: exeArg, Args: []string{argv0, phase, mode, source, how, rootArg}, Env: []string{}, ExtraFiles: files,
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
	err := ch.cmd.Wait()
	if ch.timer != nil {
		ch.timer.Stop()
	}
	switch {
	case ch.expired.Load():
		ch.err = fmt.Errorf("the unpack ran past its deadline (%v in all) and was stopped: the image is too large or this machine too slow for airlock to unpack it in time; unpack it yourself and give the folder as rootfs", unpackDeadline)
	case err != nil:
		ch.err = fmt.Errorf("the unpack exited: %v%s", err, ch.stderr.said())
	}
	return ch.err
}

// died explains a broken conversation with the child by what it said
// last, or its exit.
func (ch *child) died(err error) error {
	_ = ch.cmd.Process.Kill()
	werr := ch.wait()
	if ch.expired.Load() {
		return werr
	}
	// Its end of the socket is closed now: what it sent is all there.
	if m, fd, rerr := recv(ch.sock); rerr == nil {
		if fd >= 0 {
			unix.Close(fd)
		}
		if m.Op == "error" || m.Op == "confine" {
			return errors.New(m.Error)
		}
	}
	if werr != nil {
		return werr
	}
	return fmt.Errorf("the unpack stopped before it was done: %w%s", err, ch.stderr.said())
}

// said turns a message the caller did not expect now (an error, most
// likely) into an error; the child is killed.
func (ch *child) said(m message) error {
	_ = ch.cmd.Process.Kill()
	if werr := ch.wait(); ch.expired.Load() {
		return werr
	}
	if m.Op == "error" && m.Error != "" {
		return errors.New(m.Error)
	}
	return ch.refuse(fmt.Sprintf("the unpack sent %q, out of turn", m.Op))
}

// refuse kills the child and returns why, with its deadline's error if it
// ran out first.
func (ch *child) refuse(why string) error {
	_ = ch.cmd.Process.Kill()
	if werr := ch.wait(); ch.expired.Load() {
		return werr
	}
	return errors.New(why)
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
