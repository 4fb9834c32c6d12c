//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/airtest"
)

// Ceilings the supervisor must stay under while the sandbox floods it. The
// supervisor runs outside the sandbox's cgroup, so nothing but its own
// bounds holds it: these are far above what it needs (about 20 MB, 20 fds)
// and far below what an unbounded flood reaches (hundreds of MB, thousands
// of fds).
const (
	floodMaxRSS    = 100 << 20
	floodMaxReport = 1 << 20
	// floodConnCap is the proxy's connection cap under the default
	// max_pids of 64 (4 per task, see sandbox.proxyConnCap).
	floodConnCap = 256
)

// procSample is what /proc says about one process.
type procSample struct {
	rss int64 // bytes
	fds int
}

// readProc samples pid's resident set and open fds; ok is false once the
// process is gone.
func readProc(pid int) (procSample, bool) {
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return procSample{}, false
	}
	var s procSample
	for line := range strings.Lines(string(status)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			s.rss = kb << 10
		}
	}
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		return procSample{}, false
	}
	s.fds = len(ents)
	return s, true
}

// peakSampler polls a process's RSS and fd count until stopped and keeps
// the peaks.
type peakSampler struct {
	stop chan struct{}
	done chan struct{}

	mu   sync.Mutex
	peak procSample // guarded by mu
	n    int        // guarded by mu; samples taken
}

func samplePeaks(pid int) *peakSampler {
	s := &peakSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			if p, ok := readProc(pid); ok {
				s.mu.Lock()
				s.peak.rss = max(s.peak.rss, p.rss)
				s.peak.fds = max(s.peak.fds, p.fds)
				s.n++
				s.mu.Unlock()
			}
			select {
			case <-s.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

func (s *peakSampler) result() (procSample, int) {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak, s.n
}

// floodReport is the part of the --json report the flood tests read.
type floodReport struct {
	ExitCode int     `json:"exit_code"`
	HaltedBy *string `json:"halted_by"`
	Usage    struct {
		Ops int64 `json:"ops"`
	} `json:"usage"`
	Denials []struct {
		Layer, Op, Target, Rule, Message string
		Count                            int64 `json:"count"`
	} `json:"denials"`
	DenialCounts struct {
		Total   int64            `json:"total"`
		ByLayer map[string]int64 `json:"by_layer"`
		Dropped int64            `json:"dropped"`
	} `json:"denial_counts"`
	Stderr string `json:"stderr"`
}

// runFlood runs `airlock run --json ARGS` while sampling the supervisor,
// and returns the report, its size and the peaks. The run is bounded by
// its --max-wall and, outside it, by a 60 s timeout.
func runFlood(t *testing.T, args ...string) (floodReport, int, procSample) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	// A granted host gives the sandbox its proxy; the floods never ask for it.
	cmd := exec.CommandContext(ctx, airlockBin, rootless(append([]string{"run", "--json", "--net-host", "granted.example:443"}, args...))...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := samplePeaks(cmd.Process.Pid)
	err := cmd.Wait()
	peak, n := s.result()
	var ee *exec.ExitError
	if ctx.Err() != nil {
		t.Fatalf("airlock run did not finish within 60s (peak RSS %d MB, %d fds)", peak.rss>>20, peak.fds)
	}
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("airlock run: %v\n%s", err, stderr.String())
	}
	t.Logf("supervisor peak over %d samples: RSS %.1f MB, %d fds; report %d bytes", n, float64(peak.rss)/(1<<20), peak.fds, stdout.Len())
	var rep floodReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("report is not JSON (%d bytes): %v\nstderr:\n%s", stdout.Len(), err, stderr.String())
	}
	return rep, stdout.Len(), peak
}

// checkFloodBounds asserts the ceilings every flood test shares and that
// the run was halted by max_ops.
func checkFloodBounds(t *testing.T, rep floodReport, size int, peak procSample, maxOps int64) {
	t.Helper()
	if peak.rss >= floodMaxRSS {
		t.Errorf("supervisor RSS peaked at %d MB, want < %d MB", peak.rss>>20, floodMaxRSS>>20)
	}
	if size >= floodMaxReport {
		t.Errorf("--json report is %d bytes, want < %d", size, floodMaxReport)
	}
	if rep.HaltedBy == nil || *rep.HaltedBy != "max_ops" || rep.ExitCode != 124 {
		h := "null"
		if rep.HaltedBy != nil {
			h = *rep.HaltedBy
		}
		t.Errorf("exit %d, halted_by %s, ops %d; want exit 124 halted by max_ops (every proxy decision and connection costs an op)", rep.ExitCode, h, rep.Usage.Ops)
	}
	if rep.Usage.Ops > maxOps {
		t.Errorf("usage.ops = %d, more than max_ops %d", rep.Usage.Ops, maxOps)
	}
	if len(rep.Denials) > 66 {
		t.Errorf("report itemizes %d denials, want a bounded list (at most 66 distinct)", len(rep.Denials))
	}
}

// floodSOCKS is a python3 program: 4 processes send SOCKS5 connects to
// names that are not granted, as fast as the proxy answers, forever. Every
// name is new, so nothing is deduplicated.
const floodSOCKS = `import os, socket, struct
def flood(i):
    n = 0
    while True:
        n += 1
        try:
            s = socket.create_connection(("127.0.0.1", 1080), timeout=5)
            s.sendall(b"\x05\x01\x00")
            if s.recv(2) == b"\x05\x00":
                host = ("deny-%d-%d-" % (i, n) + "x" * 180 + ".example").encode()
                s.sendall(b"\x05\x01\x00\x03" + bytes([len(host)]) + host + struct.pack(">H", 443))
                s.recv(10)
            s.close()
        except OSError:
            pass
for i in range(4):
    if os.fork() == 0:
        flood(i)
        os._exit(0)
for i in range(4):
    os.wait()
`

// floodHTTP adds a process that asks the HTTP proxy for hosts far longer
// than any name, so targets and messages must be truncated.
const floodHTTP = `
import os, socket
if os.fork() == 0:
    n = 0
    while True:
        n += 1
        try:
            s = socket.create_connection(("127.0.0.1", 3128), timeout=5)
            host = "h%d-" % n + "y" * 3000
            s.sendall(("GET http://%s/ HTTP/1.1\r\nHost: %s\r\n\r\n" % (host, host)).encode())
            s.recv(65536)
            s.close()
        except OSError:
            pass
`

// TestDenialFloodIsBounded: denied SOCKS connects from 4 processes cost
// ops, so max_ops halts the flood, and the supervisor's memory and report
// stay bounded whatever it itemizes.
func TestDenialFloodIsBounded(t *testing.T) {
	airtest.RequireUserNS(t)
	airtest.RequireLandlockABI(t, 4)
	airtest.RequireBinary(t, "/usr/bin/python3")
	t.Run("max-ops-10", func(t *testing.T) {
		rep, size, peak := runFlood(t, "--max-ops", "10", "--max-wall", "15s", "--", "python3", "-c", floodSOCKS)
		checkFloodBounds(t, rep, size, peak, 10)
		if rep.DenialCounts.Total == 0 || rep.DenialCounts.ByLayer["net"] == 0 {
			t.Errorf("denial_counts = %+v, want the net denials counted", rep.DenialCounts)
		}
	})
	t.Run("distinct-and-long", func(t *testing.T) {
		// Enough ops for thousands of distinct denials: only the bounded
		// store stands between them and the supervisor's memory.
		const ops = 6000
		rep, size, peak := runFlood(t, "--max-ops", strconv.Itoa(ops), "--max-wall", "15s", "--", "python3", "-c", floodHTTP+floodSOCKS)
		checkFloodBounds(t, rep, size, peak, ops)
		var itemized int64
		long, oversized := false, 0
		for _, d := range rep.Denials {
			itemized += d.Count
			if len(d.Target) > 600 || len(d.Message) > 1200 {
				oversized++
			}
			long = long || strings.Contains(d.Target, "…[+")
		}
		if oversized > 0 {
			t.Errorf("%d denials have a target over 600 or a message over 1200 bytes: want them truncated", oversized)
		}
		c := rep.DenialCounts
		t.Logf("%d distinct denials itemized, denial_counts %+v", len(rep.Denials), c)
		if c.Total < 1000 || c.Dropped == 0 || itemized+c.Dropped != c.Total {
			t.Errorf("denial_counts %+v with %d itemized: want thousands counted, the excess dropped, itemized+dropped = total", c, itemized)
		}
		if !long {
			t.Errorf("no truncated target (…[+N bytes]) among %d denials: the long HTTP hosts were not reported", len(rep.Denials))
		}
	})
}

// floodIdle is a python3 program: 8 processes each hold up to 1000 idle
// connections to the HTTP proxy (the sandbox's nofile limit is 1024), send
// one byte on each every second so that no head ever completes, and open a
// new connection whenever the proxy closes one.
const floodIdle = `import os, socket, select, time
def hold():
    socks = {}
    ep = select.epoll()
    last = 0
    while True:
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
        if time.time() - last > 1:
            last = time.time()
            for s in list(socks.values()):
                try:
                    s.send(b"G")
                except OSError:
                    pass
for i in range(8):
    if os.fork() == 0:
        hold()
        os._exit(0)
for i in range(8):
    os.wait()
`

// TestIdleConnectionFloodIsBounded: thousands of idle connections to the
// in-sandbox proxy port hit the proxy's connection cap (the supervisor's
// fds stay under twice the cap), each accepted connection costs an op, and
// max_ops halts the run.
func TestIdleConnectionFloodIsBounded(t *testing.T) {
	airtest.RequireUserNS(t)
	airtest.RequireLandlockABI(t, 4)
	airtest.RequireBinary(t, "/usr/bin/python3")
	const ops = 20000
	rep, size, peak := runFlood(t, "--max-ops", strconv.Itoa(ops), "--max-wall", "15s", "--", "python3", "-c", floodIdle)
	checkFloodBounds(t, rep, size, peak, ops)
	if peak.fds >= 2*floodConnCap {
		t.Errorf("supervisor held %d fds, want < %d (twice the proxy's connection cap of %d)", peak.fds, 2*floodConnCap, floodConnCap)
	}
	t.Logf("denials %+v, denial_counts %+v", rep.Denials, rep.DenialCounts)
}
