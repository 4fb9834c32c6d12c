package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
)

// readSummary decodes the summary airlock wrote to path.
func readSummary(t *testing.T, path string) api.Summary {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > api.MaxTerminationMessage {
		t.Errorf("summary is %d bytes, over %d", len(b), api.MaxTerminationMessage)
	}
	var s api.Summary
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("summary %q: %v", b, err)
	}
	return s
}

// TestSummaryFile: --summary-file holds the run's outcome within a Pod's
// termination message, the tail of an output larger than that, and a
// refusal's reason.
func TestSummaryFile(t *testing.T) {
	dir := t.TempDir()
	sum := filepath.Join(dir, "termination-log")
	r := airlock(t, dir, "run", "--isolation", "landlock", "--summary-file", sum, "--", "/bin/sh", "-c", "i=1; while [ $i -le 3000 ]; do echo $i; i=$((i+1)); done; echo bye >&2; exit 3")
	if r.code != 3 {
		t.Fatalf("run: exit %d, want 3\n%s", r.code, r.stderr)
	}
	s := readSummary(t, sum)
	if s.ExitCode != 3 || !strings.HasSuffix(s.Stdout, "2999\n3000\n") || s.Stderr != "bye\n" || s.Backend != "landlock" {
		t.Errorf("summary = %+v, want exit 3, stdout's tail, stderr bye, backend landlock", s)
	}
	if len(s.Truncated) != 1 || s.Truncated[0] != "stdout" {
		t.Errorf("summary.truncated = %q, want [stdout]", s.Truncated)
	}

	r = airlock(t, dir, "run", "--isolation", "landlock", "--summary-file", sum, "--max-wall", "99h", "--", "/bin/true")
	if r.code != 125 {
		t.Fatalf("run with a bad budget: exit %d, want 125\n%s", r.code, r.stderr)
	}
	if s := readSummary(t, sum); s.ExitCode != 125 || !strings.Contains(s.Error, "max_wall") {
		t.Errorf("refusal summary = %+v, want exit 125 and an error naming max_wall", s)
	}
}

// TestArgvFile: with --argv-file, airlock run waits for the command to be
// written there, laid out as the kubelet lays out a warm Pod's
// downward-API volume, runs it, and refuses anything but a JSON array of
// strings.
func TestArgvFile(t *testing.T) {
	dir := t.TempDir()
	// The kubelet's atomic writer: argv -> ..data/argv, ..data -> a
	// timestamped folder, and an update makes a new folder and renames a
	// new ..data symlink over the old one. Before the annotation exists,
	// the file is there and empty.
	payload := func(n int, content string) {
		t.Helper()
		d := filepath.Join(dir, fmt.Sprintf("..2026_%d", n))
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "argv"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Base(d), filepath.Join(dir, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	payload(1, "")
	argv := filepath.Join(dir, "argv")
	if err := os.Symlink("..data/argv", argv); err != nil {
		t.Fatal(err)
	}
	sum := filepath.Join(dir, "sum")
	cmd := exec.Command(airlockBin, rootless([]string{"run", "--isolation", "landlock", "--summary-file", sum, "--argv-file", argv})...)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		t.Fatalf("airlock run --argv-file ended before a command was assigned: %v\n%s", err, out.String())
	case <-time.After(300 * time.Millisecond): // still waiting, as it must
	}
	payload(2, `["/bin/sh","-c","echo assigned; exit 7"]`)
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill() // the test fails below either way
		t.Fatalf("airlock run --argv-file did not run the assigned command within 60s:\n%s", out.String())
	}
	if code := cmd.ProcessState.ExitCode(); code != 7 || !strings.Contains(out.String(), "assigned") {
		t.Errorf("assigned run: exit %d, want 7, output %q", code, out.String())
	}
	if s := readSummary(t, sum); s.ExitCode != 7 {
		t.Errorf("summary exit %d, want 7", s.ExitCode)
	}

	for i, bad := range []string{`"/bin/true"`, `[]`, `[""]`, `["a"] ["b"]`, `[1]`} {
		payload(3+i, bad)
		if r := airlock(t, dir, "run", "--isolation", "landlock", "--argv-file", argv); r.code != 125 || !strings.Contains(r.stderr, "--argv-file") {
			t.Errorf("argv file %s: exit %d, want 125 naming --argv-file\n%s", bad, r.code, r.stderr)
		}
	}
	if r := airlock(t, dir, "run", "--argv-file", argv, "--", "/bin/true"); r.code != 125 {
		t.Errorf("--argv-file with a command: exit %d, want 125", r.code)
	}
}
