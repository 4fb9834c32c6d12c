//go:build linux

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/airtest"
)

// fakeServerEnv makes this test binary, copied next to airlock as its
// airlock-server, report what it was given instead of running the tests:
// "echo" prints its pid and arguments, copies stdin to stdout and exits
// 7; "signal" says it is ready, waits for SIGTERM and exits 42.
const fakeServerEnv = "AIRLOCK_TEST_FAKE_SERVER"

// fakeReport is what the fake airlock-server prints first.
type fakeReport struct {
	Pid  int
	Args []string
}

func fakeServer(mode string) int {
	json.NewEncoder(os.Stdout).Encode(fakeReport{Pid: os.Getpid(), Args: os.Args}) // a lost line fails the test that reads it
	switch mode {
	case "echo":
		io.Copy(os.Stdout, os.Stdin) // what arrived is what the test compares
		return 7
	case "signal":
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM)
		fmt.Println("ready")
		<-ch
		return 42
	}
	return 3
}

// copyFile copies the file at src to dst with mode.
func copyFile(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dst, mode); err != nil { // past the umask
		t.Fatal(err)
	}
}

// withFakeServer returns a copy of airlock in a new folder, next to this
// test binary as its airlock-server.
func withFakeServer(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	copyFile(t, airlockBin, filepath.Join(dir, "airlock"), 0o755)
	copyFile(t, self, filepath.Join(dir, "airlock-server"), 0o755)
	return filepath.Join(dir, "airlock")
}

// TestRunServerReplacesAirlock: `airlock mcp` becomes airlock-server in
// place: the same pid, the same arguments after the checked file's own
// path, stdin and stdout passed through, and its exit status is airlock's.
func TestRunServerReplacesAirlock(t *testing.T) {
	bin := withFakeServer(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "mcp", "--policy", "p.yaml", "--", "a b")
	cmd.Env = append(os.Environ(), fakeServerEnv+"=echo")
	cmd.Stdin = strings.NewReader("over stdio\n")
	out, err := cmd.Output()
	if cmd.ProcessState == nil {
		t.Fatalf("start airlock: %v", err)
	}
	if code := cmd.ProcessState.ExitCode(); code != 7 {
		t.Fatalf("airlock mcp through the fake airlock-server: exit %d (%v), want its 7\n%s", code, err, out)
	}
	first, rest, _ := strings.Cut(string(out), "\n")
	var rep fakeReport
	if err := json.Unmarshal([]byte(first), &rep); err != nil {
		t.Fatalf("fake airlock-server printed %q: %v", out, err)
	}
	if rep.Pid != cmd.Process.Pid {
		t.Errorf("airlock-server ran as pid %d, airlock was pid %d: want the same process", rep.Pid, cmd.Process.Pid)
	}
	if want := []string{filepath.Join(filepath.Dir(bin), "airlock-server"), "mcp", "--policy", "p.yaml", "--", "a b"}; !slices.Equal(rep.Args, want) {
		t.Errorf("airlock-server's arguments = %q, want %q", rep.Args, want)
	}
	if rest != "over stdio\n" {
		t.Errorf("airlock-server's stdout after the report = %q, want stdin passed through", rest)
	}
}

// TestRunServerSignals: a signal sent to airlock's pid reaches
// airlock-server, which decides the exit status.
func TestRunServerSignals(t *testing.T) {
	bin := withFakeServer(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "serve")
	cmd.Env = append(os.Environ(), fakeServerEnv+"=signal")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	for sc.Scan() && sc.Text() != "ready" {
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	cmd.Wait() // the exit status is the check
	if code := cmd.ProcessState.ExitCode(); code != 42 {
		t.Errorf("airlock serve after SIGTERM: exit %d, want airlock-server's 42", code)
	}
}

// TestRunServerHelp: `airlock serve --help` and the others print what
// airlock-server prints, with its exit status; without airlock-server
// next to airlock they print no usage at all.
func TestRunServerHelp(t *testing.T) {
	server := filepath.Join(filepath.Dir(airlockBin), "airlock-server")
	alone := filepath.Join(t.TempDir(), "airlock")
	copyFile(t, airlockBin, alone, 0o755)
	for _, args := range [][]string{{"serve", "--help"}, {"mcp", "-h"}, {"export", "k8s", "--help"}, {"controller", "--help"}, {"serve", "--no-such-flag"}} {
		server := server
		if args[0] == "controller" {
			server = filepath.Join(filepath.Dir(airlockBin), "airlock-controller")
		}
		want := runBin(t, server, args...)
		if got := runBin(t, airlockBin, args...); got != want {
			t.Errorf("airlock %q = %+v\nwant airlock-server's %+v", args, got, want)
		}
		if !strings.Contains(want.stdout+want.stderr, "usage: airlock ") {
			t.Errorf("airlock-server %q prints no usage naming airlock: %+v", args, want)
		}
		if r := runBin(t, alone, args...); r.code != 1 || strings.Contains(r.stdout+r.stderr, "usage:") {
			t.Errorf("airlock %q without airlock-server = %+v, want exit 1 and no usage", args, r)
		}
	}
	// Through a symlink, airlock-server is looked for next to the binary.
	link := filepath.Join(t.TempDir(), "airlock")
	if err := os.Symlink(airlockBin, link); err != nil {
		t.Fatal(err)
	}
	if r := runBin(t, link, "serve", "--help"); r.code != 0 || !strings.Contains(r.stdout+r.stderr, "usage: airlock serve") {
		t.Errorf("airlock serve --help through a symlink to airlock = %+v, want airlock-server's usage", r)
	}
}

// runBin runs bin with args and returns what it did.
func runBin(t *testing.T, bin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); ctx.Err() != nil || cmd.ProcessState == nil {
		t.Fatalf("%s %q: %v", bin, args, err)
	}
	return result{stdout: stdout.String(), stderr: stderr.String(), code: cmd.ProcessState.ExitCode()}
}

// TestRunServerRefuses: airlock runs only an airlock-server it can trust,
// and otherwise fails with exit 1 and one line that names the command, the
// file it looked at, why it refused it and how to build it; nothing else
// runs (the fake server would print its report).
func TestRunServerRefuses(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	fake := func(mode os.FileMode) func(t *testing.T, p string) {
		return func(t *testing.T, p string) { copyFile(t, self, p, mode) }
	}
	tests := []struct {
		name  string
		args  []string
		setup func(t *testing.T, path string)
		root  bool
		why   string
	}{
		{"missing", []string{"serve", "--help"}, func(*testing.T, string) {}, false, "does not exist"},
		{"group-writable", []string{"mcp"}, fake(0o775), false, "is writable by group or others (mode 0775)"},
		{"other-writable", []string{"export", "k8s", "--help"}, fake(0o757), false, "is writable by group or others (mode 0757)"},
		{"not-executable", []string{"serve"}, fake(0o644), false, "is not executable (mode 0644)"},
		{"controller-missing", []string{"controller", "--help"}, func(*testing.T, string) {}, false, "does not exist"},
		{"controller-group-writable", []string{"controller"}, fake(0o775), false, "is writable by group or others (mode 0775)"},
		{"symlink", []string{"serve"}, func(t *testing.T, p string) {
			copyFile(t, self, p+".real", 0o755)
			if err := os.Symlink(p+".real", p); err != nil {
				t.Fatal(err)
			}
		}, false, "is a symbolic link"},
		{"directory", []string{"mcp"}, func(t *testing.T, p string) {
			if err := os.Mkdir(p, 0o755); err != nil {
				t.Fatal(err)
			}
		}, false, "is not a regular file"},
		{"other-owner", []string{"serve"}, func(t *testing.T, p string) {
			fake(0o755)(t, p)
			if err := os.Chown(p, 65534, 65534); err != nil { // nobody
				t.Fatal(err)
			}
		}, true, "is owned by uid 65534, neither root nor the owner of"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.root {
				airtest.RequireRoot(t)
			}
			dir := t.TempDir()
			prog := "airlock-server"
			if tt.args[0] == "controller" {
				prog = "airlock-controller"
			}
			bin, server := filepath.Join(dir, "airlock"), filepath.Join(dir, prog)
			copyFile(t, airlockBin, bin, 0o755)
			tt.setup(t, server)
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, tt.args...)
			cmd.Env = append(os.Environ(), fakeServerEnv+"=echo")
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); cmd.ProcessState == nil {
				t.Fatalf("start airlock: %v", err)
			}
			if code := cmd.ProcessState.ExitCode(); code != 1 || stdout.Len() > 0 {
				t.Fatalf("airlock %q: exit %d, stdout %q; want 1 and nothing run\nstderr: %s", tt.args, code, stdout.String(), stderr.String())
			}
			command := strings.Join(tt.args[:1+btoi(tt.args[0] == "export")], " ")
			msg := stderr.String()
			if strings.Count(msg, "\n") != 1 {
				t.Errorf("the refusal is not one line: %q", msg)
			}
			for _, want := range []string{
				"airlock " + command + ": this command is in " + prog,
				server + " " + tt.why,
				"go build -o " + dir + " ./cmd/" + prog,
				"go build -o " + dir + " ./cmd/...",
			} {
				if !strings.Contains(msg, want) {
					t.Errorf("airlock %q: stderr = %q, want it to contain %q", tt.args, msg, want)
				}
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
