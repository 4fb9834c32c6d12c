package sandbox_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// The metadata attacks: a sandbox changes the mode, owner, times, extended
// attributes, ACLs or inode flags of a file outside its fs_write grants,
// by every syscall that can, in path and fd forms. Each backend must leave
// every canary byte-for-byte as it was. The cases are a table
// (metaAttacks) and metadataAttack runs them on any backend, so a matrix
// of backends and attacks can reuse them.

// metaAttack is one attempt, a Python statement run against the canary at
// p. Helpers it may use are in metaPrelude: sc (a raw syscall by name),
// ro and opath (open p), W (the fs_write folder), MODE (the mode to set:
// every permission and both set-id bits), OUID and OGID (the canary's
// owner), ACL (a POSIX ACL that gives everyone everything), xargs (a
// struct xattr_args).
type metaAttack struct {
	Name string
	Py   string
}

var metaAttacks = func() []metaAttack {
	a := []metaAttack{
		{"chown", "os.chown(p, OUID, OGID)"},
		{"lchown", "os.lchown(p, OUID, OGID)"},
		{"chgrp-own-group", "os.chown(p, -1, os.getgid())"},
		{"chown(2)", "sc('chown', p, OUID, OGID)"},
		{"lchown(2)", "sc('lchown', p, OUID, OGID)"},
		{"fchown", "os.fchown(ro(p), OUID, OGID)"},
		{"fchownat", "sc('fchownat', AT_FDCWD, p, OUID, OGID, 0)"},
		{"fchownat-opath-empty", "sc('fchownat', opath(p), b'', OUID, OGID, AT_EMPTY_PATH)"},
		{"chown-symlink-in-grant", "l = link(p); os.chown(l, OUID, OGID)"},
		{"utime-times", "os.utime(p, (1, 1))"},
		{"utime-now", "os.utime(p, None)"},
		{"utime-nofollow", "os.utime(p, (1, 1), follow_symlinks=False)"},
		{"futimens", "os.utime(ro(p), (1, 1))"},
		{"utime(2)", "sc('utime', p, struct.pack('qq', 1, 1))"},
		{"utimes(2)", "sc('utimes', p, struct.pack('qqqq', 1, 0, 1, 0))"},
		{"futimesat", "sc('futimesat', AT_FDCWD, p, struct.pack('qqqq', 1, 0, 1, 0))"},
		{"futimesat-now", "sc('futimesat', AT_FDCWD, p, None)"},
		{"utimensat", "sc('utimensat', AT_FDCWD, p, struct.pack('qqqq', 1, 0, 1, 0), 0)"},
		{"utimensat-opath-empty", "sc('utimensat', opath(p), b'', struct.pack('qqqq', 1, 0, 1, 0), AT_EMPTY_PATH)"},
		{"utimensat-fd-null", "sc('utimensat', ro(p), None, struct.pack('qqqq', 1, 0, 1, 0), 0)"},
		{"utime-symlink-in-grant", "l = link(p); os.utime(l, (1, 1))"},
		{"removexattr", "os.removexattr(p, 'user.keep')"},
		{"lremovexattr", "os.removexattr(p, 'user.keep', follow_symlinks=False)"},
		{"fremovexattr", "os.removexattr(ro(p), 'user.keep')"},
		{"removexattrat", "sc('removexattrat', AT_FDCWD, p, 0, b'user.keep')"},
		{"removexattrat-opath-empty", "sc('removexattrat', opath(p), b'', AT_EMPTY_PATH, b'user.keep')"},
		{"ioctl-FS_IOC_SETFLAGS", "setflags(ro(p))"},
		{"ioctl-FS_IOC_FSSETXATTR", "fssetxattr(ro(p))"},
		{"file_setattr", "sc('file_setattr', AT_FDCWD, p, struct.pack('QIIII', 0x80, 0, 0, 0, 0), 24, 0)"},
	}
	for _, x := range []struct{ ns, name, value string }{
		{"user", "user.attack", "b'1'"}, {"trusted", "trusted.attack", "b'1'"},
		{"security", "security.attack", "b'1'"}, {"acl", "system.posix_acl_access", "ACL"},
	} {
		a = append(a,
			metaAttack{"setxattr-" + x.ns, fmt.Sprintf("os.setxattr(p, %q, %s)", x.name, x.value)},
			metaAttack{"lsetxattr-" + x.ns, fmt.Sprintf("os.setxattr(p, %q, %s, follow_symlinks=False)", x.name, x.value)},
			metaAttack{"fsetxattr-" + x.ns, fmt.Sprintf("os.setxattr(ro(p), %q, %s)", x.name, x.value)},
			metaAttack{"setxattrat-" + x.ns, fmt.Sprintf("sc('setxattrat', AT_FDCWD, p, 0, b%q, xargs(%s), 16)", x.name, x.value)},
			metaAttack{"setxattrat-opath-empty-" + x.ns, fmt.Sprintf("sc('setxattrat', opath(p), b'', AT_EMPTY_PATH, b%q, xargs(%s), 16)", x.name, x.value)},
			metaAttack{"setxattr-symlink-in-grant-" + x.ns, fmt.Sprintf("l = link(p); os.setxattr(l, %q, %s)", x.name, x.value)},
		)
	}
	// Last, so that what they set is what the canary keeps: a chown or
	// an ACL would clear the set-id bits again.
	a = append(a, []metaAttack{
		{"chmod", "os.chmod(p, MODE)"},
		{"chmod-nofollow", "os.chmod(p, MODE, follow_symlinks=False)"},
		{"chmod(2)", "sc('chmod', p, MODE)"},
		{"fchmodat", "sc('fchmodat', AT_FDCWD, p, MODE)"},
		{"fchmodat-dirfd", "sc('fchmodat', opath(os.path.dirname(p)), os.path.basename(p), MODE)"},
		{"fchmodat2", "sc('fchmodat2', AT_FDCWD, p, MODE, 0)"},
		{"fchmodat2-nofollow", "sc('fchmodat2', AT_FDCWD, p, MODE, AT_SYMLINK_NOFOLLOW)"},
		{"fchmodat2-opath-empty", "sc('fchmodat2', opath(p), b'', MODE, AT_EMPTY_PATH)"},
		{"fchmod", "os.fchmod(ro(p), MODE)"},
		{"chmod-proc-fd", "os.chmod('/proc/self/fd/%d' % opath(p), MODE)"},
		{"chmod-symlink-in-grant", "l = link(p); os.chmod(l, MODE)"},
		{"chmod-hardlink-in-grant", "l = hardlink(p); os.chmod(l, MODE)"},
		{"chmod-renamed-into-grant", "l = os.path.join(W, 'moved'); os.rename(p, l); os.chmod(l, MODE)"},
		{"chmod-dotdot-from-grant", "os.chmod(W + '/..' + p[len(os.path.dirname(W)):], MODE)"},
		{"chmod-relative-cwd", "os.chdir(os.path.dirname(p)); os.chmod(os.path.basename(p), MODE)"},
	}...)
	return a
}()

// metaPrelude defines what the attack statements use. The syscall numbers
// are those of internal/enforce/seccomp's x86_64 and aarch64 tables; a
// name the machine lacks (chmod on aarch64) raises ENOSYS.
const metaPrelude = `
import os, sys, ctypes, struct, fcntl, errno, array
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
NR = {
  "x86_64": dict(chmod=90, fchmod=91, fchmodat=268, fchmodat2=452, chown=92, lchown=94, fchown=93, fchownat=260,
    utime=132, utimes=235, futimesat=261, utimensat=280, setxattr=188, lsetxattr=189, fsetxattr=190,
    removexattr=197, lremovexattr=198, fremovexattr=199, setxattrat=463, removexattrat=466, file_setattr=469, fallocate=285),
  "aarch64": dict(fchmod=52, fchmodat=53, fchmodat2=452, fchown=55, fchownat=54, utimensat=88, setxattr=5,
    lsetxattr=6, fsetxattr=7, removexattr=14, lremovexattr=15, fremovexattr=16, setxattrat=463,
    removexattrat=466, file_setattr=469, fallocate=47),
}[os.uname().machine]
AT_FDCWD, AT_SYMLINK_NOFOLLOW, AT_EMPTY_PATH = -100, 0x100, 0x1000
MODE = 0o6777
KEEP = []
def arg(a):
    if a is None: return ctypes.c_void_p(0)
    if isinstance(a, str): a = a.encode()
    if isinstance(a, bytes):
        b = ctypes.create_string_buffer(a, len(a) + 1)
        KEEP.append(b)
        return b
    return ctypes.c_long(a)
def sc(name, *args):
    if name not in NR: raise OSError(errno.ENOSYS, name + " is not a syscall here")
    r = libc.syscall(ctypes.c_long(NR[name]), *[arg(a) for a in args])
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return r
def ro(p): return os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
def opath(p): return os.open(p, os.O_PATH | os.O_NOFOLLOW)
def xargs(v):
    b = ctypes.create_string_buffer(v, len(v))
    KEEP.append(b)
    return struct.pack("QII", ctypes.addressof(b), len(v), 0)
ACL = struct.pack("<I", 2) + b"".join(struct.pack("<HHI", tag, 7, 0xffffffff) for tag in (1, 4, 0x20))
NLINK = [0]
def link(p):
    NLINK[0] += 1
    l = os.path.join(W, "link%d" % NLINK[0])
    os.symlink(p, l)
    return l
def hardlink(p):
    NLINK[0] += 1
    l = os.path.join(W, "hard%d" % NLINK[0])
    os.link(p, l)
    return l
def setflags(fd):
    a = array.array("l", [0])
    fcntl.ioctl(fd, 0x80086601, a)
    a[0] |= 0x40
    fcntl.ioctl(fd, 0x40086602, a)
def fssetxattr(fd):
    b = bytearray(28)
    fcntl.ioctl(fd, 0x801c581f, b)
    struct.pack_into("I", b, 0, struct.unpack_from("I", b, 0)[0] | 0x80)
    fcntl.ioctl(fd, 0x401c5820, b)
`

// metaCanary is one file or folder the attacks aim at, and its owner.
type metaCanary struct {
	Path     string
	UID, GID int
}

// metaState is everything an attack could change about a canary, compared
// byte for byte: the stat fields (atime included: no attack reads a
// canary's content), every extended attribute the test can read, and the
// inode flags.
type metaState struct {
	Mode                uint32
	UID, GID            uint32
	Size                int64
	Atime, Mtime, Ctime unix.Timespec
	Xattrs              map[string]string
	Flags               string
}

func readMeta(t *testing.T, p string) metaState {
	t.Helper()
	s, err := statMeta(p)
	if err != nil {
		t.Fatalf("canary %s: %v", p, err)
	}
	return s
}

// statMeta reads a canary's metadata: its stat, extended attributes and
// inode flags.
func statMeta(p string) (metaState, error) {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return metaState{}, fmt.Errorf("stat: %w", err)
	}
	s := metaState{Mode: st.Mode, UID: st.Uid, GID: st.Gid, Size: st.Size, Atime: st.Atim, Mtime: st.Mtim, Ctime: st.Ctim, Xattrs: map[string]string{}}
	buf := make([]byte, 1<<16)
	n, err := unix.Llistxattr(p, buf)
	if err != nil && err != unix.ENOTSUP {
		return metaState{}, fmt.Errorf("list xattrs: %w", err)
	}
	for _, name := range strings.Split(string(buf[:max(n, 0)]), "\x00") {
		if name == "" {
			continue
		}
		v := make([]byte, 1<<16)
		m, err := unix.Lgetxattr(p, name, v)
		if err != nil {
			return metaState{}, fmt.Errorf("read xattr %s: %w", name, err)
		}
		s.Xattrs[name] = string(v[:m])
	}
	if st.Mode&unix.S_IFMT == unix.S_IFREG || st.Mode&unix.S_IFMT == unix.S_IFDIR {
		// O_NOATIME needs the owner (or CAP_FOWNER): open without it, and
		// never read: opening does not touch the atime.
		fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err == nil {
			f, ferr := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
			var x [28]byte                                                                                      // struct fsxattr
			_, _, xerr := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), 0x801c581f, uintptr(unsafe.Pointer(&x[0]))) // FS_IOC_FSGETXATTR
			unix.Close(fd)
			s.Flags = fmt.Sprintf("flags %#x (%v), fsxattr %x (%v)", f, ferr, x, xerr)
		}
	}
	return s, nil
}

// metaTree is the attack's ground: fs_read folder readable/ and the folder
// hidden/, granted nothing, each with canaries of every owner in owners;
// and the fs_write folder w/, owned by writer.
type metaTree struct {
	root, readable, hidden, w string
	canaries                  []metaCanary
}

func newMetaTree(t *testing.T, writer int, owners ...int) metaTree {
	t.Helper()
	root := openTempDir(t)
	mt := metaTree{root: root, readable: filepath.Join(root, "readable"), hidden: filepath.Join(root, "hidden"), w: filepath.Join(root, "w")}
	for _, d := range []string{mt.readable, mt.hidden, mt.w} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(mt.w, writer, gidFor(writer)); err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile("/usr/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{mt.readable, mt.hidden} {
		for _, owner := range owners {
			for _, c := range []struct {
				name string
				mode os.FileMode
				data []byte
			}{{"secret", 0o600, []byte("TOP-SECRET\n")}, {"bin", 0o755, bin}, {"dir", 0o755 | os.ModeDir, nil}} {
				p := filepath.Join(dir, fmt.Sprintf("%s-%d", c.name, owner))
				if c.data == nil {
					err = os.Mkdir(p, c.mode.Perm())
				} else {
					err = os.WriteFile(p, c.data, c.mode.Perm())
				}
				if err == nil {
					err = os.Chmod(p, c.mode.Perm())
				}
				if err == nil {
					err = unix.Setxattr(p, "user.keep", []byte("v"), 0)
				}
				if err == nil {
					err = os.Chown(p, owner, gidFor(owner))
				}
				if err == nil {
					past := time.Unix(1e9, 0)
					err = os.Chtimes(p, past, past)
				}
				if err != nil {
					t.Fatalf("canary %s: %v", p, err)
				}
				mt.canaries = append(mt.canaries, metaCanary{Path: p, UID: owner, GID: gidFor(owner)})
			}
		}
	}
	return mt
}

// openTempDir returns a new temporary folder that every uid can traverse
// (t.TempDir makes 0700 folders, closed to the sandbox's own uid).
func openTempDir(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	for p := d; p != os.TempDir() && p != "/" && strings.HasPrefix(p, os.TempDir()); p = filepath.Dir(p) {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// metaScript is the Python program that tries every attack on every
// canary and prints a line for each one that returned success.
func metaScript(mt metaTree) string {
	var b strings.Builder
	b.WriteString(metaPrelude)
	fmt.Fprintf(&b, "W = %q\n", mt.w)
	b.WriteString("CASES = [\n")
	for _, a := range metaAttacks {
		fmt.Fprintf(&b, "  (%q, %q),\n", a.Name, a.Py)
	}
	b.WriteString("]\nCANARIES = [\n")
	for _, c := range mt.canaries {
		fmt.Fprintf(&b, "  (%q, %d, %d),\n", c.Path, c.UID, c.GID)
	}
	b.WriteString(`]
tried = 0
for p, OUID, OGID in CANARIES:
    for name, code in CASES:
        tried += 1
        try:
            exec(code)
            print("SUCCEEDED", name, p, flush=True)
        except OSError as e:
            pass
        finally:
            os.chdir(W)
print("TRIED", tried)
`)
	return b.String()
}

// metadataAttack runs every attack of metaAttacks on a backend (a
// sandbox.Isolation value) against canaries owned by the test's own uid
// and by the fs_write folder's owner, and fails t unless every attack was
// refused and every canary is unchanged. As root the fs_write folder
// belongs to an unprivileged uid, the project owner the landlock backend
// runs as.
func metadataAttack(t *testing.T, isolation string) {
	t.Helper()
	writer := os.Geteuid()
	owners := []int{writer}
	if writer == 0 {
		writer = metaWriter
		owners = append(owners, writer)
	}
	mt := newMetaTree(t, writer, owners...)
	before := map[string]metaState{}
	for _, c := range mt.canaries {
		before[c.Path] = readMeta(t, c.Path)
	}
	spec := policy.Spec{FSRead: []string{mt.readable}, FSWrite: []string{mt.w}, AllowDowngrade: []string{"staged_writes"}}
	if isolation != sandbox.IsolationLandlock && os.Geteuid() != 0 {
		spec.AllowDowngrade = append(spec.AllowDowngrade, airtest.RootlessDowngrades()...)
	}
	rep := runIn(t, isolation, spec, "/usr/bin/python3", "-c", metaScript(mt))
	wantExit(t, rep, 0)
	if want := fmt.Sprintf("TRIED %d", len(metaAttacks)*len(mt.canaries)); !strings.Contains(rep.Stdout, want) {
		t.Fatalf("the attack script did not finish (want %q):\nstdout:\n%s\nstderr:\n%s", want, rep.Stdout, rep.Stderr)
	}
	var bad []string
	for _, line := range strings.Split(rep.Stdout, "\n") {
		if strings.HasPrefix(line, "SUCCEEDED ") {
			bad = append(bad, line)
		}
	}
	for _, c := range mt.canaries {
		if after := readMeta(t, c.Path); fmt.Sprint(after) != fmt.Sprint(before[c.Path]) {
			bad = append(bad, fmt.Sprintf("CHANGED %s:\n    before %+v\n    after  %+v", c.Path, before[c.Path], after))
		}
	}
	if len(bad) > 0 {
		t.Fatalf("%s backend (uid %d): %d attacks on metadata outside the fs_write grants got through:\n%s", isolation, os.Geteuid(), len(bad), strings.Join(bad, "\n"))
	}
}

// metaWriter is the unprivileged uid that owns the fs_write folder when
// the test runs as root.
const metaWriter = 54320

// runIn runs argv under spec with the given isolation, bounded.
func runIn(t *testing.T, isolation string, spec policy.Spec, argv ...string) *sandbox.Report {
	t.Helper()
	if isolation == sandbox.IsolationLandlock {
		return runL(t, spec, sandbox.Config{}, argv...)
	}
	if spec.Budget.Wall == 0 {
		spec.Budget.Wall = 20 * time.Second
	}
	p, err := policy.New(spec)
	if err != nil {
		t.Fatalf("policy.New: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rep, err := (&sandbox.Cmd{Config: sandbox.Config{Policy: p, Isolation: isolation}, Args: argv, CommandIsGranted: true}).Run(ctx)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return rep
}

// asUnprivileged reports whether the caller should run the test's body:
// as an unprivileged user it should; as root it runs the test again in a
// copy of this test binary as uid and gid id, without groups or
// capabilities, fails t if that run fails, and reports false.
func asUnprivileged(t *testing.T, id int) bool {
	t.Helper()
	if os.Geteuid() != 0 {
		return true
	}
	dir := openTempDir(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "sandbox.test")
	src, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err == nil {
		_, err = io.Copy(dst, src)
		if cerr := dst.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(tmp, id, id); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-test.run=^"+regexp.QuoteMeta(t.Name())+"$", "-test.count=1", "-test.v", "-test.timeout=150s")
	cmd.Dir = tmp
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + tmp, "TMPDIR=" + tmp, "AIRLOCK_TEST_STRICT=" + os.Getenv("AIRLOCK_TEST_STRICT")}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(id), Gid: uint32(id), Groups: []uint32{}}}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	t.Logf("as uid %d:\n%s", id, out.String())
	if err != nil {
		t.Fatalf("the test as uid %d failed: %v", id, err)
	}
	if !strings.Contains(out.String(), "--- PASS: "+t.Name()) {
		t.Fatalf("the test as uid %d did not pass (skipped?)", id)
	}
	return false
}

// metaUser is the unprivileged uid the user variants run as.
const metaUser = 54321

// TestUnsharedAttackMetadataRoot: the landlock backend run by root. The
// sandbox must not be able to chmod, chown, touch, set xattrs or ACLs on,
// or set inode flags of root's files (or the project owner's) outside its
// fs_write grant.
func TestUnsharedAttackMetadataRoot(t *testing.T) {
	requireUnshared(t)
	airtest.RequireRoot(t)
	metadataAttack(t, sandbox.IsolationLandlock)
}

// TestUnsharedAttackMetadataUser: the same, run by an unprivileged user
// against the user's own files.
func TestUnsharedAttackMetadataUser(t *testing.T) {
	requireUnshared(t)
	if asUnprivileged(t, metaUser) {
		metadataAttack(t, sandbox.IsolationLandlock)
	}
}

// TestNamespacesAttackMetadataRoot: the namespace backend, run by root:
// the canaries outside the grants are absent or read-only binds.
func TestNamespacesAttackMetadataRoot(t *testing.T) {
	requireSandbox(t)
	airtest.RequireRoot(t)
	metadataAttack(t, sandbox.IsolationNamespaces)
}

// TestNamespacesAttackMetadataUser: the namespace backend, run by an
// unprivileged user.
func TestNamespacesAttackMetadataUser(t *testing.T) {
	requireSandbox(t)
	if asUnprivileged(t, metaUser) {
		metadataAttack(t, sandbox.IsolationNamespaces)
	}
}
