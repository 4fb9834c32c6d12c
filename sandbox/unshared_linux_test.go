package sandbox_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/plan"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// The backend without namespaces (Isolation "landlock"), attacked on the
// real kernel: the same guarantees as the namespace backend's attack tests
// where they apply, with Landlock, seccomp and the connect broker alone.

func requireUnshared(t *testing.T) {
	t.Helper()
	airtest.RequireLandlockABI(t, plan.NoNamespacesMinLandlock)
	airtest.RequireBinary(t, "/usr/bin/python3")
}

// runL runs argv under spec on the backend without namespaces, bounded.
func runL(t *testing.T, spec policy.Spec, cfg sandbox.Config, argv ...string) *sandbox.Report {
	t.Helper()
	if spec.Budget.Wall == 0 {
		spec.Budget.Wall = 20 * time.Second
	}
	if os.Geteuid() != 0 {
		spec.AllowDowngrade = append(spec.AllowDowngrade, "max_memory", "max_pids", "max_cpu")
	}
	p, err := policy.New(spec)
	if err != nil {
		t.Fatalf("policy.New: %v", err)
	}
	cfg.Policy, cfg.Isolation = p, sandbox.IsolationLandlock
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rep, err := (&sandbox.Cmd{Config: cfg, Args: argv, CommandIsGranted: true}).Run(ctx)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return rep
}

func pyL(t *testing.T, spec policy.Spec, code string) *sandbox.Report {
	t.Helper()
	return runL(t, spec, sandbox.Config{}, "/usr/bin/python3", "-c", code)
}

func TestUnsharedReportSaysWhatRan(t *testing.T) {
	requireUnshared(t)
	rep := pyL(t, policy.Spec{}, `print("hi")`)
	wantExit(t, rep, 0)
	e := rep.Enforcement
	if e.Backend != sandbox.BackendLandlock || e.Namespaces || !e.Seccomp || e.Landlock < plan.NoNamespacesMinLandlock {
		t.Fatalf("enforcement = %+v", e)
	}
	joined := strings.Join(e.Weaker, "\n")
	for _, w := range []string{"no mount namespace", "no pid namespace", "no network namespace", "no private /tmp"} {
		if !strings.Contains(joined, w) {
			t.Errorf("weaker does not say %q:\n%s", w, joined)
		}
	}
}

// TestUnsharedAttackFiles: secrets outside the grants, the host's other
// files and writes outside fs_write are denied by Landlock alone.
func TestUnsharedAttackFiles(t *testing.T) {
	requireUnshared(t)
	tr := newUnsharedTree(t)
	outFile := filepath.Join(tr.out, "result.txt")
	if err := os.WriteFile(outFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	giveToSandbox(t, outFile)
	spec := policy.Spec{FSRead: []string{tr.work}, FSWrite: []string{outFile}, Env: []string{"HOME=" + tr.home}}
	reads := []string{tr.secret, filepath.Join(tr.home, ".aws", "credentials"), "/etc/shadow", "/root", "/home",
		filepath.Join(tr.workshop, "other.txt"), tr.work + "/../secret.txt", "/var/log", "/sys/kernel",
		fmt.Sprintf("/proc/%d/environ", os.Getpid()), fmt.Sprintf("/proc/%d/mem", os.Getpid()), fmt.Sprintf("/proc/%d/cwd/", os.Getpid()),
		"/proc/1/root/etc/shadow", "/dev/sda", "/dev/vda", "/dev/mem", "/usr/bin/env"}
	writes := []string{filepath.Join(tr.work, "planted"), filepath.Join(tr.workshop, "planted"), filepath.Join(tr.root, "planted"),
		"/tmp/airlock-unshared-planted", filepath.Join(tr.home, ".bashrc"), "/etc/passwd", "/dev/shm/planted"}
	rep := pyL(t, spec, fmt.Sprintf(`
import os
leaks = []
for p in %s:
    try:
        if os.path.isdir(p):
            leaks.append("LISTED " + p + " " + str(os.listdir(p)[:3]))
        else:
            with open(p, "rb") as f:
                leaks.append("READ " + p + " " + repr(f.read(20)))
    except OSError:
        pass
for p in %s:
    try:
        with open(p, "a") as f:
            f.write("x")
        leaks.append("WROTE " + p)
    except OSError:
        pass
with open(%q, "w") as f:
    f.write("granted")
print(data := open(%q).read().strip())
print("\n".join(leaks) or "NO LEAKS")`, pyList(reads), pyList(writes), outFile, filepath.Join(tr.work, "data.csv")))
	wantExit(t, rep, 0)
	if !strings.Contains(rep.Stdout, "NO LEAKS") || !strings.Contains(rep.Stdout, "x,y") {
		t.Fatalf("stdout:\n%s\nstderr:\n%s", rep.Stdout, rep.Stderr)
	}
	if b, _ := os.ReadFile(outFile); string(b) != "granted" {
		t.Fatalf("the fs_write file holds %q, want the sandbox's write", b)
	}
	for _, w := range writes {
		if _, err := os.Stat(w); err == nil && !strings.HasPrefix(w, "/etc") {
			t.Errorf("%s exists on the host", w)
		}
	}
}

// newUnsharedTree is newTree for the landlock backend, which never runs
// the sandbox as root: every uid can enter the tree, and as root the
// fs_write folder out/ belongs to metaWriter, whom the sandbox then runs
// as.
func newUnsharedTree(t *testing.T) tree {
	t.Helper()
	tr := newTree(t)
	for p := tr.root; strings.HasPrefix(p, os.TempDir()+"/"); p = filepath.Dir(p) {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	giveToSandbox(t, tr.out)
	return tr
}

// giveToSandbox gives the paths to metaWriter when the test runs as root.
func giveToSandbox(t *testing.T, paths ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		return
	}
	for _, p := range paths {
		if err := os.Chown(p, metaWriter, metaWriter); err != nil {
			t.Fatal(err)
		}
	}
}

func pyList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// TestUnsharedAttackNetwork: with no network namespace, nothing the
// sandbox does reaches a listener on the host's loopback, a unix socket of
// the host, UDP or a port of its own; only the egress proxy, which admits
// the granted host.
func TestUnsharedAttackNetwork(t *testing.T) {
	requireUnshared(t)
	var forbidden atomic.Int32
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go acceptCount(ln, &forbidden)
	ln6, err := net.Listen("tcp", "[::1]:0")
	if err == nil {
		defer ln6.Close()
		go acceptCount(ln6, &forbidden)
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "host.sock")
	ul, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ul.Close()
	go acceptCount(ul, &forbidden)
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	var udpHits atomic.Int32
	go func() {
		buf := make([]byte, 64)
		for {
			if _, _, err := udp.ReadFrom(buf); err != nil {
				return
			}
			udpHits.Add(1)
		}
	}()
	var granted atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		granted.Add(1)
		_, _ = io.WriteString(w, "granted host says hi")
	}))
	defer srv.Close()
	port := portOf(srv.Listener.Addr().String())
	tcpPort := portOf(ln.Addr().String())
	v6 := ""
	if ln6 != nil {
		v6 = portOf(ln6.Addr().String())
	}
	code := fmt.Sprintf(`
import socket, urllib.request, os
out = []
def attempt(name, fn):
    try:
        fn()
        out.append("REACHED " + name)
    except OSError as e:
        out.append("refused " + name + " " + str(e.errno))
def tcp(host, port, fam=socket.AF_INET):
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.settimeout(3)
    s.connect((host, port))
    s.sendall(b"exfil")
attempt("host-loopback", lambda: tcp("127.0.0.1", %[1]s))
if %[2]q:
    attempt("host-loopback-v6", lambda: tcp("::1", int(%[2]q), socket.AF_INET6))
attempt("v4-mapped", lambda: tcp("::ffff:127.0.0.1", %[1]s, socket.AF_INET6))
def unixc():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(%[3]q)
attempt("unix-socket", unixc)
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.sendto(b"exfil", ("127.0.0.1", %[4]s))
attempt("udp", udp)
def listen():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen()
attempt("listen", listen)
def autobind_listen():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.listen()
attempt("listen-autobind", autobind_listen)
def fastopen():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.sendto(b"exfil", 0x20000000, ("127.0.0.1", %[1]s))
attempt("tcp-fastopen", fastopen)
def raw():
    socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
attempt("raw", raw)
def netlink():
    socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
attempt("netlink", netlink)
def abstract():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect("\0airlock-test-abstract")
attempt("abstract-unix", abstract)
print("\n".join(out))
print(urllib.request.urlopen("http://granted.example:%[5]s/", timeout=10).read().decode())
try:
    urllib.request.urlopen("http://denied.example:%[5]s/", timeout=10).read()
    print("DENIED NAME REACHED")
except Exception as e:
    print("denied name:", e)
`, tcpPort, v6, sock, portOf(udp.LocalAddr().String()), port)
	rep := runL(t, policy.Spec{NetHosts: []string{"granted.example:" + port, "127.0.0.1:" + port}}, sandbox.Config{Resolver: fakeResolver{netip.MustParseAddr("127.0.0.1")}},
		"/usr/bin/python3", "-c", code)
	wantExit(t, rep, 0)
	if strings.Contains(rep.Stdout, "REACHED") || !strings.Contains(rep.Stdout, "granted host says hi") {
		t.Fatalf("stdout:\n%s\nstderr:\n%s", rep.Stdout, rep.Stderr)
	}
	if forbidden.Load() != 0 || udpHits.Load() != 0 {
		t.Fatalf("host listeners got %d connections and %d datagrams from the sandbox", forbidden.Load(), udpHits.Load())
	}
	if granted.Load() != 1 {
		t.Fatalf("the granted server saw %d requests, want 1", granted.Load())
	}
	found := false
	for _, d := range rep.Denials {
		if d.Op == "connect" && strings.Contains(d.Target, tcpPort) {
			found = true
		}
	}
	if !found {
		t.Fatalf("the report has no denial for the direct connect: %+v", rep.Denials)
	}
}

func acceptCount(ln net.Listener, n *atomic.Int32) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		n.Add(1)
		c.Close()
	}
}

// TestUnsharedAttackProcesses: without a pid namespace the sandbox sees
// the host's processes but cannot signal or trace them, nor its own init;
// and what it leaves running (a daemon in a new session) dies at the
// deadline with the rest.
func TestUnsharedAttackProcesses(t *testing.T) {
	requireUnshared(t)
	victim := startSleeper(t)
	pidFile := filepath.Join(openTempDir(t), "daemon.pid")
	out := filepath.Dir(pidFile)
	if err := os.Chmod(out, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pidFile, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	giveToSandbox(t, pidFile)
	code := fmt.Sprintf(`
import os, signal, time, sys
res = []
for name, pid in (("host-process", %d), ("supervisor", %d), ("init", os.getppid())):
    try:
        os.kill(pid, signal.SIGKILL)
        res.append("KILLED " + name)
    except OSError as e:
        res.append("refused " + name + " " + str(e.errno))
print("\n".join(res), flush=True)
# A daemon: double fork, new session, then the parent loops past max_wall.
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        with open(%q, "w") as f:
            f.write(str(os.getpid()))
        while True:
            time.sleep(1)
    os._exit(0)
while True:
    pass
`, victim.Process.Pid, os.Getpid(), pidFile)
	rep := runL(t, policy.Spec{FSWrite: []string{pidFile}, Budget: budget.Limits{Wall: 3 * time.Second}}, sandbox.Config{}, "/usr/bin/python3", "-c", code)
	if rep.HaltedBy == nil || *rep.HaltedBy != "max_wall" {
		t.Fatalf("halted_by = %v, want max_wall\n%s\n%s\n%s", rep.HaltedBy, rep.Error, rep.Stdout, rep.Stderr)
	}
	if strings.Contains(rep.Stdout, "KILLED") {
		t.Fatalf("the sandbox signalled outside itself:\n%s", rep.Stdout)
	}
	if err := victim.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the host process died: %v", err)
	}
	b, _ := os.ReadFile(pidFile)
	daemon, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("the daemon did not start (pid file %q):\n%s", b, rep.Stderr)
	}
	// Run returned after teardown: the daemon must be gone (or a zombie
	// being reaped).
	waitGone(t, daemon, "the sandbox's daemon")
}

// waitGone fails unless pid is gone within 3 s (the reaper gets a moment),
// and kills it if it is not.
func waitGone(t *testing.T, pid int, what string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for processAlive(pid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("%s (pid %d) outlived the sandbox", what, pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// processAlive reports whether pid runs and is not a zombie.
func processAlive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] != 'Z'
}

func startSleeper(t *testing.T) *exec.Cmd {
	t.Helper()
	c := exec.Command("/bin/sleep", "60")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	return c
}

// TestUnsharedBudgets: a denied tool, the output cap and the scratch
// bound hold without namespaces.
func TestUnsharedBudgets(t *testing.T) {
	requireUnshared(t)
	t.Run("denied-tool", func(t *testing.T) {
		rep := runL(t, policy.Spec{}, sandbox.Config{}, "/bin/sh", "-c", "/usr/bin/id; echo id=$?")
		wantExit(t, rep, 0)
		if !strings.Contains(rep.Stdout, "id=126") {
			t.Fatalf("a tool outside allowed_tools ran:\n%s\n%s", rep.Stdout, rep.Stderr)
		}
	})
	t.Run("max-output", func(t *testing.T) {
		rep := runL(t, policy.Spec{Budget: budget.Limits{OutputBytes: 4096}}, sandbox.Config{}, "/usr/bin/python3", "-c", "while True: print('y' * 100)")
		if rep.HaltedBy == nil || *rep.HaltedBy != "max_output_bytes" || len(rep.Stdout) > 4096 {
			t.Fatalf("halted_by = %v, %d bytes of stdout", rep.HaltedBy, len(rep.Stdout))
		}
	})
	t.Run("max-scratch-hidden-folder", func(t *testing.T) {
		// A folder the supervisor cannot read (chmod 000, as the caller's
		// uid) must not hide what it holds from the scratch watcher.
		if os.Geteuid() == 0 {
			t.Skip("root reads a chmod 000 folder anyway (CAP_DAC_READ_SEARCH): the hiding works only against a rootless supervisor; the rootless subset runs this")
		}
		rep := runL(t, policy.Spec{Budget: budget.Limits{Scratch: 1 << 20, Wall: 20 * time.Second}}, sandbox.Config{}, "/usr/bin/python3", "-c", `
import os, tempfile, time
print(tempfile.gettempdir(), flush=True)
d = os.path.join(tempfile.gettempdir(), "hidden")
os.mkdir(d)
with open(os.path.join(d, "big"), "wb") as f:
    f.write(os.urandom(4 << 20))
os.chmod(d, 0)
time.sleep(30)`)
		if rep.HaltedBy == nil || *rep.HaltedBy != "max_scratch" {
			t.Fatalf("halted_by = %v, want max_scratch\n%s\n%s", rep.HaltedBy, rep.Stdout, rep.Stderr)
		}
		if d := strings.TrimSpace(rep.Stdout); !strings.Contains(d, "airlock-scratch-") {
			t.Fatalf("TMPDIR inside = %q", d)
		} else if _, err := os.Lstat(d); err == nil {
			t.Fatalf("the scratch folder %s, with its unreadable folder, outlived the run", d)
		}
	})
	t.Run("max-scratch", func(t *testing.T) {
		rep := runL(t, policy.Spec{Budget: budget.Limits{Scratch: 1 << 20, Wall: 20 * time.Second}}, sandbox.Config{}, "/usr/bin/python3", "-c", `
import os, tempfile, time
d = tempfile.gettempdir()
print(d, flush=True)
for i in range(64):
    with open(os.path.join(d, "f%d" % i), "wb") as f:
        f.write(os.urandom(256 << 10))
time.sleep(30)`)
		if rep.HaltedBy == nil || *rep.HaltedBy != "max_scratch" {
			t.Fatalf("halted_by = %v, want max_scratch\n%s\n%s", rep.HaltedBy, rep.Stdout, rep.Stderr)
		}
		if d := strings.TrimSpace(rep.Stdout); !strings.Contains(d, "airlock-scratch-") {
			t.Fatalf("TMPDIR inside = %q, want the scratch folder", d)
		} else if _, err := os.Stat(d); err == nil {
			t.Fatalf("the scratch folder %s outlived the run", d)
		}
	})
}

// TestUnsharedRefusesWhatLandlockCannotExpress: a half-enforceable policy
// never starts a sandbox.
func TestUnsharedRefusesWhatLandlockCannotExpress(t *testing.T) {
	requireUnshared(t)
	tr := newUnsharedTree(t)
	for name, spec := range map[string]policy.Spec{
		"fs_deny-inside-grant":        {FSRead: []string{tr.root}, FSDeny: []string{tr.secret}},
		"fs_write-folder-not-allowed": {FSWrite: []string{tr.out}},
	} {
		t.Run(name, func(t *testing.T) {
			rep := runL(t, spec, sandbox.Config{}, "/usr/bin/python3", "-c", "print('STARTED')")
			wantExit(t, rep, 125)
			if strings.Contains(rep.Stdout, "STARTED") || !strings.Contains(rep.Error, "without namespaces") {
				t.Fatalf("error = %q stdout = %q", rep.Error, rep.Stdout)
			}
		})
	}
	t.Run("fs_write-folder-accepted", func(t *testing.T) {
		rep := runL(t, policy.Spec{FSWrite: []string{tr.out}, AllowDowngrade: []string{"staged_writes"}}, sandbox.Config{}, "/usr/bin/python3", "-c",
			fmt.Sprintf("open(%q, 'w').write('in place')", filepath.Join(tr.out, "w.txt")))
		wantExit(t, rep, 0)
		if b, _ := os.ReadFile(filepath.Join(tr.out, "w.txt")); string(b) != "in place" {
			t.Fatalf("w.txt = %q", b)
		}
		if !strings.Contains(strings.Join(rep.Enforcement.Weaker, "\n"), "written in place") {
			t.Fatalf("weaker does not say the writes are in place: %v", rep.Enforcement.Weaker)
		}
	})
}

// TestUnsharedSession: a session without namespaces runs execs with the
// file API on its grants, keeps background processes between execs and
// kills them when it ends.
func TestUnsharedSession(t *testing.T) {
	requireUnshared(t)
	tr := newUnsharedTree(t)
	spec := policy.Spec{FSRead: []string{tr.work}, FSWrite: []string{tr.out}, AllowedTools: []string{"python3", "sh"},
		AllowDowngrade: []string{"staged_writes"}, Budget: budget.Limits{Wall: 60 * time.Second}}
	if os.Geteuid() != 0 {
		spec.AllowDowngrade = append(spec.AllowDowngrade, "max_memory", "max_pids", "max_cpu")
	}
	p, err := policy.New(spec)
	if err != nil {
		t.Fatal(err)
	}
	s, err := sandbox.NewSession(context.Background(), sandbox.Config{Policy: p, Isolation: sandbox.IsolationLandlock})
	if err != nil {
		t.Fatalf("NewSession: %v", err)
	}
	defer s.Close()
	if err := s.Guard().Write(filepath.Join(tr.out, "in.txt"), []byte("from the API\n")); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Guard().Read(filepath.Join(tr.work, "data.csv")); err != nil || string(got) != "x,y\n1,2\n" {
		t.Fatalf("guard read of a read grant = %q, %v", got, err)
	}
	if _, err := s.Guard().Read(tr.secret); err == nil {
		t.Fatal("the guard read a file outside the grants")
	}
	pidFile := filepath.Join(tr.out, "bg.pid")
	rep := execIn(t, s, sandbox.ExecRequest{Args: []string{"sh", "-c", "read l < in.txt; echo \"$l\" > out.txt; python3 -c \"import time; time.sleep(1000)\" & echo $! > " + pidFile}})
	wantExit(t, rep, 0)
	if rep.Enforcement.Backend != sandbox.BackendLandlock {
		t.Fatalf("backend = %q", rep.Enforcement.Backend)
	}
	if got, err := s.Guard().Read(filepath.Join(tr.out, "out.txt")); err != nil || string(got) != "from the API\n" {
		t.Fatalf("out.txt through the guard = %q, %v", got, err)
	}
	b, _ := os.ReadFile(pidFile)
	bg, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || !processAlive(bg) {
		t.Fatalf("the background process %q is not running between execs", b)
	}
	rep = execIn(t, s, sandbox.ExecRequest{Args: []string{"python3", "-c", "import tempfile; print(tempfile.gettempdir())"}})
	if !strings.Contains(rep.Stdout, "airlock-scratch-") {
		t.Fatalf("tempdir in a session exec = %q", rep.Stdout)
	}
	s.Close()
	waitGone(t, bg, "the session's background process")
}

// TestUnsharedAttackToolAllowList: without namespaces only the command,
// allowed_tools and the loader execute: a tool that is on the host but not
// allowed, the loader pointed at a host binary, a copy in fs_write or the
// scratch folder, memfd_create plus execveat, and a shebang naming a tool
// that is not allowed all fail. (The loader can still map a copy the
// sandbox wrote, since Landlock restricts execve and not mmap: the
// report's weaker list says so.)
func TestUnsharedAttackToolAllowList(t *testing.T) {
	requireUnshared(t)
	tr := newUnsharedTree(t)
	rep := runL(t, policy.Spec{FSWrite: []string{tr.out}, AllowDowngrade: []string{"staged_writes"}}, sandbox.Config{}, "/usr/bin/python3", "-c", fmt.Sprintf(`
import ctypes, os, shutil, subprocess, sys, tempfile
out = %q
bad = []
def attempt(name, argv):
    try:
        r = subprocess.run(argv, capture_output=True, timeout=10)
        if r.returncode == 0:
            bad.append(name)
    except OSError:
        pass
attempt("ls", ["/usr/bin/ls", "/"])
attempt("sh", ["/bin/sh", "-c", "true"])
attempt("id", ["/usr/bin/id"])
for ld in ["/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1"]:
    attempt("ld.so ls", [ld, "/usr/bin/ls"])
    attempt("ld.so id", [ld, "/usr/bin/id"])
for d in [out, tempfile.gettempdir()]:
    try:
        shutil.copy("/usr/bin/python3", d + "/py"); os.chmod(d + "/py", 0o755)
        attempt("copy in " + d, [d + "/py", "-c", "pass"])
    except OSError:
        pass
    try:
        open(d + "/s.sh", "w").write("#!/bin/sh\necho pwned\n"); os.chmod(d + "/s.sh", 0o755)
        attempt("shebang in " + d, [d + "/s.sh"])
    except OSError:
        pass
libc = ctypes.CDLL(None, use_errno=True)
if libc.memfd_create(b"x", 0) >= 0:
    bad.append("memfd_create succeeded")
if libc.syscall(322, -1, b"", None, None, 0x1000) == 0:
    bad.append("execveat succeeded")
for src in ["/etc/shadow", %q]:
    dst = os.path.join(tempfile.gettempdir(), "link")
    try:
        os.link(src, dst)
        bad.append("hard link of " + src + ": " + repr(open(dst).read(10)))
    except OSError:
        pass
print(bad); sys.exit(1 if bad else 0)`, tr.out, tr.secret))
	wantExit(t, rep, 0)
}

// TestUnsharedSupervisorKilled: when airlock itself is SIGKILLed, with no
// pid namespace to end the sandbox, its init still kills the whole tree
// (its death signal is SIGTERM, which it answers by killing every
// descendant), a daemon included.
func TestUnsharedSupervisorKilled(t *testing.T) {
	requireUnshared(t)
	if os.Geteuid() != 0 {
		// The code path is the same for every uid; CI runs it as root.
		t.Skip("builds the airlock binary with the go tool, whose module and build caches CI's rootless subset does not have")
	}
	dir := openTempDir(t)
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "airlock")
	goBuild(t, "../cmd/airlock", bin)
	pidFile := filepath.Join(dir, "daemon.pid")
	if err := os.WriteFile(pidFile, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	giveToSandbox(t, pidFile)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := []string{"run", "--isolation", "landlock", "--fs-write", pidFile, "--max-wall", "50s"}
	if os.Geteuid() != 0 {
		args = append(args, "--allow-downgrade", "max_memory", "--allow-downgrade", "max_pids", "--allow-downgrade", "max_cpu")
	}
	cmd := exec.CommandContext(ctx, bin, append(args, "--", "/usr/bin/python3", "-c", fmt.Sprintf(`
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        open(%q, "w").write(str(os.getpid()))
        while True:
            time.sleep(1)
    os._exit(0)
time.sleep(100)`, pidFile))...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	daemon := 0
	for deadline := time.Now().Add(20 * time.Second); daemon == 0; {
		b, _ := os.ReadFile(pidFile)
		daemon, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatal("the daemon did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	waitGone(t, daemon, "a daemon of a SIGKILLed supervisor")
}

// TestUnsharedAttackBroadcastSignal: kill(-1, sig) from the sandbox, as
// its uid, reaches no process outside it. SIGURG is the probe: every
// process ignores it by default (Go's runtime uses it for preemption), and
// the host's victim records it.
func TestUnsharedAttackBroadcastSignal(t *testing.T) {
	requireUnshared(t)
	dir := t.TempDir()
	got := filepath.Join(dir, "victim-got-signal")
	ready := filepath.Join(dir, "victim-ready")
	victim := exec.Command("/usr/bin/python3", "-c", fmt.Sprintf(`
import signal, time
def hit(*_):
    open(%q, "w").write("hit")
signal.signal(signal.SIGURG, hit)
open(%q, "w").write("ready")
time.sleep(60)`, got, ready))
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = victim.Process.Kill(); _ = victim.Wait() })
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the victim did not start")
		}
	}
	rep := pyL(t, policy.Spec{}, `
import os, signal
try:
    os.kill(-1, signal.SIGURG)
    print("broadcast sent")
except OSError as e:
    print("broadcast refused", e.errno)`)
	wantExit(t, rep, 0)
	time.Sleep(200 * time.Millisecond) // a delivered signal runs the handler at once
	if _, err := os.Stat(got); err == nil {
		t.Fatalf("kill(-1) from the sandbox reached a host process (%s)", rep.Stdout)
	}
	// The positive control: the same broadcast from outside reaches it.
	if err := victim.Process.Signal(syscall.SIGURG); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(got); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the victim does not record SIGURG: the probe proves nothing")
		}
	}
}
