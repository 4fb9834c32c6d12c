package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// serverBin is the binary built once by TestMain.
var serverBin string

func TestMain(m *testing.M) {
	os.Exit(buildAndRun(m))
}

func buildAndRun(m *testing.M) int {
	dir, err := os.MkdirTemp("", "airlock-server-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	serverBin = filepath.Join(dir, "airlock-server")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Installed as documented: the small init next to it. go test puts
	// $GOROOT/bin first on PATH.
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", dir, ".", "../airlock-init").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build -o %s . ../airlock-init: %v\n%s", dir, err, out)
		return 1
	}
	return m.Run()
}

// result is what one airlock-server invocation did.
type result struct {
	stdout, stderr string
	code           int
}

// airlockServer runs the built binary in dir ("" for the package directory)
// with a bounded time and returns its output and exit status.
func airlockServer(t *testing.T, dir string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, serverBin, args...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("airlock-server %q: did not finish within 60s\nstdout:\n%s\nstderr:\n%s", args, r.stdout, r.stderr)
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("airlock-server %q: %v", args, err)
	}
	return r
}

// TestExitCodes checks the exit status and messages of airlock-server's
// own outcomes, none of which starts a server: the table of internal/cli
// (exit.go), as airlock's commands use it.
func TestExitCodes(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		code       int
		wantStdout string // substring; "" means stdout must be empty
		wantStderr []string
	}{
		{"version", []string{"version"}, 0, "airlock-server ", nil},
		{"help", []string{"help"}, 0, "usage:", nil},
		{"no-command", nil, 2, "", []string{"usage:"}},
		{"unknown-command", []string{"run"}, 2, "", []string{`unknown command "run"`, "usage:"}},
		{"serve-unknown-flag", []string{"serve", "--no-such-flag"}, 2, "", []string{"no-such-flag"}},
		{"mcp-unknown-flag", []string{"mcp", "--no-such-flag"}, 2, "", []string{"no-such-flag"}},
		{"export-unknown-flag", []string{"export", "k8s", "--no-such-flag"}, 2, "", []string{"no-such-flag"}},
		{"export-no-target", []string{"export"}, 2, "", []string{"usage: airlock export oci|k8s"}},
		{"export-oci", []string{"export", "oci", "--out", "x", "--", "/bin/true"}, 2, "", []string{"run airlock export oci"}},
		{"export-no-out", []string{"export", "k8s", "--image", "i", "--", "/bin/true"}, 1, "", []string{"airlock export k8s: --out DIR is required"}},
		{"mcp-missing-policy", []string{"mcp", "--policy", "/nonexistent/p.yaml"}, 1, "", []string{"/nonexistent/p.yaml"}},
		{"serve-missing-ceiling", []string{"serve", "--ceiling", "/nonexistent/c.yaml", "--insecure-no-auth"}, 1, "", []string{"/nonexistent/c.yaml"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := airlockServer(t, t.TempDir(), tt.args...)
			if r.code != tt.code {
				t.Errorf("airlock-server %q: exit %d, want %d\nstderr:\n%s", tt.args, r.code, tt.code, r.stderr)
			}
			if tt.wantStdout == "" && r.stdout != "" {
				t.Errorf("airlock-server %q: stdout = %q, want nothing", tt.args, r.stdout)
			}
			if !strings.Contains(r.stdout, tt.wantStdout) {
				t.Errorf("airlock-server %q: stdout = %q, want it to contain %q", tt.args, r.stdout, tt.wantStdout)
			}
			for _, want := range tt.wantStderr {
				if !strings.Contains(r.stderr, want) {
					t.Errorf("airlock-server %q: stderr = %q, want it to contain %q", tt.args, r.stderr, want)
				}
			}
		})
	}
}

// TestHelpExitsZero: -h and --help print the usage and succeed, for every
// command; the usage of each names it as the user typed it through
// airlock.
func TestHelpExitsZero(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--help"}, "airlock-server serve"},
		{[]string{"serve", "--help"}, "usage: airlock serve"},
		{[]string{"mcp", "-h"}, "usage: airlock mcp"},
		{[]string{"export", "--help"}, "usage: airlock export oci|k8s"},
		{[]string{"export", "k8s", "--help"}, "-proxy-cluster-ip"},
	} {
		if r := airlockServer(t, dir, tt.args...); r.code != 0 || !strings.Contains(r.stdout+r.stderr, tt.want) {
			t.Errorf("airlock-server %v: exit %d, output %q; want 0 and %q", tt.args, r.code, r.stdout+r.stderr, tt.want)
		}
	}
}
