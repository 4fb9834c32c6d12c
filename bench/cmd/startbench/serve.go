package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/client"
)

// ServeResult is airlock serve's side of the targets: a new session over
// the HTTP API from a warm pool (and without one, the baseline), and the
// memory of many idle sessions in one server.
type ServeResult struct {
	WarmPool  int     `json:"warm_pool"`
	NewWarmMS Summary `json:"new_session_warm_ms"`
	NewColdMS Summary `json:"new_session_cold_ms"`
	// Idle sessions in one server with the warm pool: the PSS of the
	// server's whole process tree (server, the sessions' inits, the warm
	// inits) divided by the sessions, and its parts.
	IdleSessions  int     `json:"idle_sessions"`
	IdlePSSKiB    float64 `json:"idle_pss_kib_per_session"`
	ServerPSSKiB  float64 `json:"server_pss_kib"`
	InitPSSKiB    float64 `json:"init_pss_kib_median"`
	TreeProcesses int     `json:"tree_processes"`
	Failures      int     `json:"failures"`
	Note          string  `json:"note,omitempty"`
}

// servePolicy is what each benchmarked session asks for: nothing but a
// tool, so that a server without a ceiling accepts it.
const servePolicy = "version: 1\nallowed_tools: [\"true\"]\n"

// serveBench measures airlock serve (airlock-server next to airlockBin):
// n new sessions with a warm pool of 2, n/2 with none, then idle sessions
// in the pooled server.
func serveBench(ctx context.Context, airlockBin string, n, idle int) *ServeResult {
	res := &ServeResult{WarmPool: 2}
	warm, err := startServer(ctx, airlockBin, "--warm-pool", "2", "--max-sessions", strconv.Itoa(idle+10))
	if err != nil {
		res.Note = err.Error()
		return res
	}
	defer warm.stop()
	cold, err := startServer(ctx, airlockBin, "--warm-pool", "0", "--max-sessions", "10")
	if err != nil {
		res.Note = err.Error()
		return res
	}
	defer cold.stop()
	var ws, cs []float64
	for i := -3; i < n; i++ {
		if err := warm.waitReady(ctx, 2); err != nil {
			res.Note = err.Error()
			return res
		}
		if d, err := warm.newSession(ctx); err != nil {
			res.Failures++
			res.Note = err.Error()
		} else if i >= 0 {
			ws = append(ws, d)
		}
		if i%2 != 0 {
			continue
		}
		// The warm server's refill (it starts 2 ms after the session is
		// ready) must not overlap the cold session's start.
		if err := warm.waitReady(ctx, 2); err != nil {
			res.Note = err.Error()
			return res
		}
		if d, err := cold.newSession(ctx); err != nil {
			res.Failures++
			res.Note = err.Error()
		} else if i >= 0 {
			cs = append(cs, d)
		}
	}
	res.NewWarmMS, res.NewColdMS = summarize(ws), summarize(cs)
	log.Printf("serve: new session p50 %.2f ms from a warm pool, %.2f ms cold", res.NewWarmMS.Median, res.NewColdMS.Median)

	// Idle sessions: open them, let the pool refill and the inits settle.
	var open []*client.Session
	defer func() {
		for _, s := range open {
			_ = s.Destroy(context.Background()) // the server's shutdown closes the rest
		}
	}()
	for range idle {
		s, err := warm.client.CreateSession(ctx, client.CreateRequest{PolicyText: servePolicy})
		if err != nil {
			res.Failures++
			res.Note = "idle sessions: " + err.Error()
			return res
		}
		open = append(open, s)
	}
	if err := warm.waitReady(ctx, 2); err != nil {
		res.Note = err.Error()
		return res
	}
	time.Sleep(3 * time.Second) // the inits' set-up garbage is collected
	pids := tree(childMap(), warm.cmd.Process.Pid)
	var total float64
	var inits []float64
	for _, pid := range pids {
		pss, _ := rollup(pid)
		total += pss
		if pid == warm.cmd.Process.Pid {
			res.ServerPSSKiB = pss
		} else {
			inits = append(inits, pss)
		}
	}
	sort.Float64s(inits)
	if len(inits) > 0 {
		res.InitPSSKiB = inits[len(inits)/2]
	}
	res.IdleSessions, res.TreeProcesses = len(open), len(pids)
	res.IdlePSSKiB = total / float64(len(open))
	log.Printf("serve: %d idle sessions: %.0f KiB PSS per session (server %.0f KiB, init median %.0f KiB, %d processes)", len(open), res.IdlePSSKiB, res.ServerPSSKiB, res.InitPSSKiB, len(pids))
	return res
}

// server is one airlock serve under the benchmark.
type server struct {
	cmd     *exec.Cmd
	client  *client.Client
	metrics string
	ws      string // the parent of its --workspace-dir, removed by stop
}

func startServer(ctx context.Context, airlockBin string, args ...string) (*server, error) {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand never fails
	token := hex.EncodeToString(b[:])
	ws, err := os.MkdirTemp("", "airlock-bench-ws-")
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, airlockBin, append([]string{"serve", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--workspace-dir", filepath.Join(ws, "w")}, args...)...)
	cmd.Env = append(os.Environ(), "AIRLOCK_TOKEN="+token)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(ws) // best effort: a temporary folder
		return nil, err
	}
	s := &server{cmd: cmd, ws: ws}
	sc := bufio.NewScanner(stderr)
	deadline := time.After(30 * time.Second)
	lines := make(chan string)
	go func() {
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var url string
	for url == "" || s.metrics == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				return nil, fmt.Errorf("airlock serve %v exited before listening", args)
			}
			if u, ok := strings.CutPrefix(l, "airlock serve: listening on "); ok {
				url = u
			}
			if u, ok := strings.CutPrefix(l, "airlock serve: metrics on "); ok {
				s.metrics = u
			}
		case <-deadline:
			s.stop()
			return nil, fmt.Errorf("airlock serve %v printed no address within 30s", args)
		}
	}
	go func() {
		for range lines { // drain: the server must never block on its log
		}
	}()
	if s.client, err = client.New(url, token, client.Options{}); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// newSession times one POST /v1/sessions and destroys the session after.
func (s *server) newSession(ctx context.Context) (float64, error) {
	t := time.Now()
	sess, err := s.client.CreateSession(ctx, client.CreateRequest{PolicyText: servePolicy})
	d := time.Since(t)
	if err != nil {
		return 0, err
	}
	return ms(d), sess.Destroy(ctx)
}

// waitReady waits until the server's pool has n warm inits ready.
func (s *server) waitReady(ctx context.Context, n int) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		if v, err := s.metric(ctx, "airlock_pool_ready"); err == nil && int(v) >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("airlock serve's warm pool never had %d inits ready", n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func (s *server) metric(ctx context.Context, name string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", s.metrics, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, fmt.Errorf("no metric %s", name)
}

func (s *server) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
	}
	_ = os.RemoveAll(s.ws) // best effort: a temporary folder
}
