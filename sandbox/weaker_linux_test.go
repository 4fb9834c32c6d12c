package sandbox_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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
	"downgrade/landlock":      {"namespaces"},                                                  // the namespace backend only: Landlock is the landlock backend
	"downgrade/proc":          {"namespaces"},                                                  // the mount namespace's /proc
	"downgrade/max_memory":    {"namespaces", sandbox.BackendLandlock, sandbox.BackendMicroVM}, // newLimits; OCI runtimes' cgroups are their own
	"downgrade/max_pids":      {"namespaces", sandbox.BackendLandlock, sandbox.BackendMicroVM},
	"downgrade/max_cpu":       {"namespaces", sandbox.BackendLandlock, sandbox.BackendMicroVM},
	"downgrade/staged_writes": {sandbox.BackendLandlock}, // the other backends that write in place print inplace's
	"inplace":                 {"oci/runsc", sandbox.BackendMicroVM},
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
		return fmt.Errorf("max_write is enforced: writing 2 MiB past max_write 1 MiB: %s, on the host %v, halted by %v", f.Big, big, rep.HaltedBy)
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
				"exec past its timeout halted by %v; the next exec lists %q (want the background sleep 1111 alive and the main sleep 2222 gone); runsc processes left after the session closed: %v",
				timedOut.HaltedBy, afterTimeout.Stdout, leftAfterClose)
		},
		"gvisor: filesystem denials": func(string) error {
			return expect(f.Secret != "ok" && rep.DenialCounts.ByLayer["fs"] == 0,
				"reading a file outside the grants: %s; denials %+v", f.Secret, rep.Denials)
		},
		"gvisor: /dev and /dev/shm": func(string) error {
			// The runtime's cgroup kills the sandbox (the OCI backends do not
			// tell that kill from another: halted_by stays null).
			return expect(f.Shm == "ok" && f.DevFile == "ok" && shmTotal >= 32<<20 && shmTotal < memMax+128<<20 && rep.ExitCode != 0 && (rep.HaltedBy == nil || *rep.HaltedBy != string(budget.MaxScratch)),
				"8 MiB in /dev/shm past max_scratch 1 MiB: %s, a new file in /dev: %s; filling /dev/shm stopped at %d MiB (want past max_scratch, below max_memory + 128 MiB = %d MiB) by %q, halted by %v, exit %d signal %v, error %q, stderr %.300q",
				f.Shm, f.DevFile, shmTotal>>20, (memMax+128<<20)>>20, shmErr, rep.HaltedBy, rep.ExitCode, rep.Signal, rep.Error, rep.Stderr)
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
f["Net"] = sorted(os.listdir("/sys/class/net"))
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
t = os.times()
f["OwnCPUMS"] = int((t.user + t.system + t.children_user + t.children_system) * 1000)
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
	if waitFile(filepath.Join(tr.out, "ready"), done) {
		_, mem = cgroupLimits()
		for _, pid := range qemuPids() {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			qemuArgs += strings.ReplaceAll(string(b), "\x00", " ")
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
		OwnCPUMS                                                     int64
	}
	probeFacts(t, rep, &f)
	const guestRAM = memMax + 128<<20
	readBack(t, "TestWeakerMicroVM", rep.Enforcement.Weaker, map[string]func(string) error{
		"staged_writes:": func(line string) error { return checkInPlace(f.inPlaceFacts, rep, tr.out, line) },
		"microvm: the guest has no network device": func(string) error {
			return expect(slices.Equal(f.Net, []string{"lo"}) && f.DirectLoopback != "ok" && f.DirectHost != "ok" && directHits.Load() == 0 &&
				strings.Contains(f.Proxy, "127.0.0.1") && f.Fetched == "through the proxy" && hits.Load() > 0 && rep.Enforcement.Egress == sandbox.EgressProxy,
				"network devices %q; a direct connect to the guest's loopback %s and to the host's %s:%d %s (the listener got %d); HTTP_PROXY and ALL_PROXY %q; the granted host through them: %q; egress %q",
				f.Net, f.DirectLoopback, hostIP, ln.Addr().(*net.TCPAddr).Port, f.DirectHost, directHits.Load(), f.Proxy, f.Fetched, rep.Enforcement.Egress)
		},
		"microvm: max_cpu counts": func(string) error {
			halted := rep.HaltedBy != nil && *rep.HaltedBy == string(budget.MaxMemory) && !strings.Contains(rep.Stdout, "allocated")
			return expect(rep.Usage.CPUMS > 10*f.OwnCPUMS+500 && mem[strconv.Itoa(guestRAM+256<<20)] && f.MemTotalKiB<<10 <= guestRAM && f.MemTotalKiB<<10 > memMax && halted,
				"the report's cpu %d ms, the command's own %d ms (want the VM's: far more); the host cgroups' memory limits %v (want the guest's RAM %d MiB + 256 MiB); the guest's MemTotal %d MiB (want at most max_memory + 128 MiB = %d MiB); 160 MiB in the guest under max_memory %d MiB: halted by %v, stdout %q",
				rep.Usage.CPUMS, f.OwnCPUMS, mem, guestRAM>>20, f.MemTotalKiB>>10, guestRAM>>20, memMax>>20, rep.HaltedBy, rep.Stdout)
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
