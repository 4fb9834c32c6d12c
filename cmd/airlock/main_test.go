//go:build linux

// The run tests need internal/airtest's Linux probes; the CLI as a whole
// only does something useful on Linux.

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/policy"
)

// airlockBin is the binary built once by TestMain, with airlock-init and
// airlock-server next to it.
var airlockBin string

func TestMain(m *testing.M) {
	if mode := os.Getenv(fakeServerEnv); mode != "" {
		os.Exit(fakeServer(mode)) // this test binary, run by airlock as its airlock-server
	}
	os.Exit(buildAndRun(m))
}

func buildAndRun(m *testing.M) int {
	dir, err := os.MkdirTemp("", "airlock-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	airlockBin = filepath.Join(dir, "airlock")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// go test puts $GOROOT/bin first on PATH.
	out, err := exec.CommandContext(ctx, "go", "build", "-o", airlockBin, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "go build -o %s .: %v\n%s", airlockBin, err, out)
		return 1
	}
	// Installed as documented: the small init and airlock-server next to
	// the CLI.
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", dir, "../airlock-init", "../airlock-server", "../airlock-controller").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build -o %s ../airlock-init ../airlock-server ../airlock-controller: %v\n%s", dir, err, out)
		return 1
	}
	return m.Run()
}

// rootless adds to an `airlock run` the downgrades a normal user's run
// needs (none as root): the tests of the CLI run for every user.
func rootless(args []string) []string {
	if len(args) == 0 || args[0] != "run" {
		return args
	}
	return append(append([]string{"run"}, airtest.RootlessFlags()...), args[1:]...)
}

// result is what one airlock invocation did.
type result struct {
	stdout, stderr string
	code           int
}

// airlock runs the built binary in dir ("" for the package directory)
// with a bounded time and returns its output and exit status.
func airlock(t *testing.T, dir string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, airlockBin, rootless(args)...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("airlock %q: did not finish within 60s\nstdout:\n%s\nstderr:\n%s", args, r.stdout, r.stderr)
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("airlock %q: %v", args, err)
	}
	return r
}

func writeFile(t *testing.T, dir, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestPolicyCheck drives `airlock policy check` over broken, valid and
// missing files.
func TestPolicyCheck(t *testing.T) {
	dir := t.TempDir()
	// Two problems: an unknown key at 3:1 and a bad duration at 5:13.
	writeFile(t, dir, "bad.yaml", "version: 1\nfs_read: [./data]\ncolour: blue\nbudget:\n  max_wall: 10 parsecs\n")
	writeFile(t, dir, "ok.yaml", "version: 1 # grants nothing\nfs_read: [./data]\n")
	if err := os.Mkdir(filepath.Join(dir, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Valid files that fail on this host: what a user's typo does.
	writeFile(t, dir, "notexec", "#!/bin/sh\n") // mode 0644: not executable
	writeFile(t, dir, "typo.yaml", "version: 1\nfs_read: [./data, ./nodir]\nallowed_tools: [sh, pyhton3, "+filepath.Join(dir, "notexec")+"]\n")
	if err := os.Symlink("data", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "link.yaml", "version: 1\nfs_write: [./link]\n")

	t.Run("invalid", func(t *testing.T) {
		r := airlock(t, dir, "policy", "check", "bad.yaml")
		if r.code != 1 {
			t.Errorf("policy check bad.yaml: exit %d, want 1\nstderr:\n%s", r.code, r.stderr)
		}
		if r.stdout != "" {
			t.Errorf("policy check bad.yaml: stdout = %q, want nothing", r.stdout)
		}
		lineRE := regexp.MustCompile(`^bad\.yaml:(\d+):(\d+): (.+)$`)
		var got []string
		for _, line := range strings.Split(strings.TrimRight(r.stderr, "\n"), "\n") {
			m := lineRE.FindStringSubmatch(line)
			if m == nil {
				t.Errorf("stderr line %q is not FILE:LINE:COL: message", line)
				continue
			}
			got = append(got, m[1]+":"+m[2])
			switch m[1] + ":" + m[2] {
			case "3:1":
				if !strings.Contains(m[3], "colour") {
					t.Errorf("error at 3:1 = %q, want it to name the key colour", m[3])
				}
			case "5:13":
				if !strings.Contains(m[3], "max_wall") || !strings.Contains(m[3], "10 parsecs") {
					t.Errorf("error at 5:13 = %q, want it to name max_wall and the value", m[3])
				}
			}
		}
		if want := []string{"3:1", "5:13"}; !slices.Equal(got, want) {
			t.Errorf("policy check bad.yaml: error positions = %v, want %v\nstderr:\n%s", got, want, r.stderr)
		}
	})

	t.Run("valid", func(t *testing.T) {
		r := airlock(t, dir, "policy", "check", "ok.yaml")
		if r.code != 0 || r.stderr != "" {
			t.Fatalf("policy check ok.yaml: exit %d, stderr %q; want 0 and nothing", r.code, r.stderr)
		}
		lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
		if len(lines) != 2 || !strings.HasPrefix(lines[0], "ok.yaml: ") || !strings.HasPrefix(lines[1], "ok.yaml: this host: ") {
			t.Errorf("policy check ok.yaml: stdout = %q, want the file's line and the host's, each starting with \"ok.yaml: \"", r.stdout)
		}
		if !strings.Contains(r.stdout, "1 fs_read") || !strings.Contains(r.stdout, "host checks") {
			t.Errorf("policy check ok.yaml: summary %q does not count the fs_read grant or say which checks are the host's", r.stdout)
		}
		r = airlock(t, dir, "policy", "check", "--no-host", "ok.yaml")
		if r.code != 0 || strings.Count(r.stdout, "\n") != 1 || strings.Contains(r.stdout, "this host") {
			t.Errorf("policy check --no-host ok.yaml: exit %d, stdout %q; want 0 and the file's line only", r.code, r.stdout)
		}
	})

	// A misspelled tool and a missing folder: the file is valid, the
	// host would refuse the run. Each problem is named, host-specific.
	t.Run("host", func(t *testing.T) {
		r := airlock(t, dir, "policy", "check", "typo.yaml")
		if r.code != 1 || r.stdout != "" {
			t.Fatalf("policy check typo.yaml: exit %d, stdout %q; want 1 and nothing\nstderr:\n%s", r.code, r.stdout, r.stderr)
		}
		for _, want := range []string{`typo.yaml: host: allowed_tools: "pyhton3" is not an executable file on `, `typo.yaml: host: allowed_tools: "` + filepath.Join(dir, "notexec") + `" is not an executable file`, `typo.yaml: host: fs_read "` + filepath.Join(dir, "nodir") + `": no such file or directory`, "--no-host"} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("policy check typo.yaml: stderr lacks %q:\n%s", want, r.stderr)
			}
		}
		if strings.Contains(r.stderr, `"sh"`) || strings.Contains(r.stderr, `"`+filepath.Join(dir, "data")+`"`) {
			t.Errorf("policy check typo.yaml: stderr names a tool or path that exists:\n%s", r.stderr)
		}
		r = airlock(t, dir, "policy", "check", "link.yaml")
		if r.code != 1 || !strings.Contains(r.stderr, "symlink") || !strings.Contains(r.stderr, "real path") {
			t.Errorf("policy check link.yaml: exit %d, stderr %q; want 1 and the symlink named", r.code, r.stderr)
		}
		if r := airlock(t, dir, "policy", "check", "--no-host", "typo.yaml"); r.code != 0 {
			t.Errorf("policy check --no-host typo.yaml: exit %d, want 0 (the file is valid)\n%s", r.code, r.stderr)
		}
	})

	// --help is a request, not a file name.
	for _, args := range [][]string{{"policy", "check", "--help"}, {"policy", "check", "-h"}} {
		if r := airlock(t, dir, args...); r.code != 0 || !strings.Contains(r.stdout, "usage: airlock policy check") {
			t.Errorf("airlock %q: exit %d, stdout %q, stderr %q; want 0 and the usage", args, r.code, r.stdout, r.stderr)
		}
	}

	t.Run("missing", func(t *testing.T) {
		r := airlock(t, dir, "policy", "check", "nope.yaml")
		if r.code == 0 {
			t.Errorf("policy check nope.yaml: exit 0, want non-zero")
		}
		if !strings.Contains(r.stderr, "nope.yaml") || !strings.Contains(r.stderr, "no such file") {
			t.Errorf("policy check nope.yaml: stderr = %q, want the file name and \"no such file\"", r.stderr)
		}
	})

	usage := []struct {
		name string
		args []string
	}{
		{"no-subcommand", []string{"policy"}},
		{"no-file", []string{"policy", "check"}},
		{"two-files", []string{"policy", "check", "ok.yaml", "bad.yaml"}},
		{"unknown-subcommand", []string{"policy", "lint", "ok.yaml"}},
	}
	for _, tt := range usage {
		t.Run(tt.name, func(t *testing.T) {
			if r := airlock(t, dir, tt.args...); r.code != 2 || !strings.Contains(r.stderr, "usage:") {
				t.Errorf("airlock %q: exit %d, stderr %q; want 2 and a usage message", tt.args, r.code, r.stderr)
			}
		})
	}
}

// TestExplainExamples checks that `airlock explain` accepts every shipped
// example and shows each of its grants. Grants naming folders that do
// not exist here (./data, /work/out) must not stop it.
func TestExplainExamples(t *testing.T) {
	examples, err := filepath.Glob("../../examples/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(examples) == 0 {
		t.Fatal("no examples/*.yaml found")
	}
	for _, file := range examples {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".yaml"), func(t *testing.T) {
			abs, err := filepath.Abs(file)
			if err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(abs)
			if err != nil {
				t.Fatal(err)
			}
			p, err := policy.Parse(data, policy.ParseOptions{File: abs, BaseDir: filepath.Dir(abs)})
			if err != nil {
				t.Fatalf("policy.Parse(%s): %v", file, err)
			}
			// explain resolves allowed_tools on the host to plan their
			// mounts, so a missing interpreter is an environment problem.
			for _, tool := range p.AllowedTools() {
				if !toolInstalled(tool) {
					airtest.SkipOrFail(t, "allowed tool %q of %s is not installed on this host", tool, file)
				}
			}

			r := airlock(t, "", "explain", "--policy", abs)
			if r.code != 0 {
				t.Fatalf("explain --policy %s: exit %d\nstderr:\n%s", file, r.code, r.stderr)
			}
			lines := strings.Split(r.stdout, "\n")
			hasLine := func(parts ...string) bool {
				return slices.ContainsFunc(lines, func(l string) bool {
					for _, part := range parts {
						if !strings.Contains(l, part) {
							return false
						}
					}
					return true
				})
			}
			if want := "policy:   " + p.Summary(); lines[0] != want {
				t.Errorf("explain first line = %q, want %q", lines[0], want)
			}
			for _, path := range p.FSRead() {
				if !hasLine(" "+path+" ", "[fs_read]") {
					t.Errorf("explain does not show fs_read %s", path)
				}
			}
			for _, path := range p.FSWrite() {
				if !hasLine(" "+path+" ", "[fs_write]") {
					t.Errorf("explain does not show fs_write %s", path)
				}
			}
			for _, tool := range p.AllowedTools() {
				name := tool
				if !filepath.IsAbs(tool) {
					name = "/" + tool // as the tail of its resolved path
				}
				if !hasLine(name+" ", "[allowed_tools]") {
					t.Errorf("explain does not show allowed tool %s", tool)
				}
			}
			for _, env := range p.Env() {
				want := env.Name + "="
				if env.HasValue {
					want += env.Value
				}
				if !hasLine("  " + want) {
					t.Errorf("explain does not show env %s", want)
				}
			}
			for _, host := range p.NetHosts() {
				if !hasLine(host.String()) {
					t.Errorf("explain does not show net_hosts entry %s", host)
				}
			}
		})
	}
}

// toolInstalled reports whether an allowed_tools entry names an
// executable on the host, on the sandbox's default PATH.
func toolInstalled(tool string) bool {
	if filepath.IsAbs(tool) {
		_, err := os.Stat(tool)
		return err == nil
	}
	for _, dir := range []string{"/usr/local/bin", "/usr/bin", "/bin"} {
		if fi, err := os.Stat(filepath.Join(dir, tool)); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return true
		}
	}
	return false
}

// TestExitCodes checks the exit status and messages of the CLI's own
// outcomes, none of which starts a sandbox.
func TestExitCodes(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		code       int
		wantStdout string // substring; "" means stdout must be empty
		wantStderr []string
	}{
		{"version", []string{"version"}, 0, "airlock ", nil},
		{"help", []string{"help"}, 0, "usage:", nil},
		{"no-command", nil, 2, "", []string{"usage:"}},
		{"unknown-command", []string{"frobnicate"}, 2, "", []string{`unknown command "frobnicate"`, "usage:"}},
		{"run-without-command", []string{"run"}, 125, "", []string{"no command given"}},
		{"run-only-dashes", []string{"run", "--"}, 125, "", []string{"no command given"}},
		// The command would print "started" if it ran.
		{"run-bad-max-wall", []string{"run", "--max-wall", "bogus", "--", "/bin/sh", "-c", "echo started"}, 125, "", []string{"--max-wall", "bogus", "nothing was started"}},
		{"run-bad-max-memory", []string{"run", "--max-memory", "lots", "--", "/bin/sh", "-c", "echo started"}, 125, "", []string{"--max-memory", "nothing was started"}},
		{"run-unknown-flag", []string{"run", "--no-such-flag", "--", "/bin/sh", "-c", "echo started"}, 125, "", []string{"no-such-flag"}},
		{"run-missing-policy", []string{"run", "--policy", "/nonexistent/p.yaml", "--", "/bin/sh", "-c", "echo started"}, 125, "", []string{"/nonexistent/p.yaml", "nothing was started"}},
		{"explain-unknown-flag", []string{"explain", "--no-such-flag"}, 2, "", []string{"no-such-flag"}},
		// One table (exit.go): every other subcommand exits 2 on bad flags
		// or arguments and 1 when it cannot do its job.
		{"doctor-unknown-flag", []string{"doctor", "--no-such-flag"}, 2, "", []string{"no-such-flag"}},
		{"export-unknown-flag", []string{"export", "oci", "--no-such-flag"}, 2, "", []string{"no-such-flag"}},
		{"serve-unknown-flag", []string{"serve", "--no-such-flag"}, 2, "", []string{"no-such-flag"}},
		{"mcp-unknown-flag", []string{"mcp", "--no-such-flag"}, 2, "", []string{"no-such-flag"}},
		{"egress-proxy-unknown-flag", []string{"egress-proxy", "--no-such-flag"}, 2, "", []string{"no-such-flag"}},
		{"policy-without-file", []string{"policy", "check"}, 2, "", []string{"check FILE"}},
		{"mcp-missing-policy", []string{"mcp", "--policy", "/nonexistent/p.yaml"}, 1, "", []string{"/nonexistent/p.yaml"}},
		{"serve-missing-ceiling", []string{"serve", "--ceiling", "/nonexistent/c.yaml", "--insecure-no-auth"}, 1, "", []string{"/nonexistent/c.yaml"}},
		{"egress-proxy-missing-config", []string{"egress-proxy", "--config", "/nonexistent/p.json"}, 1, "", []string{"/nonexistent/p.json"}},
		{"policy-check-missing", []string{"policy", "check", "/nonexistent/p.yaml"}, 1, "", []string{"/nonexistent/p.yaml", "no such file"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := airlock(t, t.TempDir(), tt.args...)
			if r.code != tt.code {
				t.Errorf("airlock %q: exit %d, want %d\nstderr:\n%s", tt.args, r.code, tt.code, r.stderr)
			}
			if tt.wantStdout == "" && r.stdout != "" {
				t.Errorf("airlock %q: stdout = %q, want nothing", tt.args, r.stdout)
			}
			if !strings.Contains(r.stdout, tt.wantStdout) {
				t.Errorf("airlock %q: stdout = %q, want it to contain %q", tt.args, r.stdout, tt.wantStdout)
			}
			for _, want := range tt.wantStderr {
				if !strings.Contains(r.stderr, want) {
					t.Errorf("airlock %q: stderr = %q, want it to contain %q", tt.args, r.stderr, want)
				}
			}
		})
	}
}

// TestRunJSON starts real sandboxes and checks the JSON report and that
// airlock exits with the command's status.
func TestRunJSON(t *testing.T) {
	airtest.RequireUserNS(t)
	airtest.RequireLandlockABI(t, 4)
	tests := []struct {
		name   string
		script string
		code   int
		stdout string
	}{
		{"echo", "echo hi", 0, "hi\n"},
		{"exit-3", "exit 3", 3, ""},
		{"html", "echo 'a -> <b> & c'", 0, "a -> <b> & c\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := []string{"run", "--json", "--", "/bin/sh", "-c", tt.script}
			r := airlock(t, t.TempDir(), args...)
			if r.code != tt.code {
				t.Errorf("airlock %q: exit %d, want %d\nstderr:\n%s", args, r.code, tt.code, r.stderr)
			}
			if strings.Contains(r.stdout, `\u003e`) || strings.Contains(r.stdout, `\u0026`) {
				t.Errorf("the JSON for people escapes HTML characters:\n%s", r.stdout)
			}
			var rep map[string]any
			if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
				t.Fatalf("airlock %q: report is not JSON: %v\nstdout:\n%s\nstderr:\n%s", args, err, r.stdout, r.stderr)
			}
			if got, ok := rep["exit_code"].(float64); !ok || got != float64(tt.code) {
				t.Errorf("report exit_code = %v, want %d", rep["exit_code"], tt.code)
			}
			if got := rep["stdout"]; got != tt.stdout {
				t.Errorf("report stdout = %q, want %q", got, tt.stdout)
			}
			if got := rep["halted_by"]; got != nil {
				t.Errorf("report halted_by = %v, want null", got)
			}
		})
	}
}

// TestExplainWithoutNamespaces: explain --isolation landlock prints the
// plan of the backend without namespaces (no mount steps, the scratch
// folder, connect answered by the supervisor), and refuses what Landlock
// cannot express, naming it.
func TestExplainWithoutNamespaces(t *testing.T) {
	r := airlock(t, "", "explain", "--isolation", "landlock", "--net-host", "example.com", "--", "sh")
	if r.code != 0 {
		t.Fatalf("explain --isolation landlock: exit %d\n%s", r.code, r.stderr)
	}
	for _, want := range []string{"no namespaces (the landlock backend)", "airlock-scratch-RANDOM", "the supervisor connects the egress proxy", "answered by the supervisor"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("explain output lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "root filesystem (mount namespace") {
		t.Errorf("explain without namespaces prints mount steps:\n%s", r.stdout)
	}
	dir := t.TempDir()
	r = airlock(t, "", "explain", "--isolation", "landlock", "--fs-read", dir, "--fs-deny", filepath.Join(dir, "secret"))
	if r.code == 0 || !strings.Contains(r.stderr, "fs_deny") {
		t.Errorf("explain of an fs_deny inside a grant without namespaces: exit %d, stderr %q; want a refusal naming fs_deny", r.code, r.stderr)
	}
	if r := airlock(t, "", "explain", "--isolation", "gvisor"); r.code != 2 {
		t.Errorf("explain --isolation gvisor: exit %d, want 2 (usage)", r.code)
	}
}

// TestExplainMicroVM: explain --isolation microvm prints the plan the
// guest applies, with fs_write folders written in place (no overlay or
// stage) and no transparent egress, under a line that says what the
// microVM adds.
func TestExplainMicroVM(t *testing.T) {
	dir := t.TempDir()
	r := airlock(t, "", "explain", "--isolation", "microvm", "--fs-write", dir, "--net-host", "example.com", "--", "sh")
	if r.code != 0 {
		t.Fatalf("explain --isolation microvm: exit %d\n%s", r.code, r.stderr)
	}
	for _, want := range []string{"microvm:  a guest kernel of its own", "egress proxy at 127.0.0.1"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("explain output lacks %q:\n%s", want, r.stdout)
		}
	}
	for _, unwanted := range []string{"overlay", "transparent:"} {
		if strings.Contains(r.stdout, unwanted) {
			t.Errorf("explain --isolation microvm prints %q:\n%s", unwanted, r.stdout)
		}
	}
}

// TestExportOCIInit: the exported bundle runs airlock's init as pid 1 with
// the deadline in its arguments and the binary in the bundle; the printed
// instructions name runc and crun, and say when the runtime cannot reach
// the bundle. --no-init says the caller must enforce the deadline.
func TestExportOCIInit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "bundle") // t.TempDir is 0700: not searchable by the mapped uid
	r := airlock(t, "", "export", "oci", "--max-wall", "7s", "--out", dir, "--", "/bin/true")
	if r.code != 0 {
		t.Fatalf("export: exit %d\n%s", r.code, r.stderr)
	}
	cfg, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Process struct{ Args []string } `json:"process"`
		Mounts  []struct {
			Destination string   `json:"destination"`
			Source      string   `json:"source"`
			Options     []string `json:"options"`
		} `json:"mounts"`
	}
	if err := json.Unmarshal(cfg, &spec); err != nil {
		t.Fatal(err)
	}
	if want := []string{"/.airlock/init", "7s", "--", "/usr/bin/true"}; !slices.Equal(spec.Process.Args, want) {
		t.Errorf("process.args = %q, want %q", spec.Process.Args, want)
	}
	bound := slices.ContainsFunc(spec.Mounts, func(m struct {
		Destination string   `json:"destination"`
		Source      string   `json:"source"`
		Options     []string `json:"options"`
	}) bool {
		return m.Destination == "/.airlock/init" && m.Source == filepath.Join(dir, "airlock-init") && slices.Contains(m.Options, "ro")
	})
	if !bound {
		t.Errorf("the init is not bound read-only from the bundle: %+v", spec.Mounts)
	}
	if fi, err := os.Stat(filepath.Join(dir, "airlock-init")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("bundle's airlock-init: %v %v", fi, err)
	}
	for _, want := range []string{"runc run --bundle " + dir, "crun run --bundle " + dir, "max_wall (7s, exit 124)", "is not searchable by uid"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("export output lacks %q:\n%s", want, r.stdout)
		}
	}
	r = airlock(t, "", "export", "oci", "--no-init", "--out", filepath.Join(t.TempDir(), "b2"), "--", "/bin/true")
	if r.code != 0 || !strings.Contains(r.stdout, "the caller must enforce the deadline") {
		t.Errorf("--no-init: exit %d, stdout %q", r.code, r.stdout)
	}
}

// TestHelpExitsZero: -h and --help print the usage and succeed, for every
// command (before: run exited 125, the others 2); a bad flag still fails.
func TestHelpExitsZero(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{{"--help"}, {"run", "--help"}, {"run", "-h"}, {"explain", "--help"}, {"serve", "--help"}, {"mcp", "--help"},
		{"doctor", "--help"}, {"export", "--help"}, {"export", "oci", "--help"}, {"export", "k8s", "--help"}, {"policy", "--help"}} {
		if r := airlock(t, dir, args...); r.code != 0 || !strings.Contains(r.stdout+r.stderr, "usage") {
			t.Errorf("airlock %v: exit %d, output %q; want 0 and the usage", args, r.code, r.stdout+r.stderr)
		}
	}
	if r := airlock(t, dir, "run", "--no-such-flag"); r.code == 0 {
		t.Error("a bad flag exited 0")
	}
}

// TestEverySubcommandHelp walks the commands airlock's own usage lists
// (so a new command is covered without editing this test) and asks each
// for -h and --help: the usage on stdout, exit 0, nothing run.
func TestEverySubcommandHelp(t *testing.T) {
	dir := t.TempDir()
	top := airlock(t, dir, "--help")
	if top.code != 0 {
		t.Fatalf("airlock --help: exit %d", top.code)
	}
	var cmds [][]string
	for _, line := range strings.Split(top.stdout, "\n") {
		f := strings.Fields(line)
		if !strings.HasPrefix(line, "  airlock ") || len(f) < 2 {
			continue // the usage's lines, not its prose
		}
		switch {
		case f[1] == "policy":
			cmds = append(cmds, []string{"policy", "check"})
		case f[1] == "export":
			cmds = append(cmds, []string{"export", "oci"}, []string{"export", "k8s"})
		default:
			cmds = append(cmds, []string{f[1]})
		}
	}
	if len(cmds) < 10 {
		t.Fatalf("found %d commands in airlock's usage, want every one:\n%s", len(cmds), top.stdout)
	}
	for _, c := range cmds {
		for _, h := range []string{"-h", "--help"} {
			args := append(append([]string{}, c...), h)
			r := airlock(t, dir, args...)
			if r.code != 0 || !strings.Contains(strings.ToLower(r.stdout), "usage") {
				t.Errorf("airlock %s: exit %d, stdout %q, stderr %q; want 0 and the usage on stdout", strings.Join(args, " "), r.code, r.stdout, r.stderr)
			}
		}
	}
}
