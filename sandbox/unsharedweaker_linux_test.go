package sandbox_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/plan"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// Every line the landlock backend puts in enforcement.weaker is read back
// against what the sandbox can do: a line no check knows fails the test,
// so a new line comes with its check.

// weakerFacts is what the probe script reports from inside the sandbox.
type weakerFacts struct {
	UID, GID      int
	Groups        []int
	Tmp           string
	Hosts         string
	Hostname      string
	OutsideStat   bool   // a path outside the grants exists for stat
	OutsideOpen   string // and opening it fails with this errno name
	OutsideXattr  string // its user.keep extended attribute, read
	SeesPid       bool   // the supervisor's pid is listed in /proc
	KillPid       string // kill(supervisor, 0) errno name
	Listen        string // listen(2) errno name
	UDP           string // socket(AF_INET, SOCK_DGRAM) errno name
	Exec          string // executing a tool outside allowed_tools: errno name or exit
	Shmget        string // shmget errno name
	ChmodOutside  string // chmod of a file of the sandbox's uid outside the grants
	ChmodInside   string // chmod +x inside the fs_write grant
	SetuidInside  string // chmod u+s inside it
	Owner         int    // owner of a file the sandbox wrote in the grant
	Fallocate     string // fallocate(2) in the scratch folder
	PosixFalloc   string // posix_fallocate(3) there (glibc falls back to writes)
	Fsize         int64  // RLIMIT_FSIZE, which bounds each file
	Protected     string // writing a protected path inside the fs_write folder
	ScratchMounts bool   // the scratch folder is on a filesystem of its own
	inPlaceFacts
}

const weakerProbe = `
import ctypes, errno, json, os, socket, subprocess, sys
W, OUT, SUP, OWNED = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
libc = ctypes.CDLL(None, use_errno=True)
def err(f):
    try:
        f()
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
def sc(nr, *a):
    if libc.syscall(nr, *a) < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
f = {}
f["UID"], f["GID"], f["Groups"] = os.getuid(), os.getgid(), os.getgroups()
f["Tmp"] = os.environ.get("TMPDIR", "")
f["Hosts"] = open("/etc/hosts").read()
f["Hostname"] = socket.gethostname()
f["OutsideStat"] = err(lambda: os.stat(OUT)) == "ok"
f["OutsideOpen"] = err(lambda: open(OUT).close())
f["OutsideXattr"] = os.getxattr(OUT, "user.keep").decode()
f["SeesPid"] = str(SUP) in os.listdir("/proc")
f["KillPid"] = err(lambda: os.kill(SUP, 0))
def listen():
    s = socket.socket()
    s.listen()
f["Listen"] = err(listen)
f["UDP"] = err(lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
def run_id():
    r = subprocess.run(["/usr/bin/id"], capture_output=True)
    if r.returncode != 0:
        raise OSError(errno.EACCES, "exit %d" % r.returncode)
f["Exec"] = err(run_id)
f["Shmget"] = err(lambda: sc({"x86_64": 29, "aarch64": 194}[os.uname().machine], 0, 4096, 0o1600))
f["ChmodOutside"] = err(lambda: os.chmod(OWNED, 0o666))
open(W + "/s.sh", "w").write("#!/bin/sh\n")
f["ChmodInside"] = err(lambda: os.chmod(W + "/s.sh", 0o755))
f["SetuidInside"] = err(lambda: os.chmod(W + "/s.sh", 0o4755))
f["Owner"] = os.stat(W + "/s.sh").st_uid
fd = os.open(os.path.join(f["Tmp"], "alloc"), os.O_CREAT | os.O_WRONLY, 0o600)
f["Fallocate"] = err(lambda: sc({"x86_64": 285, "aarch64": 47}[os.uname().machine], fd, 1, ctypes.c_long(0), ctypes.c_long(256 << 20)))
f["PosixFalloc"] = err(lambda: os.posix_fallocate(fd, 0, 1 << 20))
import resource
f["Fsize"] = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
def protected():
    with open(W + "/.bashrc", "a") as b:
        b.write("echo planted\n")
f["Protected"] = err(protected)
f["ScratchMounts"] = os.stat(f["Tmp"]).st_dev != os.stat(os.path.dirname(f["Tmp"])).st_dev
def write(path, n, mode="wb"):
    with open(path, mode) as f:
        f.write(b"x" * n)
` + inPlaceProbe + `
print(json.dumps(f))
`

// TestUnsharedWeakerLinesHold runs the probe in the landlock backend and
// checks every weaker line of its report against what the probe saw.
func TestUnsharedWeakerLinesHold(t *testing.T) {
	requireUnshared(t)
	writer := os.Geteuid()
	if writer == 0 {
		writer = metaWriter
	}
	mt := newMetaTree(t, writer, writer)
	gitRepo(t, mt.w)
	if err := filepath.Walk(filepath.Join(mt.w, ".git"), func(p string, _ os.FileInfo, err error) error {
		if err == nil {
			err = os.Lchown(p, writer, gidFor(writer))
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	owned := filepath.Join(mt.hidden, fmt.Sprintf("secret-%d", writer)) // the sandbox's uid's own file, outside the grants
	before := readMeta(t, owned)
	spec := policy.Spec{FSRead: []string{mt.readable}, FSWrite: []string{mt.w}, AllowDowngrade: []string{"staged_writes"},
		Budget: budget.Limits{Scratch: 4 << 20, Write: 1 << 20}}
	rep := runL(t, spec, sandbox.Config{}, "/usr/bin/python3", "-c", weakerProbe, mt.w, filepath.Join(mt.hidden, "bin-"+strconv.Itoa(writer)), strconv.Itoa(os.Getpid()), owned)
	wantExit(t, rep, 0)
	var f weakerFacts
	if err := json.Unmarshal([]byte(rep.Stdout), &f); err != nil {
		t.Fatalf("probe output: %v\n%s\n%s", err, rep.Stdout, rep.Stderr)
	}
	hosts, _ := os.ReadFile("/etc/hosts")
	hostname, _ := os.Hostname()
	checks := map[string]func(line string) error{
		"files:": func(string) error {
			return expect(f.OutsideStat && f.OutsideOpen == "EACCES" && f.OutsideXattr == "v" && f.Hosts == string(hosts),
				"outside the grants: stat %v, open %s, user.keep %q; /etc/hosts is the host's: %v", f.OutsideStat, f.OutsideOpen, f.OutsideXattr, f.Hosts == string(hosts))
		},
		"processes:": func(string) error {
			return expect(f.SeesPid && f.KillPid == "EPERM", "the supervisor's pid listed %v, kill(pid, 0) %s", f.SeesPid, f.KillPid)
		},
		"network:": func(string) error {
			return expect(f.Listen == "EPERM" && f.UDP == "EPERM", "listen %s, UDP socket %s", f.Listen, f.UDP)
		},
		"tools:": func(string) error {
			return expect(f.Exec != "ok", "a tool outside allowed_tools ran (%s)", f.Exec)
		},
		"/tmp:": func(string) error {
			return expect(strings.Contains(f.Tmp, "airlock-scratch-") && !f.ScratchMounts && f.Fallocate == "ENOTSUP" && f.PosixFalloc == "ok" && f.Fsize == 1<<30,
				"TMPDIR %q on its own filesystem %v; fallocate %s, posix_fallocate %s, RLIMIT_FSIZE %d (want the larger of max_scratch and 1 GiB)", f.Tmp, f.ScratchMounts, f.Fallocate, f.PosixFalloc, f.Fsize)
		},
		"hostname and IPC:": func(string) error {
			return expect(f.Hostname == hostname && f.Shmget == "EPERM", "hostname %q (host %q), shmget %s", f.Hostname, hostname, f.Shmget)
		},
		"metadata:": func(string) error {
			after := readMeta(t, owned)
			return expect(f.ChmodOutside == "EPERM" && fmt.Sprint(after) == fmt.Sprint(before) && f.ChmodInside == "ok" && f.SetuidInside == "EPERM",
				"chmod of the uid's own file outside the grants %s (unchanged %v), chmod +x inside %s, u+s inside %s", f.ChmodOutside, fmt.Sprint(after) == fmt.Sprint(before), f.ChmodInside, f.SetuidInside)
		},
		"staged_writes:": func(line string) error {
			return checkInPlace(f.inPlaceFacts, rep, mt.w, line)
		},
		"uid: no user namespace: the sandbox runs as": func(line string) error {
			want := fmt.Sprintf("uid %d", f.UID)
			return expect(f.UID == writer && f.UID != 0 && f.Owner == writer && strings.Contains(line, want) && (os.Geteuid() != 0 || len(f.Groups) == 0 && strings.Contains(line, fmt.Sprintf("gid %d", f.GID))),
				"the sandbox runs as %d:%d groups %v and wrote a file of uid %d; the fs_write grant is uid %d's; the line must name %q", f.UID, f.GID, f.Groups, f.Owner, writer, want)
		},
	}
	readBack(t, "TestUnsharedWeakerLinesHold", rep.Enforcement.Weaker, checks)
}

func expect(ok bool, format string, args ...any) error {
	if ok {
		return nil
	}
	return fmt.Errorf(format, args...)
}

// TestUnsharedRunsAsUnprivilegedUID: as root, without an fs_write grant of
// an owner other than root, the sandbox runs as an id picked for the run;
// and a grant that id cannot reach refuses the run before anything starts,
// naming the grant and the fix.
func TestUnsharedRunsAsUnprivilegedUID(t *testing.T) {
	requireUnshared(t)
	if os.Geteuid() != 0 {
		t.Skip("as a user the sandbox runs as the caller (TestUnsharedWeakerLinesHold)")
	}
	m := plan.DefaultIDMap()
	t.Run("picked", func(t *testing.T) {
		rep := pyL(t, policy.Spec{}, "import os; print(os.getuid(), os.getgid(), os.getgroups())")
		wantExit(t, rep, 0)
		var uid, gid int
		if _, err := fmt.Sscan(rep.Stdout, &uid, &gid); err != nil || uid != gid || uint32(uid) < m.RootFirst || uint32(uid)-m.RootFirst >= m.RootCount ||
			!strings.Contains(rep.Stdout, "[]") {
			t.Fatalf("the sandbox runs as %q, want one id of the range %d+%d and no groups", rep.Stdout, m.RootFirst, m.RootCount)
		}
		if w := strings.Join(rep.Enforcement.Weaker, "\n"); !strings.Contains(w, fmt.Sprintf("uid %d", uid)) || !strings.Contains(w, "there is no fs_write grant") {
			t.Fatalf("weaker does not name uid %d and why:\n%s", uid, w)
		}
	})
	for name, c := range map[string]struct {
		setup func(dir string) policy.Spec
		want  []string
	}{
		"write-grant-of-root": {func(dir string) policy.Spec {
			return policy.Spec{FSWrite: []string{dir}, AllowDowngrade: []string{"staged_writes"}}
		}, []string{"cannot read and write", "belong to root", "chown -R USER"}},
		"closed-read-grant": {func(dir string) policy.Spec {
			os.Chmod(dir, 0o700)
			w := filepath.Join(filepath.Dir(dir), "w")
			os.Mkdir(w, 0o755)
			os.Chown(w, metaWriter, metaWriter)
			return policy.Spec{FSRead: []string{dir}, FSWrite: []string{w}, AllowDowngrade: []string{"staged_writes"}}
		}, []string{"cannot read", "fs_read", "readable by uid " + strconv.Itoa(metaWriter)}},
	} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(openTempDir(t), "grant")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			marker := filepath.Join(filepath.Dir(dir), "started")
			rep := runL(t, c.setup(dir), sandbox.Config{}, "/usr/bin/python3", "-c", fmt.Sprintf("open(%q, 'w')", marker))
			wantExit(t, rep, 125)
			for _, w := range append(c.want, dir, "nothing was started", "--isolation namespaces") {
				if !strings.Contains(rep.Error, w) {
					t.Errorf("error does not say %q: %s", w, rep.Error)
				}
			}
			if _, err := os.Stat(marker); err == nil {
				t.Error("the command ran")
			}
		})
	}
}

// TestUnsharedAttackFallocate: fallocate reserves disk space without
// writing it, beyond RLIMIT_FSIZE with FALLOC_FL_KEEP_SIZE, faster than
// the 250 ms scratch watcher looks: every allocating mode is refused, in
// the scratch folder and in the fs_write grant. The attempt is bounded at
// 4 files of 256 MiB.
func TestUnsharedAttackFallocate(t *testing.T) {
	requireUnshared(t)
	writer := os.Geteuid()
	if writer == 0 {
		writer = metaWriter
	}
	w := filepath.Join(openTempDir(t), "w")
	if err := os.Mkdir(w, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(w, writer, gidFor(writer)); err != nil {
		t.Fatal(err)
	}
	rep := runL(t, policy.Spec{FSWrite: []string{w}, AllowDowngrade: []string{"staged_writes"}, Budget: budget.Limits{Scratch: 64 << 20}},
		sandbox.Config{}, "/usr/bin/python3", "-c", `
import ctypes, os, sys, tempfile
libc = ctypes.CDLL(None, use_errno=True)
NR = {"x86_64": 285, "aarch64": 47}[os.uname().machine]
total = 0
for d in (tempfile.gettempdir(), sys.argv[1]):
    for i, mode in enumerate((0, 1, 0x10, 0x11)):  # plain, KEEP_SIZE, ZERO_RANGE, ZERO_RANGE|KEEP_SIZE
        p = os.path.join(d, "f%d" % i)
        fd = os.open(p, os.O_CREAT | os.O_WRONLY, 0o600)
        r = libc.syscall(NR, fd, mode, ctypes.c_long(0), ctypes.c_long(256 << 20))
        total += os.fstat(fd).st_blocks * 512
        print("mode %#x in %s: %s, %d bytes allocated so far" % (mode, d, "refused errno %d" % ctypes.get_errno() if r else "ALLOCATED", total), flush=True)
        os.close(fd)
        os.unlink(p)
`, w)
	wantExit(t, rep, 0)
	if strings.Contains(rep.Stdout, "ALLOCATED") {
		t.Fatalf("fallocate reserved space on the host's disk beyond max_scratch (64 MiB):\n%s", rep.Stdout)
	}
}

// TestUnsharedScratchOvershoot measures what the weaker /tmp line admits:
// a sandbox writing as fast as it can gets this far past max_scratch
// before the watcher stops it. It checks the run is stopped by
// max_scratch and logs the overshoot; the writes are bounded at 1 GiB.
func TestUnsharedScratchOvershoot(t *testing.T) {
	requireUnshared(t)
	const limit = 64 << 20
	rep := runL(t, policy.Spec{Budget: budget.Limits{Scratch: limit}}, sandbox.Config{}, "/usr/bin/python3", "-c", `
import os, tempfile, time
d, chunk, total = tempfile.gettempdir(), b"\1" * (1 << 20), 0
for i in range(32):
    with open(os.path.join(d, "f%d" % i), "wb") as f:
        for _ in range(32):
            f.write(chunk)
            total += len(chunk)
            print(total, flush=True)
time.sleep(30)`)
	if rep.HaltedBy == nil || *rep.HaltedBy != "max_scratch" {
		t.Fatalf("halted_by = %v, want max_scratch\n%s", rep.HaltedBy, rep.Stderr)
	}
	lines := strings.Fields(rep.Stdout)
	written, _ := strconv.Atoi(lines[len(lines)-1])
	t.Logf("max_scratch %d MiB: the sandbox had written %d MiB when it was stopped (%d MiB beyond)", limit>>20, written>>20, max(written-limit, 0)>>20)
}
