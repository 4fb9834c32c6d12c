package sandbox_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/internal/enforce/cgroup"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// goBuild compiles pkg (relative to this package's directory) statically,
// with CGO_ENABLED=0, into out.
func goBuild(t *testing.T, pkg, out string) {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		airtest.SkipOrFail(t, "the go command is not on PATH, needed to build %s: %v", pkg, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool, "build", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("CGO_ENABLED=0 go build -o %s %s: %v\n%s", out, pkg, err, b)
	}
}

// owner identifies a supervisor process the way cgroup names do.
type owner struct {
	pid   int
	start uint64
}

// procStartTime returns field 22 of /proc/<pid>/stat (proc(5)), counting
// fields after the last ')' because the command name may contain anything.
func procStartTime(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 20 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the name", pid, len(f))
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// procPPid returns field 4 of /proc/<pid>/stat.
func procPPid(pid int) (int, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 2 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the name", pid, len(f))
	}
	return strconv.Atoi(f[1])
}

// allPids lists the numeric entries of /proc.
func allPids(t *testing.T) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// describe says what a pid is, for failure messages.
func describe(pid int) string {
	cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	var keep []string
	for _, l := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(l, "State:") || strings.HasPrefix(l, "PPid:") || strings.HasPrefix(l, "NSpid:") {
			keep = append(keep, strings.Join(strings.Fields(l), " "))
		}
	}
	return fmt.Sprintf("pid %d %q [%s]", pid, strings.ReplaceAll(string(cmdline), "\x00", " "), strings.Join(keep, "; "))
}

// waitExit waits until pid has exited (is a zombie or gone), at the latest
// until deadline, on a pidfd: no polling of /proc.
func waitExit(pid int, deadline time.Time) error {
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pidfd_open(%d): %w", pid, err)
	}
	defer unix.Close(fd)
	for {
		ms := time.Until(deadline).Milliseconds()
		if ms < 0 {
			ms = 0
		}
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, int(ms))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("poll pidfd of %d: %w", pid, err)
		}
		if n > 0 {
			return nil
		}
		return fmt.Errorf("%s is still alive", describe(pid))
	}
}

// becomeSubreaper makes the test process the reaper of its orphaned
// descendants, so that a sandbox init whose supervisor was killed is
// reparented here, where reapOrphans can wait for it, and not to the host's
// pid 1, where it could not be told from anyone else's.
func becomeSubreaper(t *testing.T) {
	t.Helper()
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatalf("PR_SET_CHILD_SUBREAPER: %v", err)
	}
	t.Cleanup(func() {
		_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
		if _, err := reapOrphans(t, 10*time.Second); err != nil {
			t.Error(err)
		}
	})
}

// reapOrphans waits for every child of the test process to exit and reaps
// it. It runs when the test has no exec.Cmd of its own alive, so every
// child is an orphan reparented here: a sandbox init whose supervisor died.
// A sandbox init exits only after the kernel has killed every other process
// of its pid namespace, so its exit means the whole sandbox is gone.
func reapOrphans(t *testing.T, timeout time.Duration) (int, error) {
	self := os.Getpid()
	deadline := time.Now().Add(timeout)
	n := 0
	for _, pid := range allPids(t) {
		if ppid, err := procPPid(pid); err != nil || ppid != self {
			continue
		}
		if err := waitExit(pid, deadline); err != nil {
			return n, fmt.Errorf("an orphan of a killed supervisor did not die within %v: %w", timeout, err)
		}
		var ws unix.WaitStatus
		if _, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil); err != nil && !errors.Is(err, unix.ECHILD) {
			return n, fmt.Errorf("reap orphan %d: %w", pid, err)
		}
		n++
	}
	return n, nil
}

// marked lists the live processes whose command line or environment
// contains mark; every process of a killed run carries it in one or both.
func marked(t *testing.T, mark string) []int {
	t.Helper()
	var pids []int
	for _, pid := range allPids(t) {
		if pid == os.Getpid() {
			continue
		}
		for _, f := range []string{"cmdline", "environ"} {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, f))
			if err == nil && bytes.Contains(b, []byte(mark)) {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// survivors waits, until deadline, for every marked process to exit (the
// kernel tears pid namespaces down asynchronously) and returns those that
// did not.
func survivors(t *testing.T, mark string, deadline time.Time) []string {
	t.Helper()
	var alive []string
	for _, pid := range marked(t, mark) {
		if err := waitExit(pid, deadline); err != nil {
			alive = append(alive, err.Error())
		}
	}
	return alive
}

func mountinfo(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// added returns the entries of after that are not in before.
func added(before, after []string) []string {
	var out []string
	for _, l := range after {
		if !slices.Contains(before, l) {
			out = append(out, l)
		}
	}
	return out
}

// airlockTempEntries lists the entries named airlock* in dirs.
func airlockTempEntries(t *testing.T, dirs ...string) []string {
	t.Helper()
	var out []string
	for _, d := range dirs {
		entries, err := os.ReadDir(d)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), "airlock") {
				out = append(out, filepath.Join(d, e.Name()))
			}
		}
	}
	return out
}

// ownCgroupDirs returns, for every mounted cgroup hierarchy, the directory
// of the test process's own cgroup: where a supervisor started by the test
// creates its groups.
func ownCgroupDirs(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	v1 := map[string]string{}
	v2, hasV2 := "", false
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) != 3 {
			continue
		}
		if f[0] == "0" && f[1] == "" {
			v2, hasV2 = f[2], true
			continue
		}
		for _, c := range strings.Split(f[1], ",") {
			v1[c] = f[2]
		}
	}
	var dirs []string
	for _, l := range mountinfo(t) {
		f := strings.Fields(l)
		sep := slices.Index(f, "-")
		if sep < 0 || sep+3 >= len(f) {
			continue
		}
		root, point, fstype := f[3], f[4], f[sep+1]
		var own string
		switch fstype {
		case "cgroup2":
			if !hasV2 {
				continue
			}
			own = v2
		case "cgroup":
			for _, c := range strings.Split(f[sep+3], ",") {
				if p, ok := v1[c]; ok {
					own = p
					break
				}
			}
		default:
			continue
		}
		rel, err := filepath.Rel(root, own)
		if own == "" || err != nil || strings.HasPrefix(rel, "..") {
			continue
		}
		if d := filepath.Join(point, rel); !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// groupsOf walks dirs for cgroups that airlock named for one of owners.
func groupsOf(t *testing.T, dirs []string, owners map[owner]bool) []string {
	t.Helper()
	var found []string
	for _, root := range dirs {
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil // someone else's group went away during the walk
				}
				return err
			}
			if !d.IsDir() {
				return nil
			}
			if pid, start, ok := cgroup.ParseName(d.Name()); ok {
				if owners[owner{pid, start}] {
					found = append(found, p)
				}
				return fs.SkipDir
			}
			return nil
		})
		if err != nil {
			t.Fatalf("walk %s: %v", root, err)
		}
	}
	return found
}

// TestSupervisorKill: 100 runs in which the supervisor (the airlock CLI) is
// SIGKILLed at a random moment in its first 150 ms, which covers start-up,
// namespace and cgroup setup, the exec of the command and the running tree.
// Afterwards no process of any run is left, no cgroup of a killed supervisor
// survives the next normal run's janitor, the host's mount table is as it
// was, and no airlock temporary directory exists.
func TestSupervisorKill(t *testing.T) {
	requireSandbox(t)
	iterations, budget := 100, 60*time.Second
	if testing.Short() {
		iterations = 20
	}
	bin := filepath.Join(t.TempDir(), "airlock")
	goBuild(t, "../cmd/airlock", bin)

	var r [8]byte
	_, _ = rand.Read(r[:])
	mark := "airlock-killtest-" + hex.EncodeToString(r[:])
	runTmp := t.TempDir() // the runs' TMPDIR: must stay empty
	tempPlaces := []string{os.TempDir(), "/tmp", runTmp}
	slices.Sort(tempPlaces)
	tempPlaces = slices.Compact(tempPlaces)
	mountsBefore := mountinfo(t)
	tempBefore := airlockTempEntries(t, tempPlaces...)

	// The checks below must be able to fail: show each one a leftover.
	t.Run("scan-sees-a-survivor", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			argv []string
			env  []string
		}{
			{"by-argv", []string{"/bin/sh", "-c", "read line; exit 0", mark}, []string{}},
			{"by-env", []string{"/bin/sh", "-c", "read line; exit 0"}, []string{"AIRLOCK_KILLTEST=" + mark}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				cmd := exec.Command(tc.argv[0], tc.argv[1:]...)
				cmd.Env = tc.env
				in, err := cmd.StdinPipe()
				if err != nil {
					t.Fatal(err)
				}
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				found := slices.Contains(marked(t, mark), cmd.Process.Pid)
				in.Close() // sh reads EOF and exits
				if err := cmd.Wait(); err != nil {
					t.Fatalf("marked sh: %v", err)
				}
				if !found {
					t.Fatalf("the process scan did not see a live marked process (pid %d)", cmd.Process.Pid)
				}
			})
		}
	})
	t.Run("scan-sees-a-temp-dir", func(t *testing.T) {
		d, err := os.MkdirTemp(runTmp, "airlock-selfcheck-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.Remove(d)
		if got := added(tempBefore, airlockTempEntries(t, tempPlaces...)); !slices.Contains(got, d) {
			t.Fatalf("the temp scan missed %s: new entries %v", d, got)
		}
	})
	t.Run("scan-sees-a-mount", func(t *testing.T) {
		airtest.RequireRoot(t)
		d := t.TempDir()
		if err := unix.Mount("airlock-killtest", d, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k"); err != nil {
			t.Fatalf("mount tmpfs: %v", err)
		}
		got := added(mountsBefore, mountinfo(t))
		if err := unix.Unmount(d, unix.MNT_DETACH); err != nil {
			t.Fatalf("unmount %s: %v", d, err)
		}
		if len(got) != 1 || !strings.Contains(got[0], d) {
			t.Fatalf("the mount scan saw %q after mounting a tmpfs on %s", got, d)
		}
	})
	if t.Failed() {
		t.FailNow()
	}

	becomeSubreaper(t)
	// Busy children that ignore SIGHUP and SIGTERM, a setsid'd grandchild
	// and a sleeping shell: all carry mark in their environment, the shells
	// also in argv.
	script := `trap "" HUP TERM; (trap "" HUP TERM; while :; do :; done) & setsid sleep 1000 & sleep 1000`
	args := []string{"run", "--tool", "sleep", "--tool", "setsid", "--env", "AIRLOCK_KILLTEST=" + mark, "--max-wall", "60s"}
	if os.Geteuid() != 0 {
		args = append(args, "--allow-downgrade", "max_memory", "--allow-downgrade", "max_pids", "--allow-downgrade", "max_cpu")
	}
	args = append(args, "--", "/bin/sh", "-c", script, mark)
	env := append(os.Environ(), "TMPDIR="+runTmp) // the last TMPDIR wins

	// Each run's janitor removes the groups of the runs killed before it,
	// so a leftover group is looked for right after each kill; what the
	// last kill leaves is for the final run's janitor.
	cgroupDirs := ownCgroupDirs(t)
	killed := map[owner]bool{}
	orphans, leftGroups := 0, 0
	var maxDelay time.Duration
	deadline := time.Now().Add(budget)
	for i := range iterations {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d runs fit in %v", i, iterations, budget)
		}
		cmd := exec.Command(bin, args...)
		cmd.Env = env
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		cmd.WaitDelay = 5 * time.Second // nothing may hold its stderr open after it dies
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pid := cmd.Process.Pid
		start, err := procStartTime(pid) // a child: readable until Wait reaps it
		if err != nil {
			t.Fatal(err)
		}
		delay := mrand.N(150 * time.Millisecond)
		maxDelay = max(maxDelay, delay)
		timer := time.NewTimer(delay)
		<-timer.C
		killErr := cmd.Process.Signal(syscall.SIGKILL)
		waitErr := cmd.Wait()
		ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
		if killErr != nil || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("run %d: airlock ended on its own before the SIGKILL at %v (%v, %v); it must still be running\nstderr:\n%s", i, delay, waitErr, killErr, stderr.String())
		}
		o := owner{pid, start}
		killed[o] = true
		n, err := reapOrphans(t, 10*time.Second)
		if err != nil {
			t.Fatalf("run %d, killed after %v: %v", i, delay, err)
		}
		orphans += n
		if len(groupsOf(t, cgroupDirs, map[owner]bool{o: true})) > 0 {
			leftGroups++
		}
	}
	t.Logf("%d supervisors SIGKILLed after up to %v; %d sandbox inits were orphaned and died with their namespace; %d runs left a cgroup for the next run's janitor", len(killed), maxDelay, orphans, leftGroups)
	if orphans == 0 {
		t.Errorf("no kill landed while a sandbox was running: the test did not exercise the teardown")
	}

	t.Run("no-processes", func(t *testing.T) {
		if alive := survivors(t, mark, time.Now().Add(10*time.Second)); len(alive) > 0 {
			t.Fatalf("%d processes of killed runs survived:\n%s", len(alive), strings.Join(alive, "\n"))
		}
	})

	t.Run("no-cgroups", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		final := []string{"run", "--json"}
		if os.Geteuid() != 0 {
			final = append(final, "--allow-downgrade", "max_memory", "--allow-downgrade", "max_pids", "--allow-downgrade", "max_cpu")
		}
		cmd := exec.CommandContext(ctx, bin, append(final, "--", "/bin/true")...)
		cmd.Env = env
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("a normal run after the kills: %v\n%s", err, out)
		}
		var rep sandbox.Report
		if err := json.Unmarshal(out, &rep); err != nil {
			t.Fatalf("report: %v\n%s", err, out)
		}
		if rep.ExitCode != 0 {
			t.Fatalf("a normal run after the kills: exit %d: %s", rep.ExitCode, rep.Error)
		}
		if rep.Enforcement.Cgroup == "" {
			t.Logf("runs use no cgroup here (downgrades %v): no group can leak", rep.Enforcement.Downgrades)
			return
		}
		if leftGroups == 0 {
			t.Errorf("no killed supervisor left a cgroup behind for a janitor, so this check saw nothing: was every kill before the group was made, or does the scan of %v miss them?", cgroupDirs)
		}
		// A supervisor of another test package may have run the shared
		// janitor pass within its cooldown (cgroup.JanitorShared), which
		// spares this run's: a later run past the cooldown must remove them.
		left := groupsOf(t, cgroupDirs, killed)
		for try := 0; len(left) > 0 && try < 3; try++ {
			time.Sleep(1500 * time.Millisecond)
			again := exec.CommandContext(ctx, bin, append(final, "--", "/bin/true")...)
			again.Env = env
			if out, err := again.Output(); err != nil {
				t.Fatalf("another run after the kills: %v\n%s", err, out)
			}
			left = groupsOf(t, cgroupDirs, killed)
		}
		if len(left) > 0 {
			t.Fatalf("cgroups of killed supervisors survived the next runs' janitors:\n%s", strings.Join(left, "\n"))
		}
	})

	t.Run("no-mounts", func(t *testing.T) {
		if got := added(mountsBefore, mountinfo(t)); len(got) > 0 {
			t.Fatalf("the host mount table gained entries:\n%s", strings.Join(got, "\n"))
		}
	})

	t.Run("no-temp-dirs", func(t *testing.T) {
		// The runs' TMPDIR is private and must stay empty: that is where
		// anything airlock makes through os.TempDir lands. /tmp is shared
		// with every other process on the host, so a new airlock* entry
		// there cannot be pinned on these runs and is only reported.
		for _, p := range added(tempBefore, airlockTempEntries(t, tempPlaces...)) {
			if strings.HasPrefix(p, runTmp+string(filepath.Separator)) {
				t.Errorf("airlock left a temporary entry: %s", p)
			} else {
				t.Logf("new entry %s appeared during the test; the runs' TMPDIR was %s, so it is likely another process's", p, runTmp)
			}
		}
		entries, err := os.ReadDir(runTmp)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) > 0 {
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			t.Errorf("the runs' TMPDIR %s is not empty: %v", runTmp, names)
		}
	})
}
