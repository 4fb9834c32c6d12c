//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/airtest"
)

// Bounds for TestServeFlood.
const (
	// serveNofile is the server's RLIMIT_NOFILE: low enough that one
	// session's connections could take every fd (the sandbox allows 1024
	// per process and many processes), as on a host with a modest limit.
	serveNofile = 4096
	// The quiet session must be served while the other floods. Unloaded,
	// /v1/health answers in about a millisecond and an exec into a warm
	// session takes a few; the flood keeps both cores busy, so the bounds
	// leave two orders of magnitude for scheduling and still fail on a
	// server that is starved of fds (EMFILE: exec cannot make its pipes,
	// the API cannot accept) or that crawls (health took 4.3 s here).
	healthBound = time.Second
	execBound   = 5 * time.Second
	// The server's own memory, outside every sandbox cgroup.
	serveMaxRSS = 100 << 20
	// floodFor is how long the background flood runs.
	floodFor = 8 * time.Second
)

// floodPolicy lets a session flood for a while without ending: ops and CPU
// are plentiful, so only the server's own bounds are tested.
func floodPolicy(ws string) string {
	return fmt.Sprintf(`version: 1
fs_write: [%s]
allowed_tools: [sh, python3]
net_hosts: [granted.example:443]
budget:
  max_wall: 5m
  max_ops: 10000000
  max_cpu: 5m
`, ws)
}

// floodBackground is a python3 program run in the background: 2 processes
// send SOCKS5 connects to names that are not granted and 8 hold up to 1000
// idle connections each to the HTTP proxy (twice the server's
// RLIMIT_NOFILE in all), reopening every one the proxy closes, for the
// given number of seconds. It then writes flood.done.
const floodBackground = `import os, socket, struct, select, sys, time
END = time.time() + float(sys.argv[1])
def deny(i):
    n = 0
    while time.time() < END:
        n += 1
        try:
            s = socket.create_connection(("127.0.0.1", 1080), timeout=5)
            s.sendall(b"\x05\x01\x00")
            if s.recv(2) == b"\x05\x00":
                host = ("deny-%d-%d.example" % (i, n)).encode()
                s.sendall(b"\x05\x01\x00\x03" + bytes([len(host)]) + host + struct.pack(">H", 443))
                s.recv(10)
            s.close()
        except OSError:
            pass
def hold():
    time.sleep(1)  # let the denials start first
    socks = {}
    ep = select.epoll()
    while time.time() < END:
        while len(socks) < 1000:
            try:
                s = socket.socket()
                s.setblocking(False)
                s.connect_ex(("127.0.0.1", 3128))
            except OSError:
                break
            socks[s.fileno()] = s
            ep.register(s.fileno(), select.EPOLLIN | select.EPOLLRDHUP)
        for fd, ev in ep.poll(0.2):
            s = socks.pop(fd, None)
            if s is not None:
                ep.unregister(fd)
                s.close()
kids = []
for f, n in ((deny, 2), (hold, 8)):
    for i in range(n):
        pid = os.fork()
        if pid == 0:
            try:
                f(i) if f is deny else f()
            finally:
                os._exit(0)
        kids.append(pid)
for pid in kids:
    os.waitpid(pid, 0)
open("flood.done", "w").write("done")
`

// TestServeFlood: one session's background processes flood the proxy with
// denials and idle connections. The server's memory and fds stay bounded,
// a second session and the API stay responsive, and the flooding
// session's next exec reports the denials its background made, bounded.
func TestServeFlood(t *testing.T) {
	airtest.RequireRoot(t) // the server's fds and memory are read from /proc
	airtest.RequireUserNS(t)
	airtest.RequireLandlockABI(t, 4)
	airtest.RequireBinary(t, "/usr/bin/python3")
	airtest.RequireBinary(t, "/usr/bin/prlimit")
	bin := mcpBinary(t)
	// The server starts with a lower RLIMIT_NOFILE (prlimit execs it, so
	// the pid is the server's).
	wrapper := filepath.Join(t.TempDir(), "airlock-nofile")
	script := fmt.Sprintf("#!/bin/sh\nexec /usr/bin/prlimit --nofile=%d:%d %s \"$@\"\n", serveNofile, serveNofile, bin)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	// The operator's ceiling allows what the flooding policy asks for.
	p := startServe(t, wrapper, "--ceiling", writeCeiling(t, fmt.Sprintf(
		"version: 1\nfs_write: [%s]\nnet_hosts: [granted.example:443]\nallowed_tools: [sh, cat, python3, sleep]\nbudget:\n  max_wall: 5m\n  max_cpu: 5m\n  max_ops: 10000000\n", os.TempDir())))
	c := p.client(t)
	ctx := serveCtx(t)

	wsA, wsB := t.TempDir(), t.TempDir()
	flooder, err := c.CreateSession(ctx, client.CreateRequest{PolicyText: floodPolicy(wsA)})
	if err != nil {
		t.Fatalf("CreateSession: %v\n%s", err, p.logText())
	}
	// The quiet session's ops suffice for every probe below.
	quiet, err := c.CreateSession(ctx, client.CreateRequest{PolicyText: servePolicy(wsB, "sh") + "  max_ops: 100000\n"})
	if err != nil {
		t.Fatalf("CreateSession: %v\n%s", err, p.logText())
	}
	pid := p.cmd.Process.Pid
	base, _ := readServeProc(pid)

	rep, err := flooder.Exec(ctx, client.ExecRequest{Args: []string{"sh", "-c",
		`python3 -c "$0" "$1" >/dev/null 2>&1 &`, floodBackground, strconv.Itoa(int(floodFor / time.Second))}})
	if err != nil || rep.ExitCode != 0 {
		t.Fatalf("start the background flood: %+v, %v", rep, err)
	}

	// While the flood runs: sample the server, and time the API and the
	// quiet session every 100 ms.
	probe := time.NewTicker(100 * time.Millisecond)
	defer probe.Stop()
	stop := make(chan struct{})
	peaks := sampleServe(pid, stop)
	var slowest struct{ health, exec time.Duration }
	var failures []string
	// The session's writes are staged until it ends: the file API sees them.
	done := filepath.Join(wsA, "flood.done")
	end := time.Now().Add(floodFor + 20*time.Second) // the flood's own end, plus slack
	for {
		if _, err := flooder.Download(ctx, done); err == nil {
			break
		}
		if time.Now().After(end) {
			close(stop)
			t.Fatalf("the background flood did not finish within %v", floodFor+20*time.Second)
		}
		<-probe.C
		hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		start := time.Now()
		err := c.Health(hctx)
		cancel()
		slowest.health = max(slowest.health, time.Since(start))
		if err != nil {
			failures = append(failures, "health: "+err.Error())
		}
		xctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		start = time.Now()
		rep, err := quiet.Exec(xctx, client.ExecRequest{Args: []string{"sh", "-c", "echo ok"}})
		cancel()
		slowest.exec = max(slowest.exec, time.Since(start))
		switch {
		case err != nil:
			failures = append(failures, "quiet exec: "+err.Error())
		case rep.ExitCode != 0 || rep.Stdout != "ok\n":
			failures = append(failures, fmt.Sprintf("quiet exec: exit %d, stdout %q, error %q", rep.ExitCode, rep.Stdout, rep.Error))
		}
	}
	close(stop)
	peak := <-peaks
	t.Logf("server: %d fds and %.1f MB before the flood, peaks %d fds and %.1f MB (RLIMIT_NOFILE %d); slowest health %v, slowest quiet exec %v",
		base.fds, float64(base.rss)/(1<<20), peak.fds, float64(peak.rss)/(1<<20), serveNofile, slowest.health, slowest.exec)
	if len(failures) > 0 {
		t.Errorf("%d API calls failed during the flood, e.g. %s", len(failures), failures[0])
	}
	if slowest.health > healthBound || slowest.exec > execBound {
		t.Errorf("slowest /v1/health %v (bound %v), slowest exec in the quiet session %v (bound %v)", slowest.health, healthBound, slowest.exec, execBound)
	}
	if peak.rss >= serveMaxRSS {
		t.Errorf("server RSS peaked at %d MB, want < %d MB", peak.rss>>20, serveMaxRSS>>20)
	}
	// The API's reserve (a quarter of RLIMIT_NOFILE) is never touched.
	if peak.fds >= serveNofile*3/4 {
		t.Errorf("server held %d fds, want < %d: the sessions ate into the API's reserve", peak.fds, serveNofile*3/4)
	}

	// The flood happened between execs: the next exec reports it.
	rep, err = flooder.Exec(ctx, client.ExecRequest{Args: []string{"sh", "-c", "true"}})
	if err != nil {
		t.Fatalf("exec after the flood: %v\n%s", err, p.logText())
	}
	dc := rep.DenialCounts
	t.Logf("next exec: %d distinct denials, denial_counts %+v, ops %d", len(rep.Denials), dc, rep.Usage.Ops)
	if dc.Total < 100 || dc.ByLayer["net"] < 100 {
		t.Errorf("next exec's denial_counts = %+v, want the background's net denials (thousands)", dc)
	}
	var itemized int64
	for _, d := range rep.Denials {
		itemized += d.Count
	}
	if len(rep.Denials) == 0 || len(rep.Denials) > 66 || itemized+dc.Dropped != dc.Total {
		t.Errorf("next exec itemizes %d distinct denials (%d with their counts), want 1 to 66 and itemized+dropped = total", len(rep.Denials), itemized)
	}
	info, err := flooder.Info(ctx)
	if err != nil {
		t.Fatalf("Info: %v", err)
	}
	if info.DenialCounts.Total < dc.Total {
		t.Errorf("session info denial_counts = %+v, want at least the %d reported", info.DenialCounts, dc.Total)
	}
}

// serveSample is the server's resident memory (bytes) and open fds.
type serveSample struct {
	rss int64
	fds int
}

func readServeProc(pid int) (serveSample, bool) {
	var s serveSample
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return s, false
	}
	for line := range strings.Lines(string(status)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			s.rss = kb << 10
		}
	}
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		return s, false
	}
	s.fds = len(ents)
	return s, true
}

// sampleServe polls pid until stop is closed and returns the peaks on done.
func sampleServe(pid int, stop <-chan struct{}) <-chan serveSample {
	done := make(chan serveSample, 1)
	go func() {
		var peak serveSample
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			if s, ok := readServeProc(pid); ok {
				peak.rss, peak.fds = max(peak.rss, s.rss), max(peak.fds, s.fds)
			}
			select {
			case <-stop:
				done <- peak
				return
			case <-tick.C:
			}
		}
	}()
	return done
}
