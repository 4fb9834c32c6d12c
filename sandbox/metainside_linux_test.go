package sandbox_test

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// What the landlock backend's metadata broker must keep working inside an
// fs_write grant (chmod +x, cp -p, tar x, shutil.copy2, pip install,
// times, user.* xattrs), and what it refuses there too (set-id bits,
// another owner, trusted.* and security.* xattrs, protected paths, inode
// flags, a set-id file made by open(O_CREAT)).

// insideTree is an fs_write folder w/ owned by the sandbox's uid (an
// unprivileged one when the test runs as root), a read grant r/ with a
// source file, and the archives the tools unpack.
type insideTree struct {
	root, w, r, src string
	owner           int
}

func newInsideTree(t *testing.T) insideTree {
	t.Helper()
	owner := os.Geteuid()
	if owner == 0 {
		owner = metaWriter
	}
	root := openTempDir(t)
	it := insideTree{root: root, w: filepath.Join(root, "w"), r: filepath.Join(root, "r"), owner: owner}
	it.src = filepath.Join(it.r, "src.py")
	for _, d := range []string{it.w, it.r} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(it.src, []byte("print('src')\n"), 0o754); err != nil {
		t.Fatal(err)
	}
	past := time.Unix(1.5e9, 0)
	if err := os.Chtimes(it.src, past, past); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(it.src, "user.origin", []byte("r"), 0); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(it.r, "t.tar"), tarball(t), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(it.r, "demo-1.0-py3-none-any.whl"), wheel(t), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"f", "b", ".bashrc"} {
		if err := os.WriteFile(filepath.Join(it.w, f), []byte("x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := filepath.Walk(it.w, func(p string, _ os.FileInfo, err error) error {
		if err == nil {
			err = os.Chown(p, owner, gidFor(owner))
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return it
}

// tarball is a tar of a folder with an executable and a plain file, each
// with its own mode and time.
func tarball(t *testing.T) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mt := time.Unix(1.4e9, 0)
	for _, h := range []*tar.Header{
		{Name: "pkg/", Typeflag: tar.TypeDir, Mode: 0o750, ModTime: mt},
		{Name: "pkg/run.sh", Typeflag: tar.TypeReg, Mode: 0o755, ModTime: mt, Size: 10},
		{Name: "pkg/data.txt", Typeflag: tar.TypeReg, Mode: 0o600, ModTime: mt, Size: 10},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			tw.Write([]byte("#!/bin/sh\n"))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// wheel is a minimal wheel: a package and a script pip installs
// executable.
func wheel(t *testing.T) []byte {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	files := map[string]string{
		"demo/__init__.py":                     "X = 1\n",
		"demo-1.0.data/scripts/demo-run":       "#!python\nprint('demo')\n",
		"demo-1.0.dist-info/METADATA":          "Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n",
		"demo-1.0.dist-info/WHEEL":             "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
		"demo-1.0.dist-info/top_level.txt":     "demo\n",
		"demo-1.0.dist-info/RECORD":            "",
		"demo-1.0.dist-info/entry_points.txt":  "",
		"demo-1.0.dist-info/INSTALLER.ignored": "",
	}
	for name, body := range files {
		h := &zip.FileHeader{Name: name, Method: zip.Deflate}
		h.SetMode(0o644)
		if strings.Contains(name, "/scripts/") {
			h.SetMode(0o755) // pip installs a script executable when the wheel says so
		}
		w, err := zw.CreateHeader(h)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(body))
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// insideScript does what works inside the grant and prints OK lines, and
// tries what must not and prints REFUSED or GOT-THROUGH lines.
const insideScript = `
import ctypes, errno, fcntl, os, shutil, struct, subprocess, sys, array
W, R = sys.argv[1], sys.argv[2]
def ok(name, f):
    try:
        f()
        print("OK", name, flush=True)
    except Exception as e:
        print("BROKEN", name, repr(e), flush=True)
def refused(name, f):
    try:
        f()
        print("GOT-THROUGH", name, flush=True)
    except OSError as e:
        print("REFUSED", name, errno.errorcode.get(e.errno, e.errno), flush=True)
def run(*argv):
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise RuntimeError("%s: %d %s %s" % (argv[0], r.returncode, r.stdout, r.stderr))

open(W + "/s.sh", "w").write("#!/bin/sh\necho hi\n")
ok("chmod+x", lambda: os.chmod(W + "/s.sh", 0o755))
ok("utime", lambda: os.utime(W + "/f", (1000, 2000)))
ok("utime-now", lambda: os.utime(W + "/f"))
ok("fchmod", lambda: os.fchmod(os.open(W + "/f", os.O_RDONLY), 0o640))
ok("futimens", lambda: os.utime(os.open(W + "/f", os.O_RDONLY), (3000, 4000)))
ok("chmod-nofollow", lambda: os.chmod(W + "/f", 0o644, follow_symlinks=False))
ok("chown-self", lambda: os.chown(W + "/f", os.getuid(), os.getgid()))
ok("user-xattr", lambda: (os.setxattr(W + "/f", "user.tag", b"v"), os.removexattr(W + "/f", "user.tag")))
ok("acl", lambda: os.setxattr(W + "/f", "system.posix_acl_access", struct.pack("<I", 2) + b"".join(struct.pack("<HHI", tag, perm, 0xffffffff) for tag, perm in ((1, 6), (4, 4), (0x20, 4)))))
ok("copy2", lambda: shutil.copy2(R + "/src.py", W + "/copy2.py"))
ok("cp-p", lambda: run("/usr/bin/cp", "-p", R + "/src.py", W + "/cp.py"))
ok("tar-x", lambda: (os.mkdir(W + "/t"), run("/usr/bin/tar", "-xf", R + "/t.tar", "-C", W + "/t")))
ok("pip", lambda: run(sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--no-cache-dir",
    "--disable-pip-version-check", "--no-compile", "--target", W + "/site", R + "/demo-1.0-py3-none-any.whl"))
ok("posix_fallocate", lambda: os.posix_fallocate(os.open(W + "/alloc", os.O_CREAT | os.O_WRONLY, 0o644), 0, 1 << 20))
ok("chmod-setgid-folder", lambda: (os.mkdir(W + "/shared"), os.chmod(W + "/shared", 0o2775)))

refused("chmod-setuid", lambda: os.chmod(W + "/b", 0o4755))
refused("chmod-setgid", lambda: os.chmod(W + "/b", 0o2755))
refused("fchmod-setuid", lambda: os.fchmod(os.open(W + "/b", os.O_RDONLY), 0o4755))
refused("open-creat-setuid", lambda: os.open(W + "/new-suid", os.O_CREAT | os.O_WRONLY, 0o4755))
refused("open-creat-setgid", lambda: os.open(W + "/new-sgid", os.O_CREAT | os.O_WRONLY, 0o2755))
refused("mknod-setuid", lambda: os.mknod(W + "/node-suid", 0o104755))
refused("chown-other", lambda: os.chown(W + "/f", 0 if os.getuid() else 1, -1))
refused("trusted-xattr", lambda: os.setxattr(W + "/f", "trusted.x", b"1"))
refused("security-xattr", lambda: os.setxattr(W + "/f", "security.x", b"1"))
refused("protected-chmod", lambda: os.chmod(W + "/.bashrc", 0o755))
refused("protected-utime", lambda: os.utime(W + "/.bashrc", (1, 1)))
def setflags():
    fd = os.open(W + "/f", os.O_RDONLY)
    a = array.array("l", [0])
    fcntl.ioctl(fd, 0x80086601, a)
    a[0] |= 0x40
    fcntl.ioctl(fd, 0x40086602, a)
refused("FS_IOC_SETFLAGS", setflags)
libc = ctypes.CDLL(None, use_errno=True)
def fallocate():
    fd = os.open(W + "/alloc2", os.O_CREAT | os.O_WRONLY, 0o644)
    nr = {"x86_64": 285, "aarch64": 47}[os.uname().machine]
    if libc.syscall(nr, fd, 0, ctypes.c_long(0), ctypes.c_long(1 << 20)) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
refused("fallocate", fallocate)
def openat2():
    nr = 437
    how = struct.pack("QQQ", os.O_CREAT | os.O_WRONLY, 0o4755, 0)
    if libc.syscall(nr, -100, (W + "/new-openat2").encode(), how, len(how)) < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
refused("openat2", openat2)
print("DONE")
`

// TestUnsharedMetadataInsideGrants: inside an fs_write grant the usual
// tools keep their modes, times and xattrs; what could plant a privilege
// stays refused.
func TestUnsharedMetadataInsideGrants(t *testing.T) {
	requireUnshared(t)
	metadataInsideGrants(t)
}

// TestUnsharedMetadataInsideGrantsUser: the same, run by an unprivileged
// user.
func TestUnsharedMetadataInsideGrantsUser(t *testing.T) {
	requireUnshared(t)
	if asUnprivileged(t, metaUser) {
		metadataInsideGrants(t)
	}
}

func metadataInsideGrants(t *testing.T) {
	t.Helper()
	it := newInsideTree(t)
	// pip reads /etc/debian_version (distro.version() for its user agent)
	// and /etc/mime.types (mimetypes), which the landlock backend's system
	// base does not grant.
	read := []string{it.r}
	for _, f := range []string{"/etc/debian_version", "/etc/mime.types"} {
		if _, err := os.Stat(f); err == nil {
			read = append(read, f)
		}
	}
	spec := policy.Spec{FSRead: read, FSWrite: []string{it.w}, AllowDowngrade: []string{"staged_writes"},
		AllowedTools: []string{"cp", "tar", "python3"}}
	rep := runL(t, spec, sandbox.Config{}, "/usr/bin/python3", "-c", insideScript, it.w, it.r)
	wantExit(t, rep, 0)
	if !strings.Contains(rep.Stdout, "DONE") {
		t.Fatalf("the script did not finish:\n%s\n%s", rep.Stdout, rep.Stderr)
	}
	var bad []string
	for _, line := range strings.Split(rep.Stdout, "\n") {
		if strings.HasPrefix(line, "BROKEN ") || strings.HasPrefix(line, "GOT-THROUGH ") {
			bad = append(bad, line)
		}
	}
	// What the kernel answers matters to programs: each refusal's errno.
	for name, want := range map[string]string{"fallocate": "ENOTSUP", "openat2": "ENOSYS", "chmod-setuid": "EPERM", "trusted-xattr": "EPERM", "FS_IOC_SETFLAGS": "EPERM"} {
		if !strings.Contains(rep.Stdout, "REFUSED "+name+" "+want+"\n") {
			bad = append(bad, fmt.Sprintf("%s was not refused with %s", name, want))
		}
	}
	wantMode := map[string]os.FileMode{"s.sh": 0o755, "b": 0o644, "t/pkg/run.sh": 0o755, "t/pkg": 0o750 | os.ModeDir, "copy2.py": 0o754, "cp.py": 0o754,
		"shared": 0o775 | os.ModeDir | os.ModeSetgid, "site/bin/demo-run": 0o755}
	for f, want := range wantMode {
		fi, err := os.Lstat(filepath.Join(it.w, f))
		if err != nil || fi.Mode() != want {
			bad = append(bad, fmt.Sprintf("%s: mode %v (%v), want %v", f, fileMode(fi), err, want))
		}
	}
	for f, want := range map[string]int64{"f": 4000, "t/pkg/run.sh": 1.4e9, "copy2.py": 1.5e9, "cp.py": 1.5e9} {
		fi, err := os.Lstat(filepath.Join(it.w, f))
		if err != nil || fi.ModTime().Unix() != want {
			bad = append(bad, fmt.Sprintf("%s: mtime %v (%v), want %d", f, fileTime(fi), err, want))
		}
	}
	if v := make([]byte, 8); true {
		if n, err := unix.Getxattr(filepath.Join(it.w, "copy2.py"), "user.origin", v); err != nil || string(v[:n]) != "r" {
			bad = append(bad, fmt.Sprintf("copy2.py lost its user.origin xattr (%v)", err))
		}
	}
	for _, f := range []string{"new-suid", "new-sgid", "node-suid", "new-openat2"} {
		if _, err := os.Lstat(filepath.Join(it.w, f)); err == nil {
			bad = append(bad, f+" was created")
		}
	}
	for _, f := range []string{"f", "s.sh", "t/pkg/run.sh", "copy2.py", "site/demo/__init__.py"} {
		if fi, err := os.Lstat(filepath.Join(it.w, f)); err != nil || fileOwner(fi) != it.owner {
			bad = append(bad, fmt.Sprintf("%s belongs to uid %d (%v), want %d", f, fileOwner(fi), err, it.owner))
		}
	}
	if len(bad) > 0 {
		t.Fatalf("inside the fs_write grant:\n%s\nstdout:\n%s\nstderr:\n%s", strings.Join(bad, "\n"), rep.Stdout, rep.Stderr)
	}
	denied := map[string]bool{}
	for _, d := range rep.Denials {
		if d.Layer == "fs" && d.Rule == "fs_write" {
			denied[d.Op] = true
		}
	}
	for _, op := range []string{"chmod", "chown", "setxattr"} {
		found := false
		for d := range denied {
			found = found || strings.Contains(d, op)
		}
		if !found {
			t.Errorf("no fs_write denial of a %s call in the report: %+v", op, rep.Denials)
		}
	}
}

func fileMode(fi os.FileInfo) any {
	if fi == nil {
		return nil
	}
	return fi.Mode()
}

func fileTime(fi os.FileInfo) any {
	if fi == nil {
		return nil
	}
	return fi.ModTime().Unix()
}

// BenchmarkMetadataBroker times one chmod of a file in the fs_write grant
// as the sandbox sees it: through the landlock backend's metadata broker,
// against the namespace backend's, where the kernel answers it alone (the
// baseline, in the same run). The time is the sandbox's own measure, per
// call, over 5000 calls.
func BenchmarkMetadataBroker(b *testing.B) {
	for _, iso := range []string{sandbox.IsolationNamespaces, sandbox.IsolationLandlock} {
		b.Run(iso, func(b *testing.B) {
			w := filepath.Join(b.TempDir(), "w")
			for p := w; strings.HasPrefix(filepath.Dir(p), os.TempDir()+"/"); p = filepath.Dir(p) {
				os.Chmod(filepath.Dir(p), 0o755)
			}
			if err := os.Mkdir(w, 0o755); err != nil {
				b.Fatal(err)
			}
			if os.Geteuid() == 0 && iso == sandbox.IsolationLandlock {
				os.Chown(w, metaWriter, metaWriter) // the uid the landlock backend runs as; the namespace backend's grants are the caller's
			}
			spec := policy.Spec{FSWrite: []string{w}, AllowDowngrade: []string{"staged_writes"}}
			for range b.N {
				rep := runBench(b, iso, spec, "/usr/bin/python3", "-c", `
import os, sys, time
f = os.path.join(sys.argv[1], "f")
open(f, "w").close()
n = 5000
t0 = time.perf_counter_ns()
for i in range(n):
    os.chmod(f, 0o644 if i % 2 else 0o600)
print((time.perf_counter_ns() - t0) // n)`, w)
				ns, err := strconv.Atoi(strings.TrimSpace(rep.Stdout))
				if err != nil {
					b.Fatalf("%s: %q %q %q", iso, rep.Stdout, rep.Stderr, rep.Error)
				}
				b.ReportMetric(float64(ns), "ns/chmod")
			}
		})
	}
}

// runBench is runIn for a benchmark.
func runBench(b *testing.B, isolation string, spec policy.Spec, argv ...string) *sandbox.Report {
	b.Helper()
	spec.Budget.Wall = 60 * time.Second
	if os.Geteuid() != 0 {
		spec.AllowDowngrade = append(spec.AllowDowngrade, "max_memory", "max_pids", "max_cpu")
	}
	p, err := policy.New(spec)
	if err != nil {
		b.Fatal(err)
	}
	rep, err := (&sandbox.Cmd{Config: sandbox.Config{Policy: p, Isolation: isolation}, Args: argv, CommandIsGranted: true}).Run(b.Context())
	if err != nil {
		b.Fatal(err)
	}
	return rep
}
