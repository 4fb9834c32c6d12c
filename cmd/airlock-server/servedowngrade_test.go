package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestServeAllowDowngrade: `airlock serve --allow-downgrade LAYERS` is the
// operator accepting, for every session, to run without layers this host
// lacks: as a normal user without a delegated cgroup a session then
// starts and runs (before: every session failed to start unless each
// client's policy carried allow_downgrade, which without a ceiling it may
// not), and its report says what ran without. A bad layer name is refused
// before the server listens.
func TestServeAllowDowngrade(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, serverBin, "serve", "--listen", "127.0.0.1:0", "--insecure-no-auth", "--allow-downgrade", "max_memroy").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "max_memroy") || strings.Contains(string(out), "listening") {
		t.Errorf("serve --allow-downgrade max_memroy = %v:\n%s\nwant a refusal naming it", err, out)
	}

	cmd := exec.CommandContext(ctx, serverBin, "serve", "--listen", "127.0.0.1:0", "--insecure-no-auth", "--allow-downgrade", "max_memory,max_pids,max_cpu")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	sc := bufio.NewScanner(stderr)
	base := ""
	for sc.Scan() {
		if u, ok := strings.CutPrefix(sc.Text(), "airlock serve: listening on "); ok {
			base = u
			break
		}
	}
	if base == "" {
		t.Fatal("airlock serve printed no address")
	}
	go func() {
		for sc.Scan() {
		}
	}()
	post := func(path, body string, v any) int {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, "POST", base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		return resp.StatusCode
	}
	var sess struct {
		ID    string `json:"id"`
		Error *struct{ Code, Message string }
	}
	if code := post("/v1/sessions", `{"policy":"version: 1\nallowed_tools: [sh]\n"}`, &sess); code != 201 {
		t.Fatalf("create session = %d %+v", code, sess.Error)
	}
	var res struct {
		Report struct {
			ExitCode    int    `json:"exit_code"`
			Stdout      string `json:"stdout"`
			Error       string `json:"error"`
			Enforcement struct {
				Downgrades []string `json:"downgrades"`
			} `json:"enforcement"`
		} `json:"report"`
	}
	if code := post("/v1/sessions/"+sess.ID+"/exec", `{"args":["sh","-c","echo ok"]}`, &res); code != 200 || res.Report.ExitCode != 0 || res.Report.Stdout != "ok\n" {
		t.Errorf("exec = %d %+v", code, res.Report)
	}
	t.Logf("downgrades taken: %v", res.Report.Enforcement.Downgrades)
}
