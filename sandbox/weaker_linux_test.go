package sandbox_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// Every line the report's enforcement.weaker can hold is read back against
// behaviour: a test runs the real backend where the line is printed,
// checks that the report prints it, and checks both what it says is
// weaker and the bound it says still holds. TestWeakerLinesAllReadBack
// enumerates the tables the lines come from (sandbox.WeakerTables), so a
// new line without a read-back fails.

// weakerGroup is one test that runs a real backend and reads back the
// lines starting with its prefixes.
type weakerGroup struct {
	test     string // the test function that runs it
	backend  string // enforcement.backend of its runs
	prefixes []string
}

var weakerGroups = []weakerGroup{
	{"TestUnsharedWeakerLinesHold", sandbox.BackendLandlock, []string{"files:", "processes:", "network:", "tools:", "/tmp:", "hostname and IPC:", "metadata:", "staged_writes:",
		"uid: no user namespace: the sandbox runs as"}},
	{"TestWeakerLandlockAsUser", sandbox.BackendLandlock, []string{"namespaces: user namespaces cannot be created here (ENOSPC", "uid: no user namespace: the sandbox runs as airlock's own uid",
		"max_memory:", "max_pids: no pids cgroup: RLIMIT_NPROC", "max_cpu:"}},
	{"TestWeakerNamespacesAsUser", "namespaces", []string{"max_memory:", "max_pids: no pids cgroup: RLIMIT_NPROC", "max_cpu:"}},
	{"TestWeakerNamespacesInContainer", "namespaces", []string{"proc:", "hostname:", "max_memory:", "max_pids: no pids cgroup, and", "max_cpu:"}},
	{"TestWeakerNoLandlockInContainer", "namespaces", []string{"landlock:"}},
	{"TestWeakerNoBrokersInContainer", sandbox.BackendLandlock, []string{"namespaces: user namespaces cannot be created here (EPERM", "network and metadata:"}},
	{"TestWeakerMicroVMWithoutCgroups", sandbox.BackendMicroVM, []string{"max_memory: no memory cgroup on the host", "max_pids: no pids cgroup on the host", "max_cpu: no cpu cgroup on the host"}},
	{"TestWeakerGVisor", "oci/runsc", []string{"gvisor: fs_write grants", "gvisor: max_pids and max_memory", "gvisor: a session exec's timeout", "gvisor: filesystem denials",
		"gvisor: /dev and /dev/shm", "gvisor: the workload's syscalls", "staged_writes:"}},
	{"TestWeakerMicroVM", sandbox.BackendMicroVM, []string{"microvm: the guest has no network device", "microvm: max_cpu counts", "microvm: filesystem denials", "microvm: software emulation",
		"staged_writes:"}},
}

// weakerPrintedBy names, for each table of sandbox.WeakerTables, the
// backends whose report can print its lines.
var weakerPrintedBy = map[string][]string{
	"hostname":                {"namespaces"},
	"landlock":                {sandbox.BackendLandlock},
	"gvisor":                  {"oci/runsc"},
	"microvm":                 {sandbox.BackendMicroVM},
	"downgrade/landlock":      {"namespaces"},                          // the namespace backend only: Landlock is the landlock backend
	"downgrade/proc":          {"namespaces"},                          // the mount namespace's /proc
	"downgrade/max_memory":    {"namespaces", sandbox.BackendLandlock}, // newLimits; OCI runtimes' cgroups are their own
	"downgrade/max_pids":      {"namespaces", sandbox.BackendLandlock},
	"downgrade/max_cpu":       {"namespaces", sandbox.BackendLandlock},
	"microvm-host/max_memory": {sandbox.BackendMicroVM},
	"microvm-host/max_pids":   {sandbox.BackendMicroVM},
	"microvm-host/max_cpu":    {sandbox.BackendMicroVM},
	"downgrade/staged_writes": {sandbox.BackendLandlock}, // the other backends that write in place print inplace's
	"inplace":                 {"oci/runsc", sandbox.BackendMicroVM},
	"pidsroot":                {"namespaces"}, // root in a container: the unprivileged path as the host's uid 0
	"namespaces/ENOSPC":       {sandbox.BackendLandlock},
	"namespaces/EPERM":        {sandbox.BackendLandlock},
	"namespaces/EINVAL":       {sandbox.BackendLandlock},
}

// weakerNotCaused are the (backend, line) pairs no test here can cause,
// each with the reason.
var weakerNotCaused = []struct{ backend, prefix, why string }{
	{sandbox.BackendLandlock, "namespaces: user namespaces cannot be created here (EINVAL", "needs a kernel built without CONFIG_USER_NS; every kernel this runs on has user namespaces, and the choice is made at build time"},
}

// TestWeakerLinesAllReadBack: every line of every table is read back by a
// group of its backend, or listed in weakerNotCaused with the reason.
func TestWeakerLinesAllReadBack(t *testing.T) {
	covered := func(backend, line string) bool {
		for _, g := range weakerGroups {
			if g.backend == backend && slices.ContainsFunc(g.prefixes, func(p string) bool { return lineHasPrefix(line, p) }) {
				return true
			}
		}
		return slices.ContainsFunc(weakerNotCaused, func(n struct{ backend, prefix, why string }) bool {
			return n.backend == backend && lineHasPrefix(line, n.prefix)
		})
	}
	var all []string
	for table, lines := range sandbox.WeakerTables {
		backends, ok := weakerPrintedBy[table]
		if !ok {
			t.Errorf("table %s: weakerPrintedBy does not say which backends print its lines %q", table, lines)
		}
		for _, line := range lines {
			all = append(all, line)
			for _, b := range backends {
				if !covered(b, line) {
					t.Errorf("backend %s can print %q, which no test reads back: add a check to the group that runs %s, or say in weakerNotCaused why it cannot be caused", b, line, b)
				}
			}
		}
	}
	for table := range weakerPrintedBy {
		if _, ok := sandbox.WeakerTables[table]; !ok {
			t.Errorf("weakerPrintedBy names table %s, which sandbox.WeakerTables does not have", table)
		}
	}
	for _, g := range weakerGroups {
		for _, p := range g.prefixes {
			if !slices.ContainsFunc(all, func(l string) bool { return lineHasPrefix(l, p) }) {
				t.Errorf("%s reads back %q, which no table holds", g.test, p)
			}
		}
	}
}

// lineHasPrefix reports whether line, or the constant text before the
// first verb of a line with a variable part, starts with prefix.
func lineHasPrefix(line, prefix string) bool {
	if i := strings.Index(line, "%"); i >= 0 && i < len(prefix) {
		return strings.HasPrefix(prefix, line[:i])
	}
	return strings.HasPrefix(line, prefix)
}

// readBack runs one subtest per prefix of the group named test: the
// report's weaker lines must hold a line with that prefix, and its check
// must pass. checks must read back exactly the group's prefixes.
func readBack(t *testing.T, test string, weaker []string, checks map[string]func(line string) error) {
	t.Helper()
	i := slices.IndexFunc(weakerGroups, func(g weakerGroup) bool { return g.test == test })
	if i < 0 {
		t.Fatalf("%s is not in weakerGroups", test)
	}
	g := weakerGroups[i]
	keys := make([]string, 0, len(checks))
	for k := range checks {
		keys = append(keys, k)
	}
	if want := slices.Sorted(slices.Values(g.prefixes)); !slices.Equal(slices.Sorted(slices.Values(keys)), want) {
		t.Fatalf("%s checks %q, weakerGroups lists %q: the two must agree", test, slices.Sorted(slices.Values(keys)), want)
	}
	for _, p := range g.prefixes {
		t.Run(strings.TrimSuffix(p, ":"), func(t *testing.T) {
			i := slices.IndexFunc(weaker, func(l string) bool { return strings.HasPrefix(l, p) })
			if i < 0 {
				t.Fatalf("the report prints no weaker line %q...: %q", p, weaker)
			}
			if err := checks[p](weaker[i]); err != nil {
				t.Fatalf("%q does not hold: %v", weaker[i], err)
			}
		})
	}
}

// probeFacts reads the first line of a probe's stdout, a JSON object.
func probeFacts(t *testing.T, rep *sandbox.Report, v any) {
	t.Helper()
	line, _, _ := strings.Cut(rep.Stdout, "\n")
	if err := json.Unmarshal([]byte(line), v); err != nil {
		t.Fatalf("probe output: %v\nerror: %s\nstdout: %.2000s\nstderr: %.2000s", err, rep.Error, rep.Stdout, rep.Stderr)
	}
}

// probeLib is what every probe script starts with: err(f) runs f and
// returns "ok" or the errno's name.
const probeLib = `
import ctypes, errno, json, os, socket, sys, time
libc = ctypes.CDLL(None, use_errno=True)
def err(f):
    try:
        f()
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
def write(path, n, mode="wb"):
    with open(path, mode) as f:
        f.write(b"x" * n)
def wait_for(path):
    for _ in range(1200):
        if os.path.exists(path):
            return
        time.sleep(0.05)
    sys.exit("the test never wrote " + path)
`

// inPlaceProbe writes into an fs_write folder W holding a git repository:
// 2 MiB (past a max_write of 1 MiB), a new protected path, and the
// existing protected paths.
const inPlaceProbe = `
f["Big"] = err(lambda: write(W + "/big", 2 << 20))
f["NewRC"] = err(lambda: write(W + "/.bashrc", 10))
f["GitConfig"] = err(lambda: write(W + "/.git/config", 10, "ab"))
f["Hook"] = err(lambda: write(W + "/.git/hooks/pre-commit", 10))
`

// inPlaceFacts is what inPlaceProbe saw.
type inPlaceFacts struct{ Big, NewRC, GitConfig, Hook string }

// checkInPlace checks the staged_writes line of a backend that writes in
// place against what inPlaceProbe did in the fs_write folder w: max_write
// is not enforced, a new protected path is created on the host, and the
// existing protected paths are read-only or writable as the line says.
func checkInPlace(f inPlaceFacts, rep *sandbox.Report, w, line string) error {
	big, _ := os.Stat(filepath.Join(w, "big"))
	rc, _ := os.ReadFile(filepath.Join(w, ".bashrc"))
	conf, _ := os.ReadFile(filepath.Join(w, ".git/config"))
	_, hookErr := os.Lstat(filepath.Join(w, ".git/hooks/pre-commit"))
	if f.Big != "ok" || big == nil || big.Size() != 2<<20 || (rep.HaltedBy != nil && *rep.HaltedBy == string(budget.MaxWrite)) {
		return fmt.Errorf("max_write is enforced: writing 2 MiB past max_write 1 MiB: %s, on the host %v, halted by %s", f.Big, big, haltedBy(rep))
	}
	if f.NewRC != "ok" || len(rc) != 10 {
		return fmt.Errorf("a new protected path (.bashrc) was not created on the host: %s, %q", f.NewRC, rc)
	}
	writable := f.GitConfig == "ok" && f.Hook == "ok" && len(conf) > 30 && hookErr == nil
	readonly := f.GitConfig != "ok" && f.Hook != "ok" && string(conf) == "[core]\n\tbare = false\n" && hookErr != nil
	switch {
	case strings.Contains(line, "existing protected paths stay read-only") || strings.Contains(line, "existing ones are read-only"):
		if !readonly {
			return fmt.Errorf("the line says existing protected paths stay read-only: .git/config %s (%q), .git/hooks/pre-commit %s (on the host: %v)", f.GitConfig, conf, f.Hook, hookErr == nil)
		}
	case strings.Contains(line, "are writable"):
		if !writable {
			return fmt.Errorf("the line says the protected paths are writable: .git/config %s (%q), .git/hooks/pre-commit %s (on the host: %v)", f.GitConfig, conf, f.Hook, hookErr == nil)
		}
	default:
		return fmt.Errorf("the line does not say whether existing protected paths are writable (they are read-only: %v, writable: %v)", readonly, writable)
	}
	return nil
}

// weakerTree is a tree for a backend that writes in place: an fs_read
// folder, an fs_write folder holding a git repository, and a secret
// outside both, reachable by the runtimes' unprivileged helpers.
func weakerTree(t *testing.T) tree {
	t.Helper()
	tr := newTree(t)
	gitRepo(t, tr.out)
	for _, d := range []string{filepath.Dir(tr.root), tr.root} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{tr.out, filepath.Join(tr.out, ".git"), filepath.Join(tr.out, ".git/hooks")} {
		if err := os.Chmod(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(tr.out, ".git/config"), 0o666); err != nil {
		t.Fatal(err)
	}
	return tr
}

// waitFile waits until path exists or done is closed.
func waitFile(path string, done <-chan struct{}) bool {
	for {
		if _, err := os.Stat(path); err == nil {
			return true
		}
		select {
		case <-done:
			return false
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// cgroupLimits returns the v1 pids.max and memory.limit_in_bytes of the
// cgroups of the processes below the test, other than the test's own.
func cgroupLimits() (pids, memory map[string]bool) {
	own, _ := os.ReadFile("/proc/self/cgroup")
	pids, memory = map[string]bool{}, map[string]bool{}
	for _, pid := range descendants(os.Getpid()) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		if err != nil || string(b) == string(own) {
			continue
		}
		sc := bufio.NewScanner(strings.NewReader(string(b)))
		for sc.Scan() {
			f := strings.SplitN(sc.Text(), ":", 3)
			if len(f) != 3 {
				continue
			}
			switch f[1] {
			case "pids":
				v, _ := os.ReadFile(filepath.Join("/sys/fs/cgroup/pids", f[2], "pids.max"))
				pids[strings.TrimSpace(string(v))] = true
			case "memory":
				v, _ := os.ReadFile(filepath.Join("/sys/fs/cgroup/memory", f[2], "memory.limit_in_bytes"))
				memory[strings.TrimSpace(string(v))] = true
			case "":
				for _, file := range []string{"pids.max", "memory.max"} {
					if v, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/unified", f[2], file)); err == nil {
						if file == "pids.max" {
							pids[strings.TrimSpace(string(v))] = true
						} else {
							memory[strings.TrimSpace(string(v))] = true
						}
					}
				}
			}
		}
	}
	return pids, memory
}

const gvisorProbe = probeLib + `
W, SECRET = sys.argv[1], sys.argv[2]
f = {}
` + inPlaceProbe + `
f["Secret"] = err(lambda: open(SECRET).read())
f["Shm"] = err(lambda: write("/dev/shm/scratch", 8 << 20))
f["DevFile"] = err(lambda: write("/dev/airlock-probe", 1))
f["Memfd"] = err(lambda: os.close(os.memfd_create("probe")))
pid = os.fork()
if pid == 0:
    os._exit(0 if libc.ptrace(0, 0, None, None) == 0 else ctypes.get_errno())
f["Ptrace"] = errno.errorcode.get(os.waitpid(pid, 0)[1] >> 8, "ok")
f["Release"] = os.uname().release
print(json.dumps(f), flush=True)
os.unlink("/dev/shm/scratch")
open(W + "/ready", "w").close()
wait_for(W + "/go")
total, chunk = 0, b"m" * (16 << 20)
try:
    with open("/dev/shm/fill", "wb") as b:
        while total < (400 << 20):
            b.write(chunk)
            b.flush()
            total += len(chunk)
            print("shm", total, flush=True)
except OSError as e:
    print("shm-error", errno.errorcode.get(e.errno, e.errno), flush=True)
`

// TestWeakerGVisor reads back every line of a gVisor run, in one run and
// one session.
func TestWeakerGVisor(t *testing.T) {
	requireGVisor(t)
	tr := weakerTree(t)
	const pidsMax, memMax, scratchMax = 48, 64 << 20, 1 << 20
	spec := policy.Spec{FSRead: []string{tr.work}, FSWrite: []string{tr.out}, AllowDowngrade: []string{"staged_writes"},
		Budget: budget.Limits{Write: 1 << 20, Scratch: scratchMax, Memory: memMax, Pids: pidsMax, Wall: 60 * time.Second}}
	done := make(chan struct{})
	var rep *sandbox.Report
	go func() {
		defer close(done)
		rep = runG(t, spec, "/usr/bin/python3", "-c", gvisorProbe, tr.out, tr.secret)
	}()
	var pids, mem map[string]bool
	var sentrySeccomp []string
	sentryFiltered := false
	if waitFile(filepath.Join(tr.out, "ready"), done) {
		pids, mem = cgroupLimits()
		for _, pid := range descendants(os.Getpid()) {
			cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
			if args := strings.Split(string(cmd), "\x00"); slices.Contains(args, "boot") {
				_, mode, _ := strings.Cut(string(status), "\nSeccomp:\t")
				mode, _, _ = strings.Cut(mode, "\n")
				sentrySeccomp = append(sentrySeccomp, mode)
				sentryFiltered = sentryFiltered || mode == "2"
			}
		}
		if err := os.WriteFile(filepath.Join(tr.out, "go"), nil, 0o644); err != nil {
			t.Error(err)
		}
	}
	<-done
	var f struct {
		inPlaceFacts
		Secret, Shm, DevFile, Memfd, Ptrace, Release string
	}
	probeFacts(t, rep, &f)
	shmTotal, shmErr := 0, ""
	for _, l := range strings.Split(rep.Stdout, "\n") {
		if n, ok := strings.CutPrefix(l, "shm "); ok {
			shmTotal, _ = strconv.Atoi(n)
		}
		if e, ok := strings.CutPrefix(l, "shm-error "); ok {
			shmErr = e
		}
	}
	hostRelease, _ := os.ReadFile("/proc/sys/kernel/osrelease")

	// A session: an exec's timeout, and the session's end.
	var timedOut, afterTimeout *sandbox.Report
	var leftAfterClose []int
	func() {
		p, err := policy.New(policy.Spec{AllowedTools: []string{"sh", "sleep", "cat"}, Budget: budget.Limits{Wall: 60 * time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		s, err := sandbox.NewSession(ctx, sandbox.Config{Policy: p, Isolation: sandbox.IsolationGVisor})
		if err != nil {
			t.Fatalf("NewSession under gVisor: %v", err)
		}
		if timedOut, err = s.Exec(ctx, sandbox.ExecRequest{Args: []string{"sh", "-c", "sleep 1111 & exec sleep 2222"}, Timeout: time.Second}); err != nil {
			t.Fatal(err)
		}
		if afterTimeout, err = s.Exec(ctx, sandbox.ExecRequest{Args: []string{"sh", "-c", "for f in /proc/[0-9]*/cmdline; do cat $f; echo; done"}}); err != nil {
			t.Fatal(err)
		}
		s.Close()
		for _, pid := range descendants(os.Getpid()) {
			if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); strings.Contains(string(b), "runsc") {
				leftAfterClose = append(leftAfterClose, pid)
			}
		}
	}()

	readBack(t, "TestWeakerGVisor", rep.Enforcement.Weaker, map[string]func(string) error{
		"staged_writes:": func(line string) error { return checkInPlace(f.inPlaceFacts, rep, tr.out, line) },
		"gvisor: fs_write grants": func(line string) error {
			if rep.Writes != nil {
				return fmt.Errorf("the grants were staged and written back: %+v", rep.Writes)
			}
			return checkInPlace(f.inPlaceFacts, rep, tr.out, line)
		},
		"gvisor: max_pids and max_memory": func(string) error {
			return expect(pids[strconv.Itoa(pidsMax+192)] && mem[strconv.Itoa(memMax+128<<20)],
				"the runtime's cgroups below the test hold pids.max %v and memory limits %v; want %d and %d (max_pids + 192, max_memory + 128 MiB)",
				pids, mem, pidsMax+192, memMax+128<<20)
		},
		"gvisor: a session exec's timeout": func(string) error {
			return expect(timedOut.HaltedBy != nil && afterTimeout.ExitCode == 0 && strings.Contains(afterTimeout.Stdout, "sleep\x001111") &&
				!strings.Contains(afterTimeout.Stdout, "sleep\x002222") && len(leftAfterClose) == 0,
				"exec past its timeout halted by %s; the next exec lists %q (want the background sleep 1111 alive and the main sleep 2222 gone); runsc processes left after the session closed: %v",
				haltedBy(timedOut), afterTimeout.Stdout, leftAfterClose)
		},
		"gvisor: filesystem denials": func(string) error {
			return expect(f.Secret != "ok" && rep.DenialCounts.ByLayer["fs"] == 0,
				"reading a file outside the grants: %s; denials %+v", f.Secret, rep.Denials)
		},
		"gvisor: /dev and /dev/shm": func(string) error {
			// The runtime's cgroup kills the sandbox (the OCI backends do not
			// tell that kill from another: halted_by stays null).
			return expect(f.Shm == "ok" && f.DevFile == "ok" && shmTotal >= 32<<20 && shmTotal < memMax+128<<20 && rep.ExitCode != 0 && (rep.HaltedBy == nil || *rep.HaltedBy != string(budget.MaxScratch)),
				"8 MiB in /dev/shm past max_scratch 1 MiB: %s, a new file in /dev: %s; filling /dev/shm stopped at %d MiB (want past max_scratch, below max_memory + 128 MiB = %d MiB) by %q, halted by %s, exit %d signal %v, error %q, stderr %.300q",
				f.Shm, f.DevFile, shmTotal>>20, (memMax+128<<20)>>20, shmErr, haltedBy(rep), rep.ExitCode, rep.Signal, rep.Error, rep.Stderr)
		},
		"gvisor: the workload's syscalls": func(string) error {
			return expect(f.Release != strings.TrimSpace(string(hostRelease)) && f.Memfd == "ok" && f.Ptrace == "ok" && !rep.Enforcement.Seccomp && sentryFiltered,
				"the kernel release inside %q (the host's %q); memfd_create %s and ptrace(PTRACE_TRACEME) %s, which airlock's seccomp profile refuses; enforcement.seccomp %v; the sentry's seccomp mode on the host: %q",
				f.Release, hostRelease, f.Memfd, f.Ptrace, rep.Enforcement.Seccomp, sentrySeccomp)
		},
	})
}

const microvmProbe = probeLib + `
W, SECRET, HOSTIP, PORT, URL = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
f = {}
` + inPlaceProbe + `
f["Secret"] = err(lambda: open(SECRET).read())
f["Net"] = sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").readlines()[2:])
def connect(host):
    socket.create_connection((host, PORT), timeout=3).close()
f["DirectLoopback"] = err(lambda: connect("127.0.0.1"))
f["DirectHost"] = err(lambda: connect(HOSTIP))
f["Proxy"] = os.environ.get("HTTP_PROXY", "") + " " + os.environ.get("ALL_PROXY", "")
import urllib.request
try:
    f["Fetched"] = urllib.request.urlopen(URL, timeout=30).read().decode()
except Exception as e:
    f["Fetched"] = "failed: %s" % e
f["MemTotalKiB"] = int([l.split()[1] for l in open("/proc/meminfo") if l.startswith("MemTotal:")][0])
f["CPUModel"] = [l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")][0]
print(json.dumps(f), flush=True)
open(W + "/ready", "w").close()
wait_for(W + "/go")
x = b"m" * (160 << 20)
print("allocated", flush=True)
`

// TestWeakerMicroVM reads back every line of a microVM run, in one boot.
func TestWeakerMicroVM(t *testing.T) {
	init := requireMicroVM(t)
	tr := weakerTree(t)
	var directHits, hits atomic.Int32
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go acceptCount(ln, &directHits)
	hostIP := hostAddress(t)
	allowed := serve(t, &hits, "through the proxy")
	const memMax = 96 << 20
	spec := policy.Spec{FSRead: []string{tr.work}, FSWrite: []string{tr.out}, NetHosts: []string{allowed}, AllowDowngrade: []string{"staged_writes"},
		Budget: budget.Limits{Write: 1 << 20, Memory: memMax, Wall: 90 * time.Second}}
	done := make(chan struct{})
	var rep *sandbox.Report
	go func() {
		defer close(done)
		rep = runVM(t, init, spec, "/usr/bin/python3", "-c", microvmProbe, tr.out, tr.secret, hostIP, portOf(ln.Addr().String()), "http://"+allowed+"/")
	}()
	var mem map[string]bool
	var qemuArgs string
	var qemuCPUMS int64 // QEMU's CPU time when the command was running, by the host's clock
	if waitFile(filepath.Join(tr.out, "ready"), done) {
		_, mem = cgroupLimits()
		for _, pid := range qemuPids() {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			qemuArgs += strings.ReplaceAll(string(b), "\x00", " ")
			qemuCPUMS += procCPUMS(pid)
		}
		if err := os.WriteFile(filepath.Join(tr.out, "go"), nil, 0o644); err != nil {
			t.Error(err)
		}
	}
	<-done
	var f struct {
		inPlaceFacts
		Secret, DirectLoopback, DirectHost, Proxy, Fetched, CPUModel string
		Net                                                          []string
		MemTotalKiB                                                  int64
	}
	probeFacts(t, rep, &f)
	const guestRAM = memMax + 128<<20
	readBack(t, "TestWeakerMicroVM", rep.Enforcement.Weaker, map[string]func(string) error{
		"staged_writes:": func(line string) error { return checkInPlace(f.inPlaceFacts, rep, tr.out, line) },
		"microvm: the guest has no network device": func(string) error {
			return expect(slices.Equal(f.Net, []string{"lo"}) && strings.Contains(qemuArgs, " -nic none ") && !strings.Contains(qemuArgs, "netdev") && !strings.Contains(qemuArgs, "-net ") && f.DirectLoopback != "ok" && f.DirectHost != "ok" && directHits.Load() == 0 &&
				strings.Contains(f.Proxy, "127.0.0.1") && f.Fetched == "through the proxy" && hits.Load() > 0 && rep.Enforcement.Egress == sandbox.EgressProxy,
				"QEMU ran %q; network devices in the sandbox %q; a direct connect to the guest's loopback %s and to the host's %s:%d %s (the listener got %d); HTTP_PROXY and ALL_PROXY %q; the granted host through them: %q; egress %q",
				qemuArgs, f.Net, f.DirectLoopback, hostIP, ln.Addr().(*net.TCPAddr).Port, f.DirectHost, directHits.Load(), f.Proxy, f.Fetched, rep.Enforcement.Egress)
		},
		"microvm: max_cpu counts": func(string) error {
			halted := rep.HaltedBy != nil && *rep.HaltedBy == string(budget.MaxMemory) && !strings.Contains(rep.Stdout, "allocated")
			return expect(qemuCPUMS > 0 && rep.Usage.CPUMS >= qemuCPUMS && mem[strconv.Itoa(guestRAM+256<<20)] && f.MemTotalKiB<<10 <= guestRAM && f.MemTotalKiB<<10 > memMax && halted,
				"the report's cpu %d ms, QEMU's own by the host's clock while the command ran %d ms (want the report to count all of it); the host cgroups' memory limits %v (want the guest's RAM %d MiB + 256 MiB); the guest's MemTotal %d MiB (want at most max_memory + 128 MiB = %d MiB); 160 MiB in the guest under max_memory %d MiB: halted by %s, stdout %q",
				rep.Usage.CPUMS, qemuCPUMS, mem, guestRAM>>20, f.MemTotalKiB>>10, guestRAM>>20, memMax>>20, haltedBy(rep), rep.Stdout)
		},
		"microvm: filesystem denials": func(string) error {
			return expect(f.Secret != "ok" && rep.DenialCounts.ByLayer["fs"] == 0,
				"reading a file outside the grants: %s; denials %+v", f.Secret, rep.Denials)
		},
		"microvm: software emulation": func(string) error {
			return expect(strings.Contains(qemuArgs, "-accel tcg") && !strings.Contains(qemuArgs, "kvm") && strings.Contains(f.CPUModel, "TCG") && rep.Enforcement.Platform == "qemu-microvm/tcg",
				"QEMU ran %q; the guest's CPU is %q; platform %q", qemuArgs, f.CPUModel, rep.Enforcement.Platform)
		},
	})
}

// hostAddress returns an address of this host other than loopback.
func hostAddress(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			return n.IP.String()
		}
	}
	t.Skip("this host has no address but loopback")
	return ""
}

// limitsProbe checks the rlimits that stand in for cgroups: two children
// hold 0.6 max_memory each at once and one asks for 2 max_memory; children
// are forked until a fork fails (at most 4 max_pids); two children burn 0.7
// max_cpu each and one 3 max_cpu. Its arguments are max_memory in bytes,
// max_pids and max_cpu in seconds, after the probe's own.
const limitsProbe = limitsHead + limitsMem + limitsCPU + limitsPids

// limitsHead reads the arguments and the rlimits, and defines children.
const limitsHead = `
import resource, signal
MEM, PIDS, CPU = int(sys.argv[-3]), int(sys.argv[-2]), float(sys.argv[-1])
f["AS"] = resource.getrlimit(resource.RLIMIT_AS)[0]
f["NPROC"] = resource.getrlimit(resource.RLIMIT_NPROC)[0]
f["CPU"] = resource.getrlimit(resource.RLIMIT_CPU)[0]
def children(n, fn):
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    pids = []
    for _ in range(n):
        pid = os.fork()
        if pid == 0:
            os.close(ready_r); os.close(go_w)
            try:
                fn()
                os.write(ready_w, b"x")
                os.close(ready_w)
                os.read(go_r, 1)
                os._exit(0)
            except MemoryError:
                os._exit(3)
            except BaseException:
                os._exit(4)
        pids.append(pid)
    os.close(ready_w); os.close(go_r)
    ready = 0
    while os.read(ready_r, 1):
        ready += 1
    os.close(go_w); os.close(ready_r)
    return ready, [os.waitpid(p, 0)[1] for p in pids]
def hold(n):
    def fn():
        b = bytearray(n)
        for i in range(0, n, 4096):
            b[i] = 1
    return fn
`

// The parts of limitsProbe: the memory, the CPU and the fork checks.
const (
	limitsMem = `
f["MemBoth"], _ = children(2, hold(int(MEM * 0.6)))
f["MemBig"] = children(1, hold(2 * MEM))[1][0] >> 8
`
	limitsCPU = `
def burn(s):
    def fn():
        while True:
            t = os.times()
            if t.user + t.system >= s:
                return
            for _ in range(100000):
                pass
    return fn
f["CPUBoth"], st = children(2, burn(0.7 * CPU))
f["CPUBig"] = children(1, burn(3 * CPU))[1][0] & 0x7f
`
	limitsPids = `
go_r, go_w = os.pipe()
forked, f["ForkErr"] = 0, "none"
kids = []
try:
    while forked < 4 * PIDS:
        pid = os.fork()
        if pid == 0:
            os.close(go_w)
            os.read(go_r, 1)
            os._exit(0)
        kids.append(pid)
        forked += 1
except OSError as e:
    f["ForkErr"] = errno.errorcode.get(e.errno, str(e.errno))
os.close(go_w)
for p in kids:
    os.waitpid(p, 0)
f["Forked"] = forked
`
)

// limitsFacts is what limitsProbe saw.
type limitsFacts struct {
	AS, NPROC, CPU  int64
	MemBoth, MemBig int
	CPUBoth, CPUBig int
	Forked          int
	ForkErr         string
}

// limitsChecks reads back the budget's downgrade lines from limitsProbe's
// facts, for a run with these limits.
// hostRoot says the sandbox runs as the host's uid 0, whose max_pids
// line differs.
func limitsChecks(f *limitsFacts, rep *sandbox.Report, mem int64, pids int, cpu time.Duration, hostRoot bool) map[string]func(string) error {
	notHalted := func(l budget.Limit) bool { return rep.HaltedBy == nil || *rep.HaltedBy != string(l) }
	checks := map[string]func(string) error{
		"max_memory:": func(string) error {
			return expect(f.AS == -1 && f.MemBoth == 2 && f.MemBig == 0 && notHalted(budget.MaxMemory),
				"RLIMIT_AS %d (want none); two processes holding 0.6 max_memory (%d) each at once: %d did (want 2); one taking 2 max_memory: exit %d (want 0: nothing bounds it); halted by %s",
				f.AS, mem, f.MemBoth, f.MemBig, haltedBy(rep))
		},
		"max_pids: no pids cgroup, and": func(string) error {
			return expect(f.NPROC == int64(pids) && f.ForkErr == "none" && f.Forked == 4*pids && notHalted(budget.MaxPids),
				"RLIMIT_NPROC %d (max_pids %d); forks: %d, the first refused with %s (want 4 max_pids, none refused); halted by %s", f.NPROC, pids, f.Forked, f.ForkErr, haltedBy(rep))
		},
		"max_pids: no pids cgroup: RLIMIT_NPROC": func(string) error {
			return expect(f.NPROC >= int64(pids) && f.ForkErr == "EAGAIN" && int64(f.Forked) < f.NPROC && f.Forked < 4*pids,
				"RLIMIT_NPROC %d (max_pids %d); forks until the first refusal: %d, refused with %s (want EAGAIN before RLIMIT_NPROC)", f.NPROC, pids, f.Forked, f.ForkErr)
		},
		"max_cpu:": func(string) error {
			return expect(f.CPU == int64(cpu/time.Second) && f.CPUBoth == 2 && (f.CPUBig == 24 || f.CPUBig == 9) && notHalted(budget.MaxCPU),
				"RLIMIT_CPU %d s (max_cpu %s); two processes burning 0.7 max_cpu each: %d finished (want 2: the tree used more than max_cpu); one burning 3 max_cpu: signal %d (want SIGXCPU or SIGKILL); halted by %s",
				f.CPU, cpu, f.CPUBoth, f.CPUBig, haltedBy(rep))
		},
	}
	if hostRoot {
		delete(checks, "max_pids: no pids cgroup: RLIMIT_NPROC")
	} else {
		delete(checks, "max_pids: no pids cgroup, and")
	}
	return checks
}

// airlockBinaries builds airlock and airlock-init into a folder every uid
// can read.
func airlockBinaries(t *testing.T) string {
	t.Helper()
	dir := openTempDir(t)
	goBuild(t, "../cmd/airlock", filepath.Join(dir, "airlock"))
	goBuild(t, "../cmd/airlock-init", filepath.Join(dir, "airlock-init"))
	return dir
}

// shQuote quotes s for sh; the token @HELPER@ becomes the helper's pid.
func shQuote(s string) string {
	if s == "@HELPER@" {
		return `"$HELPER"`
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// parseRunReport reads the report airlock run --json printed.
func parseRunReport(t *testing.T, out []byte, stderr string) *sandbox.Report {
	t.Helper()
	var rep sandbox.Report
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("airlock run --json: %v\nstdout: %.3000s\nstderr: %.3000s", err, out, stderr)
	}
	return &rep
}

// The landlock backend as a user, where no user namespace can be made
// (ENOSPC): the uid line of a user, and the budget's lines without cgroups.
const userProbe = probeLib + `
OWNED = sys.argv[1]
f = {}
f["UID"] = os.getuid()
f["ReadOwned"] = err(lambda: open(OWNED).read())
f["WriteOwned"] = err(lambda: open(OWNED, "a").write("x"))
f["ChmodOwned"] = err(lambda: os.chmod(OWNED, 0o666))
f["XattrOwned"] = err(lambda: os.setxattr(OWNED, "user.evil", b"1"))
` + limitsProbe + `
print(json.dumps(f), flush=True)
`

// TestWeakerLandlockAsUser runs airlock as uid 1000 in a user namespace
// whose max_user_namespaces is 0 (the kernel refuses a new one with
// ENOSPC, as with user.max_user_namespaces=0 on the host, without changing
// the host for the tests beside it), so the landlock backend runs as a
// user without cgroups.
func TestWeakerLandlockAsUser(t *testing.T) {
	airtest.RequireRoot(t)
	requireUnshared(t)
	airtest.RequireBinary(t, "/usr/bin/setpriv")
	airtest.RequireBinary(t, "/usr/bin/unshare")
	const user = 1000
	bin := airlockBinaries(t)
	dir := openTempDir(t)
	owned := filepath.Join(dir, "owned")
	if err := os.WriteFile(owned, []byte("the user's own secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(owned, user, user); err != nil {
		t.Fatal(err)
	}
	const mem, pids, cpu = 256 << 20, 24, 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	unshareOut, unshareErr := inNoUserNS(ctx, "setpriv", "--reuid=1000", "--regid=1000", "--clear-groups", "--", "unshare", "--user", "true").CombinedOutput()
	cmd := inNoUserNS(ctx, "setpriv", "--reuid=1000", "--regid=1000", "--clear-groups", "--", filepath.Join(bin, "airlock"), "run", "--json",
		"--allow-downgrade", "namespaces", "--allow-downgrade", "max_memory", "--allow-downgrade", "max_pids", "--allow-downgrade", "max_cpu",
		"--max-memory", strconv.Itoa(mem>>20)+"MiB", "--max-pids", strconv.Itoa(pids), "--max-cpu", cpu.String(), "--max-wall", "60s",
		"--", "/usr/bin/python3", "-c", userProbe, owned, strconv.Itoa(mem), strconv.Itoa(pids), "2")
	cmd.Dir = "/"
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, _ := cmd.Output() // the exit status is the command's
	rep := parseRunReport(t, out, stderr.String())
	var f struct {
		limitsFacts
		UID                                           int
		ReadOwned, WriteOwned, ChmodOwned, XattrOwned string
	}
	probeFacts(t, rep, &f)
	t.Logf("the probe saw %s", rep.Stdout)
	after, _ := os.Stat(owned)
	body, _ := os.ReadFile(owned)
	checks := limitsChecks(&f.limitsFacts, rep, mem, pids, cpu, false)
	checks["namespaces: user namespaces cannot be created here (ENOSPC"] = func(string) error {
		return expect(unshareErr != nil && strings.Contains(string(unshareOut), "No space left") && rep.Enforcement.Backend == sandbox.BackendLandlock && slices.Contains(rep.Enforcement.Downgrades, "namespaces"),
			"unshare --user as uid 1000 there: %v %s; backend %q, downgrades %q", unshareErr, unshareOut, rep.Enforcement.Backend, rep.Enforcement.Downgrades)
	}
	checks["uid: no user namespace: the sandbox runs as airlock's own uid"] = func(line string) error {
		return expect(f.UID == user && strings.Contains(line, "uid 1000,") && f.ReadOwned == "EACCES" && f.WriteOwned == "EACCES" && f.ChmodOwned != "ok" && f.XattrOwned != "ok" &&
			after.Mode().Perm() == 0o600 && string(body) == "the user's own secret\n",
			"the sandbox runs as %d; on a file of uid %d outside the grants: read %s, write %s, chmod %s, setxattr %s; afterwards mode %v, contents %q",
			f.UID, user, f.ReadOwned, f.WriteOwned, f.ChmodOwned, f.XattrOwned, after.Mode(), body)
	}
	readBack(t, "TestWeakerLandlockAsUser", rep.Enforcement.Weaker, checks)
}

// inNoUserNS runs argv in a new user namespace mapping uids and gids 0 to
// 65535 onto the host's, with max_user_namespaces set to 0 inside it.
func inNoUserNS(ctx context.Context, argv ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "/bin/sh", append([]string{"-c", "echo 0 > /proc/sys/user/max_user_namespaces && exec \"$@\"", "sh"}, argv...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:                 syscall.CLONE_NEWUSER,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 65536}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 65536}},
		GidMappingsEnableSetgroups: true,
	}
	return cmd
}

// haltedBy returns the report's halted_by, or "null".
func haltedBy(rep *sandbox.Report) string {
	if rep.HaltedBy == nil {
		return "null"
	}
	return *rep.HaltedBy
}

// Seccomp profiles for podman that take from airlock what a container's
// profile may: each allows everything else.
const (
	profileNoHostname = `{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [
  {"names": ["sethostname"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1}]}`
	profileNoLandlock = `{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [
  {"names": ["landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self"], "action": "SCMP_ACT_ERRNO", "errnoRet": 38}]}`
	// Docker's default without CAP_SYS_ADMIN and CAP_SYS_PTRACE: no user
	// namespaces (clone3's flags are out of a filter's reach: ENOSYS), no
	// pidfd_getfd.
	profileNoUserNSNoBrokers = `{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [
  {"names": ["unshare"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1},
  {"names": ["clone"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1,
   "args": [{"index": 0, "value": 268435456, "valueTwo": 268435456, "op": "SCMP_CMP_MASKED_EQ"}]},
  {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": 38},
  {"names": ["pidfd_getfd"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1}]}`
)

// weakerContainer runs airlock in rootful podman containers made from the
// host's /usr, with no cgroup of their own (--cgroups=disabled), a /proc
// with podman's masks, and a seccomp profile of the test's.
type weakerContainer struct {
	bin, root string
}

func newWeakerContainer(t *testing.T) *weakerContainer {
	t.Helper()
	airtest.RequireRoot(t) // podman with --rootfs runs rootful here
	airtest.RequireBinary(t, "/usr/bin/podman")
	airtest.RequireBinary(t, "/usr/bin/unshare")
	airtest.RequireBinary(t, "/usr/bin/python3")
	c := &weakerContainer{bin: airlockBinaries(t), root: openTempDir(t)}
	for _, d := range []string{"usr", "etc", "tmp", "proc", "sys", "dev", "root", "run", "var/tmp", "opt/airlock", "work/out"} {
		if err := os.MkdirAll(filepath.Join(c.root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range []string{"bin", "lib", "lib64", "sbin"} {
		if err := os.Symlink("usr/"+l, filepath.Join(c.root, l)); err != nil {
			t.Fatal(err)
		}
	}
	for name, text := range map[string]string{"etc/passwd": "root:x:0:0:root:/root:/bin/sh\n", "etc/group": "root:x:0:\n", "secret.txt": "the container's secret\n"} {
		if err := os.WriteFile(filepath.Join(c.root, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"tmp", "var/tmp", "work/out"} {
		if err := os.Chmod(filepath.Join(c.root, d), 0o1777); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// containerHelpers is what the container runs before airlock: a process
// with a secret in its environment (its pid in $HELPER, above the pids the
// sandbox's own processes get), a server on the container's loopback, and
// the facts airlock's own namespaces are compared with, on stderr.
const containerHelpers = `
for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do /bin/true; done
AIRLOCK_WEAKER_SECRET=in-the-helpers-environment sleep 1000 &
HELPER=$!
python3 -m http.server --bind 127.0.0.1 18765 >/dev/null 2>&1 &
until python3 -c "import socket; socket.create_connection(('127.0.0.1', 18765), 1)" 2>/dev/null; do sleep 0.1; done
echo "uts=$(readlink /proc/self/ns/uts)" >&2
echo "unshare=$(unshare --user true 2>&1)" >&2
`

// run runs `airlock run --json FLAGS -- ARGV` in a new container under
// profile, and returns its report and what the container said on stderr
// (containerHelpers' facts, and helper=alive when the helper outlived the
// run). The token @HELPER@ in argv is the helper's pid.
func (c *weakerContainer) run(t *testing.T, profile string, podman, flags []string, argv ...string) (*sandbox.Report, string) {
	t.Helper()
	pf := filepath.Join(t.TempDir(), "seccomp.json")
	if err := os.WriteFile(pf, []byte(profile), 0o644); err != nil {
		t.Fatal(err)
	}
	script := containerHelpers + "/opt/airlock/airlock run --json"
	for _, a := range append(append(flags, "--"), argv...) {
		script += " " + shQuote(a)
	}
	script += "\nkill -0 $HELPER && echo helper=alive >&2\n"
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "unshare", "-m", "--propagation", "private", "sh", "-c",
		`umount /sys/fs/cgroup/unified 2>/dev/null; exec podman "$@"`, "sh", // crun refuses this host's hybrid layout with it
		"run", "--rm", "--cgroups=disabled", "--network=none", "--hostname", "weaker-container",
		"--ulimit", "nofile=20000:20000", "--ulimit", "nproc=20000:20000", "--security-opt", "seccomp="+pf,
		"-v", "/usr:/usr:ro", "-v", c.bin+":/opt/airlock:ro")
	cmd.Args = append(append(cmd.Args, podman...), "--rootfs", c.root, "/bin/sh", "-c", script)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, _ := cmd.Output() // the exit status is the command's
	return parseRunReport(t, out, stderr.String()), stderr.String()
}

// containerFact returns the value of name=... on the container's stderr.
func containerFact(stderr, name string) string {
	for _, l := range strings.Split(stderr, "\n") {
		if v, ok := strings.CutPrefix(l, name+"="); ok {
			return v
		}
	}
	return ""
}

// nsProbe looks, from a sandbox of the namespace backend in a container,
// at the container's helper process, its own names and what Landlock
// would refuse. Its first argument is the helper's pid.
const nsProbe = probeLib + `
import signal
HELPER = int(sys.argv[1])
f = {}
f["Hostname"] = socket.gethostname()
f["UTS"] = os.readlink("/proc/self/ns/uts")
f["ProcRO"] = bool(os.statvfs("/proc").f_flag & os.ST_RDONLY)
f["Self"], f["Pid"] = os.readlink("/proc/self"), os.getpid()
f["SelfComm"] = open("/proc/self/comm").read().strip()
try:
    f["PidComm"] = open("/proc/%d/comm" % os.getpid()).read().strip()
except OSError as e:
    f["PidComm"] = errno.errorcode.get(e.errno, str(e.errno))
f["Listed"] = str(HELPER) in os.listdir("/proc")
try:
    f["Cmdline"] = open("/proc/%d/cmdline" % HELPER, "rb").read().decode(errors="replace").replace("\0", " ")
except OSError as e:
    f["Cmdline"] = errno.errorcode.get(e.errno, str(e.errno))
f["Fds"] = err(lambda: os.listdir("/proc/%d/fd" % HELPER))
f["Environ"] = err(lambda: open("/proc/%d/environ" % HELPER, "rb").read())
f["Mem"] = err(lambda: open("/proc/%d/mem" % HELPER, "rb").read(1))
f["FdLink"] = err(lambda: os.readlink("/proc/%d/fd/1" % HELPER))
def ptrace():
    if libc.ptrace(16, HELPER, None, None) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
f["Ptrace"] = err(ptrace)
f["Kill"] = err(lambda: os.kill(HELPER, signal.SIGKILL))
f["KillInit"] = err(lambda: os.kill(1, 0))
f["DevCreate"] = err(lambda: open("/dev/airlock-probe", "w").close())
f["DevRO"] = bool(os.statvfs("/dev").f_flag & os.ST_RDONLY)
f["Secret"] = err(lambda: os.stat("/secret.txt"))
def exec_lib():
    import glob, subprocess
    subprocess.run(glob.glob("/usr/lib/*-linux-gnu/libc.so.6")[:1], capture_output=True, check=True)
f["ExecLib"] = err(exec_lib)
f["UsrNoexec"] = bool(os.statvfs("/usr/lib").f_flag & os.ST_NOEXEC)
def abstract():
    s = socket.socket(socket.AF_UNIX)
    s.connect("\0airlock-weaker")
f["Abstract"] = err(abstract)
`

// nsFacts is what nsProbe saw.
type nsFacts struct {
	Hostname, UTS, Self, SelfComm, PidComm, Cmdline string
	Fds, Environ, Mem, FdLink, Ptrace, Kill         string
	KillInit, DevCreate, Secret, Abstract, ExecLib  string
	ProcRO, Listed, DevRO, UsrNoexec                bool
	Pid                                             int
}

// TestWeakerNamespacesInContainer runs the namespace backend in a
// container whose /proc is masked (the proc downgrade), without cgroups
// (the budget's), whose seccomp profile refuses sethostname (the hostname
// line), and reads each line back.
func TestWeakerNamespacesInContainer(t *testing.T) {
	c := newWeakerContainer(t)
	const mem, pids, cpu = 256 << 20, 24, 2 * time.Second
	rep, stderr := c.run(t, profileNoHostname, nil, []string{"--allow-downgrade", "proc,max_memory,max_pids,max_cpu",
		"--max-memory", "256MiB", "--max-pids", strconv.Itoa(pids), "--max-cpu", cpu.String(), "--max-wall", "90s"},
		"/usr/bin/python3", "-c", nsProbe+limitsProbe+"\nprint(json.dumps(f), flush=True)\n", "@HELPER@", strconv.Itoa(mem), strconv.Itoa(pids), "2")
	var f struct {
		nsFacts
		limitsFacts
	}
	probeFacts(t, rep, &f)
	t.Logf("the probe saw %s; the container: %s", rep.Stdout, stderr)
	checks := limitsChecks(&f.limitsFacts, rep, mem, pids, cpu, true)
	checks["proc:"] = func(string) error {
		return expect(f.ProcRO && f.Self != strconv.Itoa(f.Pid) && f.SelfComm == "python3" && f.PidComm != "python3" && f.Listed && strings.Contains(f.Cmdline, "sleep 1000") &&
			f.Fds == "ok" && f.Environ != "ok" && f.Mem != "ok" && f.FdLink != "ok" && f.Ptrace != "ok" && f.Kill != "ok" && containerFact(stderr, "helper") == "alive",
			"/proc read-only %v; /proc/self -> %s, getpid() %d, /proc/self/comm %q, /proc/<getpid()>/comm %q; the container's helper listed %v, cmdline %q, fd numbers %s; "+
				"its environ %s, mem %s, fd/1 %s, ptrace %s, kill %s, alive after the run %q",
			f.ProcRO, f.Self, f.Pid, f.SelfComm, f.PidComm, f.Listed, f.Cmdline, f.Fds, f.Environ, f.Mem, f.FdLink, f.Ptrace, f.Kill, containerFact(stderr, "helper"))
	}
	checks["hostname:"] = func(string) error {
		return expect(f.Hostname == "weaker-container" && f.UTS != containerFact(stderr, "uts"),
			"the sandbox's hostname %q (the container's weaker-container); its UTS namespace %s, the container's %s", f.Hostname, f.UTS, containerFact(stderr, "uts"))
	}
	readBack(t, "TestWeakerNamespacesInContainer", rep.Enforcement.Weaker, checks)
	// With Landlock, what TestWeakerNoLandlockInContainer sees allowed
	// without it is refused.
	if f.ExecLib != "EACCES" {
		t.Errorf("with Landlock: executing libc.so.6, in the system base but not a tool: %s (want EACCES)", f.ExecLib)
	}
}

// TestWeakerNoLandlockInContainer runs the namespace backend in a
// container whose seccomp profile answers Landlock's calls with ENOSYS.
// The container's helper runs in another pid namespace: the sandbox has a
// /proc of its own here.
func TestWeakerNoLandlockInContainer(t *testing.T) {
	c := newWeakerContainer(t)
	// Without Landlock the container's /proc cannot stand in for the
	// sandbox's (the proc downgrade needs Landlock): podman masks nothing.
	rep, stderr := c.run(t, profileNoLandlock, []string{"--security-opt", "unmask=ALL"}, []string{"--allow-downgrade", "landlock,max_memory,max_pids,max_cpu", "--max-wall", "60s"},
		"/usr/bin/python3", "-c", nsProbe+"\nprint(json.dumps(f), flush=True)\n", "@HELPER@")
	var f nsFacts
	probeFacts(t, rep, &f)
	t.Logf("the probe saw %s; the container: %s", rep.Stdout, stderr)
	readBack(t, "TestWeakerNoLandlockInContainer", rep.Enforcement.Weaker, map[string]func(string) error{
		"landlock:": func(string) error {
			devByMount := "ok"
			if f.DevRO {
				devByMount = "EROFS"
			}
			return expect(rep.Enforcement.Landlock == 0 && f.Secret == "ENOENT" && f.DevCreate == devByMount && f.ExecLib == "ok" && !f.UsrNoexec && f.Abstract != "ok" &&
				f.Kill != "ok" && containerFact(stderr, "helper") == "alive",
				"landlock_abi %d; /secret.txt outside the grants: %s (want ENOENT); a file in /dev: %s (want %s, as its mount flags say); executing libc.so.6: %s (want ok: /usr/lib is mounted without noexec: %v); "+
					"the container's abstract socket: %s, kill of the container's helper: %s, alive after %q (the namespaces still hold)",
				rep.Enforcement.Landlock, f.Secret, f.DevCreate, devByMount, f.ExecLib, !f.UsrNoexec, f.Abstract, f.Kill, containerFact(stderr, "helper"))
		},
	})
}

// TestWeakerNoBrokersInContainer runs airlock in a container whose
// seccomp profile refuses user namespaces (EPERM) and pidfd_getfd, as
// Docker's default does without CAP_SYS_ADMIN and CAP_SYS_PTRACE: the
// landlock backend, without its brokers.
func TestWeakerNoBrokersInContainer(t *testing.T) {
	c := newWeakerContainer(t)
	rep, stderr := c.run(t, profileNoUserNSNoBrokers, nil, []string{"--allow-downgrade", "namespaces,staged_writes,max_memory,max_pids,max_cpu", "--fs-write", "/work/out", "--max-wall", "60s"},
		"/usr/bin/python3", "-c", probeLib+`
f = {}
open("/work/out/f", "w").close()
f["Connect"] = err(lambda: socket.create_connection(("127.0.0.1", 18765), timeout=3).close())
f["Chmod"] = err(lambda: os.chmod("/work/out/f", 0o700))
f["Utime"] = err(lambda: os.utime("/work/out/f", (1, 1)))
print(json.dumps(f), flush=True)
`)
	var f struct{ Connect, Chmod, Utime string }
	probeFacts(t, rep, &f)
	t.Logf("the probe saw %s; the container: %s", rep.Stdout, stderr)
	readBack(t, "TestWeakerNoBrokersInContainer", rep.Enforcement.Weaker, map[string]func(string) error{
		"namespaces: user namespaces cannot be created here (EPERM": func(string) error {
			u := containerFact(stderr, "unshare")
			return expect(strings.Contains(u, "Operation not permitted") && rep.Enforcement.Backend == sandbox.BackendLandlock && slices.Contains(rep.Enforcement.Downgrades, "namespaces"),
				"unshare --user in the container: %q; backend %q, downgrades %q", u, rep.Enforcement.Backend, rep.Enforcement.Downgrades)
		},
		"network and metadata:": func(string) error {
			return expect(f.Connect != "ok" && f.Chmod == "EACCES" && f.Utime == "EACCES" && rep.DenialCounts.Total == 0 && len(rep.Denials) == 0,
				"connect to the container's loopback server %s; chmod %s and utime %s in the fs_write grant (want EACCES); denials %d %+v (want none)",
				f.Connect, f.Chmod, f.Utime, rep.DenialCounts.Total, rep.Denials)
		},
	})
}

// TestWeakerNamespacesAsUser runs airlock's default backend as uid 1000,
// who has no cgroup of its own, and reads back the budget's lines.
func TestWeakerNamespacesAsUser(t *testing.T) {
	airtest.RequireRoot(t)
	requireSandbox(t)
	airtest.RequireBinary(t, "/usr/bin/setpriv")
	bin := airlockBinaries(t)
	const mem, pids, cpu = 256 << 20, 24, 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "setpriv", "--reuid=1000", "--regid=1000", "--clear-groups", "--", filepath.Join(bin, "airlock"), "run", "--json",
		"--allow-downgrade", "max_memory,max_pids,max_cpu", "--max-memory", "256MiB", "--max-pids", strconv.Itoa(pids), "--max-cpu", cpu.String(), "--max-wall", "60s",
		"--", "/usr/bin/python3", "-c", probeLib+"\nf = {}\n"+limitsProbe+"\nprint(json.dumps(f), flush=True)\n", strconv.Itoa(mem), strconv.Itoa(pids), "2")
	cmd.Dir = "/"
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, _ := cmd.Output() // the exit status is the command's
	rep := parseRunReport(t, out, stderr.String())
	if rep.Enforcement.Backend != "namespaces" {
		t.Fatalf("backend %q, error %q: want the namespace backend as uid 1000", rep.Enforcement.Backend, rep.Error)
	}
	var f limitsFacts
	probeFacts(t, rep, &f)
	t.Logf("the probe saw %s", rep.Stdout)
	readBack(t, "TestWeakerNamespacesAsUser", rep.Enforcement.Weaker, limitsChecks(&f, rep, mem, pids, cpu, false))
}

// TestWeakerMicroVMWithoutCgroups runs the microVM as root where the host
// has no cgroup file system (an empty tmpfs over /sys/fs/cgroup in
// airlock's mount namespace), in two boots: the CPU and fork checks, then
// memory; and reads back the microVM's lines on the host's cgroups.
func TestWeakerMicroVMWithoutCgroups(t *testing.T) {
	requireMicroVM(t)
	airtest.RequireBinary(t, "/usr/bin/unshare")
	bin := airlockBinaries(t)
	run := func(flags []string, argv ...string) (*sandbox.Report, map[string]bool) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		args := append([]string{"-m", "--propagation", "private", "sh", "-c", `mount -t tmpfs none /sys/fs/cgroup && exec "$@"`, "sh",
			filepath.Join(bin, "airlock"), "run", "--json", "--isolation", "microvm", "--allow-downgrade", "max_memory,max_pids,max_cpu", "--max-wall", "120s"}, flags...)
		cmd := exec.CommandContext(ctx, "unshare", append(append(args, "--"), argv...)...)
		cmd.Dir = "/"
		var stderr strings.Builder
		cmd.Stderr = &stderr
		var mem map[string]bool
		done := make(chan struct{})
		go func() {
			defer close(done)
			for len(qemuPids()) == 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(100 * time.Millisecond):
				}
			}
			_, mem = cgroupLimits()
			mem["qemu seen"] = true
		}()
		out, _ := cmd.Output() // the exit status is the command's
		<-done
		return parseRunReport(t, out, stderr.String()), mem
	}
	const pids, cpu, memMax = 24, 2 * time.Second, 96 << 20
	rep, cgroups := run([]string{"--max-pids", strconv.Itoa(pids), "--max-cpu", cpu.String()}, "/usr/bin/python3", "-c", probeLib+"\nf = {}\n"+limitsHead+limitsCPU+`
print(json.dumps(f), flush=True)
go_r, go_w = os.pipe()
for n in range(4 * PIDS):
    if os.fork() == 0:
        os.read(go_r, 1)
        os._exit(0)
    print("forked", n + 1, flush=True)
print("all forked", flush=True)
`, "0", strconv.Itoa(pids), "2")
	var f limitsFacts
	probeFacts(t, rep, &f)
	t.Logf("the probe saw %s", rep.Stdout)
	forked := strings.Count(rep.Stdout, "forked ")
	memRep, memCgroups := run([]string{"--max-memory", "96MiB"}, "/usr/bin/python3", "-c", `
print(int([l.split()[1] for l in open("/proc/meminfo") if l.startswith("MemTotal:")][0]), flush=True)
x = b"m" * (160 << 20)
print("allocated", flush=True)`)
	memTotal, _ := strconv.Atoi(strings.TrimSpace(strings.Split(memRep.Stdout, "\n")[0]))
	noHostGroup := func() error {
		if !cgroups["qemu seen"] || !memCgroups["qemu seen"] {
			return fmt.Errorf("QEMU was not seen running below the test (%v, %v)", cgroups, memCgroups)
		}
		if len(cgroups) > 1 || len(memCgroups) > 1 || rep.Enforcement.Cgroup != "" {
			return fmt.Errorf("the VM ran in a cgroup of its own on the host: memory limits %v, %v; enforcement.cgroup %q", cgroups, memCgroups, rep.Enforcement.Cgroup)
		}
		return nil
	}
	readBack(t, "TestWeakerMicroVMWithoutCgroups", rep.Enforcement.Weaker, map[string]func(string) error{
		"max_cpu: no cpu cgroup on the host": func(string) error {
			if err := noHostGroup(); err != nil {
				return err
			}
			return expect(f.CPU == int64(cpu/time.Second) && f.CPUBoth == 2 && (f.CPUBig == 24 || f.CPUBig == 9),
				"RLIMIT_CPU in the guest %d s (max_cpu %s); two processes burning 0.7 max_cpu each: %d finished (want 2: nothing counts the tree); one burning 3 max_cpu: signal %d (want SIGXCPU or SIGKILL)",
				f.CPU, cpu, f.CPUBoth, f.CPUBig)
		},
		"max_pids: no pids cgroup on the host": func(string) error {
			if err := noHostGroup(); err != nil {
				return err
			}
			return expect(haltedBy(rep) == string(budget.MaxPids) && forked < pids && !strings.Contains(rep.Stdout, "all forked"),
				"forks in the guest under max_pids %d: %d, halted by %s (want max_pids from the guest's cgroup)", pids, forked, haltedBy(rep))
		},
		"max_memory: no memory cgroup on the host": func(line string) error {
			if err := noHostGroup(); err != nil {
				return err
			}
			return expect(slices.Contains(memRep.Enforcement.Weaker, line) && haltedBy(memRep) == string(budget.MaxMemory) && !strings.Contains(memRep.Stdout, "allocated") &&
				memTotal<<10 <= memMax+128<<20 && memTotal<<10 > memMax,
				"160 MiB in the guest under max_memory 96 MiB: halted by %s, stdout %q (want max_memory from the guest's cgroup); the guest's MemTotal %d KiB (want at most max_memory + 128 MiB)",
				haltedBy(memRep), memRep.Stdout, memTotal)
		},
	})
}

// procCPUMS returns the CPU time pid used, user and system, in ms.
func procCPUMS(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// After the command name: state is field 3, utime 14 and stime 15.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return (u + s) * 10 // USER_HZ is 100 on Linux
}
