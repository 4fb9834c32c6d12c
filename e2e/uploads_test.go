//go:build e2e

package e2e

import (
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/airtest"
)

// TestServeSlowUploads: one tenant starts 60 uploads of 64 MiB into a real
// airlock serve and trickles them (4 MiB sent, then nothing). The server's
// resident memory stays under serveMaxRSS (it runs outside every cgroup),
// the uploads beyond the token's limits are refused with 429 before their
// bodies are read, a health check and another upload are answered
// meanwhile, and the aborted uploads leave nothing in the session.
func TestServeSlowUploads(t *testing.T) {
	airtest.RequireRoot(t) // the server's memory is read from /proc
	airtest.RequireUserNS(t)
	airtest.RequireLandlockABI(t, 4)
	const n, size, sent = 60, 64 << 20, 4 << 20
	bin := mcpBinary(t)
	p := startServe(t, bin, append(tempCeiling(t), "--max-body", "64MiB", "--warm-pool", "0")...)
	c := p.client(t)
	ctx := serveCtx(t)
	s, err := c.CreateSession(ctx, client.CreateRequest{PolicyText: servePolicy(t.TempDir(), "sh")})
	if err != nil {
		t.Fatalf("CreateSession: %v\n%s", err, p.logText())
	}
	pid := p.cmd.Process.Pid
	base, _ := readServeProc(pid)
	stop := make(chan struct{})
	peaks := sampleServe(pid, stop)

	var ups []*airtest.Stalled
	for i := range n {
		req, err := http.NewRequest("PUT", p.url+"/v1/sessions/"+s.ID()+"/files/up-"+strconv.Itoa(i), nil)
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = size
		req.Header.Set("Authorization", "Bearer "+p.token)
		ups = append(ups, airtest.StartStalled(t, req, airtest.Zeros{}, sent, nil))
	}
	waitReadsSettle(t, pid)

	resp, err := http.Get(p.url + "/v1/health")
	if err != nil || resp.StatusCode != 200 {
		t.Errorf("health check during the stalled uploads: %v, %v", resp, err)
	}
	if resp != nil {
		resp.Body.Close()
	}
	if err := s.Upload(ctx, "small", strings.NewReader("hello")); err == nil {
		t.Errorf("an upload of the same token was admitted while it holds its limit of uploads")
	}
	close(stop)
	peak := <-peaks
	t.Logf("server RSS %.1f MiB before, %.1f MiB at the peak, with %d uploads stalled after %d MiB each", float64(base.rss)/(1<<20), float64(peak.rss)/(1<<20), n, sent>>20)
	if peak.rss > serveMaxRSS {
		t.Errorf("the server's resident memory reached %d MiB with %d stalled uploads, want at most %d MiB", peak.rss>>20, n, serveMaxRSS>>20)
	}
	refused := 0
	for _, up := range ups {
		if up.Answered() {
			if up.Status != http.StatusTooManyRequests {
				t.Errorf("stalled upload answered %d %q (%v), want 429", up.Status, up.Body, up.Err)
			}
			refused++
		}
	}
	if refused == 0 {
		t.Errorf("none of %d stalled uploads of one token was refused", n)
	}
	for _, up := range ups {
		close(up.Release)
		<-up.Done
	}
	entries, err := s.List(ctx, "")
	if err != nil || len(entries) != 0 {
		t.Errorf("after the aborted uploads the workspace holds %+v (%v), want nothing", entries, err)
	}
}

// waitReadsSettle waits until the process reads less than 1 MiB in a
// second (/proc/PID/io rchar; a live session's supervisor reads a little
// all the time): the server has taken in what the stalled clients sent,
// or refused them.
func waitReadsSettle(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	last := rchar(t, pid)
	for {
		time.Sleep(time.Second)
		r := rchar(t, pid)
		if r-last < 1<<20 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server still reads %d bytes a second after 2 minutes", r-last)
		}
		last = r
	}
}

func rchar(t *testing.T, pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		t.Fatalf("read the server's I/O counters: %v", err)
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, "rchar:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	t.Fatal("no rchar in /proc/PID/io")
	return 0
}
