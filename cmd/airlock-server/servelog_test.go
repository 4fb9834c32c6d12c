package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// jsonLogged starts airlock-server with args and reads its stderr until
// the record whose msg starts with prefix, returning the command, the
// scanner over the rest of stderr, the lines so far and that record's url.
// A line that is not JSON before it fails the test.
func jsonLogged(t *testing.T, ctx context.Context, prefix string, args ...string) (*exec.Cmd, *bufio.Scanner, []string, string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, serverBin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var lines []string
	sc := bufio.NewScanner(stderr)
	url := ""
	for url == "" && sc.Scan() {
		lines = append(lines, sc.Text())
		var rec struct{ Msg, URL string }
		if json.Unmarshal(sc.Bytes(), &rec) == nil && strings.HasPrefix(rec.Msg, prefix) {
			url = rec.URL
		}
		if !json.Valid(sc.Bytes()) {
			break
		}
	}
	if url == "" {
		t.Fatalf("airlock %s printed no JSON record %q with the address:\n%s", args[0], prefix, strings.Join(lines, "\n"))
	}
	return cmd, sc, lines, url
}

// TestServeLogJSON: with --log-format json every line serve prints is a
// JSON object, from the first to the shutdown line, and so is the line of
// a failure after the flags are read. The test starts serve, asks it
// something, stops it with SIGTERM and parses every line of its stderr.
func TestServeLogJSON(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd, sc, lines, base := jsonLogged(t, ctx, "listening on ", "serve", "--log-format", "json", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--insecure-no-auth")
	resp, err := http.Get(base + "/v1/sessions/nosuchsession")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("airlock serve after SIGTERM: %v", err)
	}
	sawShutdown, sawMetrics := false, false
	for _, l := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Errorf("stderr line is not JSON (%v): %q", err, l)
			continue
		}
		msg, _ := rec["msg"].(string)
		sawShutdown = sawShutdown || strings.HasPrefix(msg, "shutting down")
		sawMetrics = sawMetrics || strings.HasPrefix(msg, "metrics on ")
	}
	if !sawShutdown || !sawMetrics {
		t.Errorf("no shutdown (%v) or metrics (%v) record among:\n%s", sawShutdown, sawMetrics, strings.Join(lines, "\n"))
	}

	// A failure after the flags: the address cannot be listened on.
	var out bytes.Buffer
	fail := exec.CommandContext(ctx, serverBin, "serve", "--log-format", "json", "--listen", "127.0.0.1:99999", "--insecure-no-auth")
	fail.Stderr = &out
	if err := fail.Run(); err == nil {
		t.Fatal("serve --listen 127.0.0.1:99999 succeeded")
	}
	for _, l := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
		if !json.Valid([]byte(l)) {
			t.Errorf("serve's failure line is not JSON: %q", l)
		}
	}
	if !strings.Contains(out.String(), `"level":"ERROR"`) || !strings.Contains(out.String(), "listen") {
		t.Errorf("serve's failure is not an ERROR record naming listen:\n%s", out.String())
	}
}

// TestMCPLogJSON: airlock mcp --listen with --log-format json prints only
// JSON records too, its address among them.
func TestMCPLogJSON(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd, sc, lines, _ := jsonLogged(t, ctx, "serving MCP", "mcp", "--log-format", "json", "--listen", "127.0.0.1:0", "--insecure-no-auth")
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	_ = cmd.Wait()
	for _, l := range lines {
		if !json.Valid([]byte(l)) {
			t.Errorf("stderr line is not JSON: %q", l)
		}
	}
}
