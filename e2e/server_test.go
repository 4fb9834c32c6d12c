//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/airtest"
)

// TestServe drives `airlock serve` through the client package, against the
// real sandbox: the workflow of an agent, isolation between concurrent
// sessions, the API's errors, and what a SIGKILLed server leaves behind.
func TestServe(t *testing.T) {
	airtest.RequireRoot(t) // the leftover checks read every process and cgroup
	airtest.RequireUserNS(t)
	airtest.RequireLandlockABI(t, 4)
	bin := mcpBinary(t)
	t.Run("Workflow", func(t *testing.T) { testServeWorkflow(t, bin) })
	t.Run("Isolation", func(t *testing.T) { testServeIsolation(t, bin) })
	t.Run("Errors", func(t *testing.T) { testServeErrors(t, bin) })
	t.Run("SIGTERMClosesSessions", func(t *testing.T) { testServeSIGTERM(t, bin) })
	t.Run("KilledLeavesNothing", func(t *testing.T) { testServeKilled(t, bin) })
	t.Run("WarmPool", func(t *testing.T) { testServeWarmPool(t, bin) })
}

// testServeWarmPool: airlock serve keeps --warm-pool inits waiting, each
// with nothing started in it; a session takes one (the metrics count it),
// runs under its own policy, and the pool is refilled; a refused session
// takes none.
func testServeWarmPool(t *testing.T, bin string) {
	p := startServe(t, bin, append(tempCeiling(t), "--warm-pool", "2", "--metrics-listen", "127.0.0.1:0")...)
	ctx := serveCtx(t)
	metricsURL := ""
	for deadline := time.Now().Add(30 * time.Second); metricsURL == ""; time.Sleep(10 * time.Millisecond) {
		for _, line := range strings.Split(p.logText(), "\n") {
			if u, ok := strings.CutPrefix(line, "airlock serve: metrics on "); ok {
				metricsURL = u
			}
		}
		if metricsURL == "" && time.Now().After(deadline) {
			t.Fatalf("no metrics address in the log within 30s:\n%s", p.logText())
		}
	}
	metric := func(name string) float64 {
		t.Helper()
		resp, err := http.Get(metricsURL)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body) // a short read fails the lookup below
		for _, line := range strings.Split(string(body), "\n") {
			if v, ok := strings.CutPrefix(line, name+" "); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					t.Fatalf("%s: %v", line, err)
				}
				return f
			}
		}
		t.Fatalf("no metric %s", name)
		return 0
	}
	waitReady := func(n float64) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for metric("airlock_pool_ready") != n {
			if time.Now().After(deadline) {
				t.Fatalf("the pool never had %v inits ready\n%s", n, p.logText())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitReady(2)
	// Each warm init is a lone process: nothing runs in it yet.
	procs := serveDescendants(p.cmd.Process.Pid)
	if len(procs) != 2 {
		t.Errorf("processes under the server with 2 warm inits and no session: %v, want the 2 inits alone", procs)
	}

	_, err := p.client(t).CreateSession(ctx, client.CreateRequest{PolicyText: "version: 1\nfs_read: [/etc]\nallowed_tools: [cat]\n"})
	wantAPIError(t, "a policy above the ceiling", err, 403, "exceeds_ceiling")
	if got := metric("airlock_pool_taken_total"); got != 0 {
		t.Errorf("a refused session took %v warm inits, want 0", got)
	}

	ws := t.TempDir()
	s, err := p.client(t).CreateSession(ctx, client.CreateRequest{PolicyText: servePolicy(ws, "sh", "cat")})
	if err != nil {
		t.Fatalf("CreateSession: %v\n%s", err, p.logText())
	}
	if got := metric("airlock_pool_taken_total"); got != 1 {
		t.Errorf("airlock_pool_taken_total = %v after one session, want 1", got)
	}
	rep, err := s.Exec(ctx, client.ExecRequest{Args: []string{"sh", "-c", "echo warm > out.txt; cat /etc/shadow"}})
	if err != nil || rep.ExitCode == 0 || strings.Contains(rep.Stdout, "root:") {
		t.Errorf("exec in a session from the pool: %+v, %v; want the write to work and /etc/shadow unreadable", rep, err)
	}
	if got, err := s.Download(ctx, "out.txt"); err != nil || string(got) != "warm\n" {
		t.Errorf("Download out.txt = %q, %v", got, err)
	}
	waitReady(2)
	if err := s.Destroy(ctx); err != nil {
		t.Fatal(err)
	}

	// As root, an init started after a session mounts the steps that
	// session's plan began with while it waits. The pool's first two
	// inits predate every session, so the second of two more sessions
	// with such a policy goes on from steps mounted ahead, and works.
	if os.Geteuid() != 0 {
		return
	}
	for i := range 2 {
		s, err := p.client(t).CreateSession(ctx, client.CreateRequest{PolicyText: servePolicy(t.TempDir(), "sh")})
		if err != nil {
			t.Fatalf("CreateSession: %v\n%s", err, p.logText())
		}
		rep, err := s.Exec(ctx, client.ExecRequest{Args: []string{"sh", "-c", "echo ok > out.txt && read -r l < out.txt && echo $l; read -r h < /etc/hosts && echo $h"}})
		if err != nil || rep.ExitCode != 0 || !strings.HasPrefix(rep.Stdout, "ok\n127.0.0.1") {
			t.Errorf("exec in session %d after the first: %+v, %v; want its workspace and /etc/hosts", i+2, rep, err)
		}
		if err := s.Destroy(ctx); err != nil {
			t.Fatal(err)
		}
		waitReady(2)
	}
	if got := metric("airlock_pool_mounted_ahead_total"); got < 1 {
		t.Errorf("airlock_pool_mounted_ahead_total = %v after three sessions with the same first steps, want at least 1", got)
	}
}

// serveProc is one running `airlock serve`.
type serveProc struct {
	cmd    *exec.Cmd
	url    string
	token  string
	mu     sync.Mutex
	log    bytes.Buffer // guarded by mu; the server's stderr
	exited chan struct{}
}

func (p *serveProc) logText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// startServe starts `airlock serve --listen 127.0.0.1:0` with a fresh token
// in AIRLOCK_TOKEN and waits for the address it prints. The server gets
// SIGTERM at cleanup, unless the test killed it.
func startServe(t *testing.T, bin string, args ...string) *serveProc {
	t.Helper()
	var b [24]byte
	_, _ = rand.Read(b[:]) // crypto/rand never fails
	p := &serveProc{token: hex.EncodeToString(b[:]), exited: make(chan struct{})}
	p.cmd = exec.Command(bin, append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)...)
	p.cmd.Env = append(os.Environ(), "AIRLOCK_TOKEN="+p.token)
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start airlock serve: %v", err)
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.log.WriteString(line + "\n")
			p.mu.Unlock()
			if u, ok := strings.CutPrefix(line, "airlock serve: listening on "); ok {
				addr <- u
			}
		}
		_ = p.cmd.Wait() // the exit status is checked by the tests that care
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM) // fails when the test killed it already
		select {
		case <-p.exited:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			t.Errorf("airlock serve did not stop within 30s of SIGTERM; log:\n%s", p.logText())
		}
	})
	select {
	case p.url = <-addr:
	case <-p.exited:
		t.Fatalf("airlock serve exited before listening:\n%s", p.logText())
	case <-time.After(30 * time.Second):
		t.Fatalf("airlock serve printed no address within 30s:\n%s", p.logText())
	}
	return p
}

func (p *serveProc) client(t *testing.T) *client.Client {
	c, err := client.New(p.url, p.token, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// serveCtx bounds one test's API calls.
func serveCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// serveFetchLocal fetches result.txt from a server on the sandbox's own
// loopback, without the egress proxy, retrying while the server starts.
const serveFetchLocal = `import time, urllib.request
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
for i in range(200):
    try:
        print(opener.open("http://127.0.0.1:8000/result.txt", timeout=2).read().decode(), end="")
        break
    except OSError as e:
        err = e
        time.sleep(0.05)
else:
    raise SystemExit(f"no answer from the background server: {err}")`

func servePolicy(ws string, tools ...string) string {
	return fmt.Sprintf("version: 1\nfs_write: [%s]\nallowed_tools: [%s]\nbudget:\n  max_wall: 5m\n", ws, strings.Join(tools, ", "))
}

// wantAPIError checks that err is a *client.Error with status and code.
func wantAPIError(t *testing.T, what string, err error, status int, code string) *client.Error {
	t.Helper()
	var ae *client.Error
	if !errors.As(err, &ae) {
		t.Errorf("%s: error = %v, want *client.Error %d %s", what, err, status, code)
		return &client.Error{}
	}
	if ae.Status != status || ae.Code != code {
		t.Errorf("%s: error = %d %s (%s), want %d %s", what, ae.Status, ae.Code, ae.Message, status, code)
	}
	return ae
}

func testServeWorkflow(t *testing.T, bin string) {
	p := startServe(t, bin, tempCeiling(t)...)
	c := p.client(t)
	ctx := serveCtx(t)
	ws := t.TempDir()
	s, err := c.CreateSession(ctx, client.CreateRequest{PolicyText: servePolicy(ws, "python3", "sh")})
	if err != nil {
		t.Fatalf("CreateSession: %v\n%s", err, p.logText())
	}

	csv := "item,amount\napples,12\npears,30\nplums,0\n"
	if err := s.Upload(ctx, "data.csv", strings.NewReader(csv)); err != nil {
		t.Fatalf("Upload: %v", err)
	}
	var streamed bytes.Buffer
	rep, err := s.Exec(ctx, client.ExecRequest{Args: []string{"python3", "-c", `import csv
total = sum(int(r["amount"]) for r in csv.DictReader(open("data.csv")))
open("result.txt", "w").write(f"{total}\n")
print("total", total)`}, OnOutput: func(stream string, data []byte) { fmt.Fprintf(&streamed, "%s:%s", stream, data) }})
	if err != nil || rep.ExitCode != 0 || streamed.String() != "stdout:total 42\n" {
		t.Fatalf("exec: %+v, %v; streamed %q", rep, err, streamed.String())
	}
	got, err := s.Download(ctx, "result.txt")
	if err != nil || string(got) != "42\n" {
		t.Fatalf("Download result.txt = %q, %v", got, err)
	}
	entries, err := s.List(ctx, "")
	if err != nil || len(entries) != 2 {
		t.Errorf("List = %+v, %v; want data.csv and result.txt", entries, err)
	}

	// A background server started by one exec answers the next one, on
	// the session's own loopback.
	t.Run("BackgroundServer", func(t *testing.T) {
		rep, err := s.Exec(ctx, client.ExecRequest{Args: []string{"sh", "-c", "python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 &"}})
		if err != nil || rep.ExitCode != 0 {
			t.Fatalf("start background server: %+v, %v", rep, err)
		}
		rep, err = s.Exec(ctx, client.ExecRequest{Timeout: 30 * time.Second, Args: []string{"python3", "-c", serveFetchLocal}})
		if err != nil || rep.ExitCode != 0 || rep.Stdout != "42\n" {
			t.Errorf("background server: %+v, %v", rep, err)
		}
	})

	info, err := s.Info(ctx)
	if err != nil || info.Execs != 3 || info.Workspace != ws {
		t.Errorf("Info = %+v, %v; want 3 execs in workspace %s", info, err, ws)
	}
	if err := s.Destroy(ctx); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	_, err = s.Info(ctx)
	wantAPIError(t, "Info after Destroy", err, 410, "session_ended")
	_, err = s.Exec(ctx, client.ExecRequest{Args: []string{"sh", "-c", "true"}})
	wantAPIError(t, "Exec after Destroy", err, 410, "session_ended")
}

// testServeIsolation: 20 concurrent sessions with different policies each
// write a secret in their workspace; none can read another's, from inside
// the sandbox or through the files API.
func testServeIsolation(t *testing.T, bin string) {
	const n = 20
	// One token's n sessions each have a request body or a download in
	// flight at once: more than the default transfers of one token
	// (TestAttackSlowUploads tests that bound).
	p := startServe(t, bin, append(tempCeiling(t), "--max-sessions", strconv.Itoa(n), "--max-transfers", strconv.Itoa(2*n))...)
	c := p.client(t)
	ctx := serveCtx(t)
	type sess struct {
		s      *client.Session
		ws     string
		secret string
	}
	all := make([]sess, n)
	var wg sync.WaitGroup
	for i := range all {
		all[i].ws = t.TempDir()
		all[i].secret = fmt.Sprintf("secret-%d-%s", i, filepath.Base(all[i].ws))
		tools := []string{"sh", "cat"}
		if i%2 == 1 {
			tools = append(tools, "python3") // different policies
		}
		wg.Go(func() {
			s, err := c.CreateSession(ctx, client.CreateRequest{PolicyText: servePolicy(all[i].ws, tools...)})
			if err != nil {
				t.Errorf("session %d: %v", i, err)
				return
			}
			all[i].s = s
			rep, err := s.Exec(ctx, client.ExecRequest{Args: []string{"sh", "-c", "echo " + all[i].secret + " > secret"}})
			if err != nil || rep.ExitCode != 0 {
				t.Errorf("session %d: write secret: %+v, %v", i, rep, err)
			}
		})
	}
	if wg.Wait(); t.Failed() {
		t.Fatalf("server log:\n%s", p.logText())
	}

	for i := range all {
		wg.Go(func() {
			var others []string
			for j := range all {
				if j != i {
					others = append(others, filepath.Join(all[j].ws, "secret"))
				}
			}
			rep, err := all[i].s.Exec(ctx, client.ExecRequest{Args: append([]string{"cat"}, others...)})
			if err != nil {
				t.Errorf("session %d: exec: %v", i, err)
				return
			}
			for j := range all {
				if j != i && strings.Contains(rep.Stdout+rep.Stderr, all[j].secret) {
					t.Errorf("session %d read session %d's secret from inside the sandbox: %q", i, j, rep.Stdout)
				}
			}
			if rep.ExitCode == 0 {
				t.Errorf("session %d: cat of other workspaces succeeded: %q", i, rep.Stdout)
			}
			j := (i + 1) % n
			data, err := all[i].s.Download(ctx, filepath.Join(all[j].ws, "secret"))
			if ae := wantAPIError(t, fmt.Sprintf("session %d downloads session %d's secret", i, j), err, 403, "denied"); ae.Denial == nil || ae.Denial.Rule != "fs_read" {
				t.Errorf("session %d: download denial = %+v (data %q)", i, ae.Denial, data)
			}
			own, err := all[i].s.Download(ctx, "secret")
			if err != nil || strings.TrimSpace(string(own)) != all[i].secret {
				t.Errorf("session %d: own secret = %q, %v", i, own, err)
			}
		})
	}
	wg.Wait()
}

func testServeErrors(t *testing.T, bin string) {
	p := startServe(t, bin, append(tempCeiling(t), "--max-body", "1KiB")...)
	ctx := serveCtx(t)
	ws := t.TempDir()
	c := p.client(t)
	s, err := c.CreateSession(ctx, client.CreateRequest{PolicyText: servePolicy(ws, "sh")})
	if err != nil {
		t.Fatalf("CreateSession: %v", err)
	}

	for _, tok := range []string{"", strings.Repeat("x", len(p.token))} {
		other, _ := client.New(p.url, tok, client.Options{})
		_, err = other.Session(s.ID()).Info(ctx)
		wantAPIError(t, "token "+tok, err, 401, "unauthorized")
	}

	err = s.Upload(ctx, "big", strings.NewReader(strings.Repeat("x", 2048)))
	wantAPIError(t, "oversized upload", err, 413, "body_too_large")
	if _, err := os.Stat(filepath.Join(ws, "big")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("oversized upload left a file: %v", err)
	}

	req, _ := http.NewRequestWithContext(ctx, "POST", p.url+"/v1/sessions", strings.NewReader(`{"policy": `))
	req.Header.Set("Authorization", "Bearer "+p.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || resp.Header.Get("Content-Type") != "application/json" || !strings.Contains(string(body), `"code":"bad_json"`) {
		t.Errorf("malformed JSON = %d %s", resp.StatusCode, body)
	}

	_, err = c.CreateSession(ctx, client.CreateRequest{PolicyText: "version: 1\nallowed_tools: [sh]\nfs_writ: [/tmp]\n"})
	if ae := wantAPIError(t, "bad policy", err, 400, "bad_policy"); len(ae.Problems) == 0 || ae.Problems[0].Line != 3 || ae.Problems[0].Col != 1 {
		t.Errorf("bad policy problems = %+v, want one at 3:1", ae.Problems)
	}

	_, err = c.Session("0123456789abcdef01234567").Info(ctx)
	wantAPIError(t, "unknown session", err, 404, "unknown_session")

	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(ws, "link")); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"../x", "a/../../x", filepath.Join(outside, "x"), "link/x"} {
		err = s.Upload(ctx, path, strings.NewReader("pwned"))
		if ae := wantAPIError(t, "upload "+path, err, 403, "denied"); ae.Denial == nil || ae.Denial.Rule != "fs_write" || ae.Denial.Layer != "fs" {
			t.Errorf("upload %s: denial = %+v", path, ae.Denial)
		}
	}
	for _, dir := range []string{filepath.Dir(ws), outside} {
		if _, err := os.Stat(filepath.Join(dir, "x")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("an escaping upload wrote %s/x: %v", dir, err)
		}
	}
}

// sleepingServer starts a server with two sessions, each with two
// background processes left by an exec, and returns the processes below it.
func sleepingServer(t *testing.T, ctx context.Context, bin string) (*serveProc, []procID) {
	t.Helper()
	p := startServe(t, bin, tempCeiling(t)...)
	for range 2 {
		s, err := p.client(t).CreateSession(ctx, client.CreateRequest{PolicyText: servePolicy(t.TempDir(), "sh", "sleep")})
		if err != nil {
			t.Fatalf("CreateSession: %v\n%s", err, p.logText())
		}
		rep, err := s.Exec(ctx, client.ExecRequest{Args: []string{"sh", "-c", "sleep 600 >/dev/null 2>&1 & sleep 600 >/dev/null 2>&1 &"}})
		if err != nil || rep.ExitCode != 0 {
			t.Fatalf("start background sleepers: %+v, %v", rep, err)
		}
	}
	procs := serveDescendants(p.cmd.Process.Pid)
	if len(procs) < 6 { // per session: at least an init and two sleepers
		t.Fatalf("found %d processes under the server, want at least 6: %v", len(procs), procs)
	}
	return p, procs
}

// testServeSIGTERM: SIGTERM closes every session before the server exits 0.
func testServeSIGTERM(t *testing.T, bin string) {
	p, procs := sleepingServer(t, serveCtx(t), bin)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("no exit within 30s of SIGTERM:\n%s", p.logText())
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit code after SIGTERM = %d, want 0:\n%s", code, p.logText())
	}
	for _, pr := range procs {
		if pr.alive() {
			t.Errorf("process %d of a session outlived the server's graceful shutdown", pr.pid)
		}
	}
	if left := serveCgroups(p.cmd.Process.Pid); len(left) > 0 {
		t.Errorf("cgroups left after graceful shutdown: %v", left)
	}
}

// testServeKilled: a server killed with SIGKILL leaves no process of its
// sessions behind, and a new server's first session removes its cgroups.
func testServeKilled(t *testing.T, bin string) {
	ctx := serveCtx(t)
	old, procs := sleepingServer(t, ctx, bin)
	pid := old.cmd.Process.Pid
	if err := old.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-old.exited
	// The inits die with their supervisor (PDEATHSIG), and their pid
	// namespaces with them; that takes a moment, so poll.
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for alive := procs; len(alive) > 0; <-tick.C {
		alive = slices.DeleteFunc(alive, func(p procID) bool { return !p.alive() })
		if time.Now().After(deadline) {
			t.Fatalf("processes of the killed server's sessions still alive after 20s: %v", alive)
		}
	}

	// The next server's first session runs the cgroup janitor.
	t.Logf("cgroups of the killed server before the next one starts: %d", len(serveCgroups(pid)))
	next := startServe(t, bin, tempCeiling(t)...)
	if _, err := next.client(t).CreateSession(ctx, client.CreateRequest{PolicyText: servePolicy(t.TempDir(), "sh")}); err != nil {
		t.Fatalf("CreateSession on the new server: %v\n%s", err, next.logText())
	}
	if left := serveCgroups(pid); len(left) > 0 {
		t.Errorf("cgroups of the killed server remain after the new server's first session: %v", left)
	}
}

// procID is a process, told apart from a later one with the same pid by
// its start time (proc(5) stat field 22).
type procID struct {
	pid   int
	start string
}

func (p procID) alive() bool {
	_, start, ok := serveStat(p.pid)
	return ok && start == p.start
}

// serveStat returns the parent pid and start time of pid; ok is false when
// it is gone or a zombie.
func serveStat(pid int) (ppid int, start string, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, "", false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]) // after the name; f[0] is field 3 (state)
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return 0, "", false
	}
	ppid, _ = strconv.Atoi(f[1])
	return ppid, f[19], true
}

// serveDescendants returns every live process below root.
func serveDescendants(root int) []procID {
	ents, _ := os.ReadDir("/proc") // an unreadable /proc finds nothing, and the caller fails
	children := map[int][]procID{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, start, ok := serveStat(pid); ok {
			children[ppid] = append(children[ppid], procID{pid, start})
		}
	}
	out := children[root]
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i].pid]...)
	}
	return out
}

// serveCgroups returns the cgroup directories named for supervisor pid
// ("airlock-<pid>-..."), in every hierarchy.
func serveCgroups(pid int) []string {
	prefix := "airlock-" + strconv.Itoa(pid) + "-"
	var found []string
	_ = filepath.WalkDir("/sys/fs/cgroup", func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil // unreadable parts are skipped
		}
		if strings.HasPrefix(d.Name(), prefix) {
			found = append(found, path)
			return fs.SkipDir
		}
		if strings.Count(path, "/") > 10 {
			return fs.SkipDir
		}
		return nil
	})
	return found
}
