package sandbox_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/policy"
)

// Every test here tries to break a guarantee the README makes, against the
// real kernel. A pass means the attack failed.

func TestAttackFilesystemReads(t *testing.T) {
	requireSandbox(t)
	tr := newTree(t)
	spec := policy.Spec{FSRead: []string{tr.work}, FSWrite: []string{tr.out}, Env: []string{"HOME=" + tr.home}}
	targets := map[string]string{
		"planted-aws-credentials": filepath.Join(tr.home, ".aws", "credentials"),
		"etc-shadow":              "/etc/shadow",
		"root-home":               "/root/.bashrc",
		"other-users-home":        "/home",
		"workshop-prefix":         filepath.Join(tr.workshop, "other.txt"),
		"dotdot-escape":           tr.work + "/../secret.txt",
		"proc-self-root":          "/proc/self/root" + tr.secret,
		"proc-1-root":             "/proc/1/root" + tr.secret,
		"supervisor-cwd":          fmt.Sprintf("/proc/%d/cwd", os.Getpid()),
		"host-proc-environ":       fmt.Sprintf("/proc/%d/environ", os.Getpid()),
		"var":                     "/var/log",
		"sys":                     "/sys/kernel",
		"docker-socket":           "/var/run/docker.sock",
	}
	for name, target := range targets {
		t.Run(name, func(t *testing.T) {
			rep := py(t, spec, fmt.Sprintf(`
import os, sys
p = %q
try:
    if os.path.isdir(p):
        print("LISTED", os.listdir(p)); sys.exit(0)
    print("READ", open(p).read()); sys.exit(0)
except OSError as e:
    print("denied", e.errno); sys.exit(3)`, target))
			wantExit(t, rep, 3)
		})
	}
}

func TestAttackHomeCredentialsViaEnv(t *testing.T) {
	requireSandbox(t)
	tr := newTree(t)
	t.Setenv("HOME", tr.home)
	t.Setenv("AWS_SECRET_ACCESS_KEY", "AKIA-FROM-HOST-ENV")
	rep := py(t, policy.Spec{Env: []string{"HOME"}}, `
import os
print(sorted(os.environ))
print(os.environ.get("AWS_SECRET_ACCESS_KEY"))
try:
    print(open(os.path.expanduser("~/.aws/credentials")).read())
except OSError as e:
    print("denied", e.errno)`)
	wantExit(t, rep, 0)
	if strings.Contains(rep.Stdout, "AKIA") {
		t.Fatalf("a host secret reached the sandbox:\n%s", rep.Stdout)
	}
	if !strings.Contains(rep.Stdout, "denied") {
		t.Fatalf("reading the planted credentials did not fail:\n%s", rep.Stdout)
	}
}

func TestAttackSymlinkAndHardlink(t *testing.T) {
	requireSandbox(t)
	tr := newTree(t)
	// Planted on the host inside the write grant, pointing outside it.
	if err := os.Symlink(tr.secret, filepath.Join(tr.out, "to-secret")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc", filepath.Join(tr.out, "to-etc")); err != nil {
		t.Fatal(err)
	}
	spec := policy.Spec{FSWrite: []string{tr.out}}
	rep := py(t, spec, fmt.Sprintf(`
import os, sys
out = %q
bad = []
for p in [out + "/to-secret", out + "/to-etc/shadow"]:
    try:
        bad.append((p, open(p).read()))
    except OSError:
        pass
try:
    open(out + "/to-etc/airlock-owned", "w").write("x"); bad.append("wrote through to-etc")
except OSError:
    pass
for src in ["/etc/passwd", "/usr/lib/os-release"]:
    try:
        os.link(src, out + "/hl"); bad.append("hardlinked " + src)
    except OSError:
        pass
print(bad); sys.exit(1 if bad else 0)`, tr.out))
	wantExit(t, rep, 0)
	if _, err := os.Stat("/etc/airlock-owned"); err == nil {
		t.Fatal("the sandbox wrote /etc/airlock-owned on the host")
	}
}

func TestAttackGrantThroughSymlinkRefused(t *testing.T) {
	requireSandbox(t)
	tr := newTree(t)
	link := filepath.Join(tr.root, "link-to-work")
	if err := os.Symlink(tr.work, link); err != nil {
		t.Fatal(err)
	}
	rep := sh(t, policy.Spec{FSRead: []string{link}}, "true")
	wantExit(t, rep, 125)
	if !strings.Contains(rep.Error, "symlink") {
		t.Fatalf("error = %q, want it to name the symlink", rep.Error)
	}
}

func TestAttackWritesAndMounts(t *testing.T) {
	requireSandbox(t)
	tr := newTree(t)
	spec := policy.Spec{FSRead: []string{tr.work}, FSWrite: []string{tr.out}}
	rep := py(t, spec, fmt.Sprintf(`
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
bad = []
for p in [%q, "/usr/lib/airlock-x", "/etc/passwd", "/proc/sys/kernel/hostname", "/airlock-x", "/dev/airlock-x"]:
    try:
        open(p, "w").write("x"); bad.append("wrote " + p)
    except OSError:
        pass
def call(name, *args):
    r = getattr(libc, name)(*args)
    if r == 0:
        bad.append(name + " succeeded")
MS_REMOUNT, MS_BIND = 32, 4096
call("mount", b"none", %q, None, MS_REMOUNT | MS_BIND, None)
call("mount", b"tmpfs", b"/tmp", b"tmpfs", 0, None)
call("chroot", b"/tmp")
call("pivot_root", b"/tmp", b"/tmp")
call("mknod", b"/tmp/null2", 0o20666, os.makedev(1, 3))
call("umount2", b"/proc", 2)
print(bad); sys.exit(1 if bad else 0)`, tr.work+"/data.csv", tr.work))
	wantExit(t, rep, 0)
}

func TestAttackPrivileges(t *testing.T) {
	requireSandbox(t)
	rep := py(t, policy.Spec{}, fmt.Sprintf(`
import ctypes, os, sys, signal
libc = ctypes.CDLL(None, use_errno=True)
bad = []
status = open("/proc/self/status").read()
for line in status.splitlines():
    if line.startswith(("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")) and not line.endswith("0000000000000000"):
        bad.append(line)
    if line.startswith("NoNewPrivs") and not line.endswith("1"):
        bad.append(line)
    if line.startswith("Seccomp:") and not line.endswith("2"):
        bad.append(line)
try:
    os.kill(%d, 0); bad.append("saw the supervisor's pid")
except OSError:
    pass
if len([p for p in os.listdir("/proc") if p.isdigit()]) > 3:
    bad.append("sees many processes: " + str(os.listdir("/proc")))
if libc.ptrace(0, 0, None, None) == 0:
    bad.append("ptrace(TRACEME) succeeded")
if libc.unshare(0x10000000) == 0:
    bad.append("unshare(CLONE_NEWUSER) succeeded")
if libc.setuid(0) == 0 and os.getuid() != 0:
    bad.append("setuid succeeded")
fds = sorted(int(f) for f in os.listdir("/proc/self/fd"))
if [f for f in fds if f > 3]:
    bad.append("inherited fds: " + str(fds))
print(bad); sys.exit(1 if bad else 0)`, os.Getpid()))
	wantExit(t, rep, 0)
}

func TestAttackNetwork(t *testing.T) {
	requireSandbox(t)
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := l.Accept(); err == nil {
			accepted <- struct{}{}
			c.Close()
		}
	}()
	abstract, err := net.Listen("unix", "@airlock-test-"+fmt.Sprint(os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	defer abstract.Close()
	port := l.Addr().(*net.TCPAddr).Port
	rep := py(t, policy.Spec{}, fmt.Sprintf(`
import socket, sys
bad = []
try:
    socket.create_connection(("127.0.0.1", %d), timeout=3); bad.append("reached host loopback")
except OSError:
    pass
try:
    s = socket.socket(socket.AF_UNIX); s.connect("\0airlock-test-%d"); bad.append("reached host abstract socket")
except OSError:
    pass
for fam, typ, proto in [(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP), (socket.AF_PACKET, socket.SOCK_RAW, 0), (socket.AF_NETLINK, socket.SOCK_RAW, 0), (socket.AF_INET, socket.SOCK_STREAM, 262)]:
    try:
        socket.socket(fam, typ, proto); bad.append("opened socket %%s/%%s/%%s" %% (fam, typ, proto))
    except OSError:
        pass
try:
    socket.getaddrinfo("example.com", 443); bad.append("resolved a name")
except OSError:
    pass
print(bad); sys.exit(1 if bad else 0)`, port, os.Getpid()))
	wantExit(t, rep, 0)
	select {
	case <-accepted:
		t.Fatal("the host listener accepted a connection from the sandbox")
	default:
	}
}

// TestAttackProcMasked: /proc entries that describe the host kernel are
// empty inside the sandbox.
func TestAttackProcMasked(t *testing.T) {
	requireSandbox(t)
	rep := py(t, policy.Spec{}, `
import os, sys
bad = []
for p in ["/proc/kallsyms", "/proc/timer_list", "/proc/keys", "/proc/kcore", "/proc/sched_debug"]:
    try:
        with open(p, "rb") as f:
            data = f.read(64)
        if data:
            bad.append(p)
    except OSError:
        pass
for d in ["/proc/acpi", "/proc/scsi"]:
    if os.path.isdir(d) and os.listdir(d):
        bad.append(d)
try:
    open("/proc/sysrq-trigger", "w").write("h"); bad.append("sysrq-trigger writable")
except OSError:
    pass
print(bad); sys.exit(1 if bad else 0)`)
	wantExit(t, rep, 0)
}

// TestCommandInPrivateDir: as root, a command or grant under a directory
// only root can enter still works (the supervisor clones bind sources with
// its own access; the sandbox's uid never walks the host tree).
func TestCommandInPrivateDir(t *testing.T) {
	requireSandbox(t)
	airtest.RequireRoot(t)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "sh")
	b, err := os.ReadFile("/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(exe, b, 0o755); err != nil {
		t.Fatal(err)
	}
	wantExit(t, run(t, policy.Spec{FSRead: []string{dir}}, exe, "-c", "exit 0"), 0)
}
