//go:build linux

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestEgressProxyCommand runs `airlock egress-proxy` as the Kubernetes
// export would and drives it with a real HTTP client: the granted host
// answers, a host that is not granted receives nothing.
func TestEgressProxyCommand(t *testing.T) {
	var allowedHits, deniedHits atomic.Int32
	allowed := countingServer(t, &allowedHits)
	denied := countingServer(t, &deniedHits)
	dir := t.TempDir()
	pol := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(pol, []byte(fmt.Sprintf("version: 1\nnet_hosts: [%q]\nbudget:\n  max_wall: 60s\n", allowed)), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, airlockBin, "egress-proxy", "--config", pol, "--http-listen", "127.0.0.1:0", "--socks-listen", "")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	var audit strings.Builder
	cmd.Stdout = &audit
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	sc := bufio.NewScanner(stderr)
	var addr string
	for sc.Scan() {
		if a, ok := strings.CutPrefix(sc.Text(), "airlock egress-proxy: listening on "); ok {
			addr = a
			break
		}
	}
	if addr == "" {
		t.Fatal("the proxy never said where it listens")
	}
	go func() { _, _ = io.Copy(io.Discard, stderr) }()
	proxyURL, _ := url.Parse("http://" + addr)
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL)}, Timeout: 20 * time.Second}

	resp, err := client.Get("http://" + allowed + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "ok" {
		t.Fatalf("allowed host: %d %q", resp.StatusCode, body)
	}
	resp, err = client.Get("http://" + denied + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("denied host: status %d, want 403", resp.StatusCode)
	}
	if deniedHits.Load() != 0 || allowedHits.Load() == 0 {
		t.Fatalf("connections: allowed %d, denied %d; want >0 and 0", allowedHits.Load(), deniedHits.Load())
	}
}

func TestEgressProxyCommandRefusesBadConfig(t *testing.T) {
	dir := t.TempDir()
	noHosts := filepath.Join(dir, "none.yaml")
	if err := os.WriteFile(noHosts, []byte("version: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, args := range map[string][]string{
		"no-config": {"egress-proxy"},
		"missing":   {"egress-proxy", "--config", filepath.Join(dir, "nope.yaml")},
		"no-hosts":  {"egress-proxy", "--config", noHosts},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			out, err := exec.CommandContext(ctx, airlockBin, args...).CombinedOutput()
			if err == nil {
				t.Fatalf("airlock %v succeeded: %s", args, out)
			}
		})
	}
}

func countingServer(t *testing.T, hits *atomic.Int32) string {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }),
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				hits.Add(1)
			}
		}}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Close() })
	return l.Addr().String()
}
