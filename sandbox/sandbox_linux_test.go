package sandbox_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/sandbox"
)

func TestMain(m *testing.M) {
	sandbox.Init() // the re-executed sandbox init never returns
	os.Exit(m.Run())
}

// requireSandbox skips unless this host can run the sandbox at all.
func requireSandbox(t *testing.T) {
	t.Helper()
	airtest.RequireUserNS(t)
	airtest.RequireLandlockABI(t, 4)
}

// specVariant, when set, changes every spec run gives a sandbox: the
// attack tests run again in an environment (TestAttacksInEnvironment).
// Tests that set it do not run in parallel.
var specVariant func(*policy.Spec)

// run runs argv under spec with an outer deadline, so a failure of airlock
// cannot hang the test run.
func run(t *testing.T, spec policy.Spec, argv ...string) *sandbox.Report {
	t.Helper()
	if specVariant != nil {
		specVariant(&spec)
	}
	if spec.Budget.Wall == 0 {
		spec.Budget.Wall = 20 * time.Second
	}
	if os.Geteuid() != 0 {
		// Rootless: no cgroup delegation on the CI host; the policy must say so.
		spec.AllowDowngrade = append(spec.AllowDowngrade, "max_memory", "max_pids", "max_cpu")
	}
	p, err := policy.New(spec)
	if err != nil {
		t.Fatalf("policy.New: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rep, err := (&sandbox.Cmd{Config: sandbox.Config{Policy: p}, Args: argv, CommandIsGranted: true}).Run(ctx)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return rep
}

// sh runs a shell script with the tools it needs allowed.
func sh(t *testing.T, spec policy.Spec, script string, tools ...string) *sandbox.Report {
	t.Helper()
	spec.AllowedTools = append(spec.AllowedTools, tools...)
	return run(t, spec, "/bin/sh", "-c", script)
}

func py(t *testing.T, spec policy.Spec, code string) *sandbox.Report {
	t.Helper()
	airtest.RequireBinary(t, "/usr/bin/python3")
	return run(t, spec, "/usr/bin/python3", "-c", code)
}

func wantExit(t *testing.T, rep *sandbox.Report, code int) {
	t.Helper()
	if rep.ExitCode != code {
		t.Fatalf("exit code = %d, want %d\nerror: %s\nstdout:\n%s\nstderr:\n%s", rep.ExitCode, code, rep.Error, rep.Stdout, rep.Stderr)
	}
}

// gidFor is the group to give a file made for uid: uid's own number for
// the test ids root hands out, the caller's group for the caller (a
// normal user may give a file only to a group of its own, and a system
// user's group number is not always its uid).
func gidFor(uid int) int {
	if uid == os.Geteuid() {
		return os.Getegid()
	}
	return uid
}

// tree makes a temporary host tree: a secret, a granted dir, a sibling
// whose name extends the grant's, and a HOME with planted credentials.
type tree struct {
	root, work, workshop, out, secret, home string
}

func newTree(t *testing.T) tree {
	t.Helper()
	d := t.TempDir()
	tr := tree{root: d, work: filepath.Join(d, "work"), workshop: filepath.Join(d, "workshop"),
		out: filepath.Join(d, "out"), secret: filepath.Join(d, "secret.txt"), home: filepath.Join(d, "home")}
	for _, dir := range []string{tr.work, tr.workshop, tr.out, filepath.Join(tr.home, ".aws")} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		tr.secret:                                     "TOP-SECRET\n",
		filepath.Join(tr.work, "data.csv"):            "x,y\n1,2\n",
		filepath.Join(tr.workshop, "other.txt"):       "WORKSHOP-SECRET\n",
		filepath.Join(tr.home, ".aws", "credentials"): "[default]\naws_secret_access_key=AKIA-PLANTED\n",
	}
	for p, c := range files {
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return tr
}

func TestHappyPaths(t *testing.T) {
	requireSandbox(t)
	tr := newTree(t)
	spec := policy.Spec{FSRead: []string{tr.work}, FSWrite: []string{tr.out}}
	t.Run("sh", func(t *testing.T) {
		rep := sh(t, spec, "cat "+tr.work+"/data.csv > "+tr.out+"/copy.csv && echo done", "cat")
		wantExit(t, rep, 0)
		got, err := os.ReadFile(filepath.Join(tr.out, "copy.csv"))
		if err != nil || string(got) != "x,y\n1,2\n" {
			t.Fatalf("copy.csv = %q, %v", got, err)
		}
		fi, _ := os.Stat(filepath.Join(tr.out, "copy.csv"))
		if st := fileOwner(fi); st != os.Getuid() {
			t.Errorf("file written in fs_write belongs to uid %d, want the caller %d", st, os.Getuid())
		}
	})
	t.Run("python", func(t *testing.T) {
		rep := py(t, spec, `
import threading, subprocess, csv, json
rows = list(csv.reader(open("`+tr.work+`/data.csv")))
t = threading.Thread(target=lambda: None); t.start(); t.join()
open("`+tr.out+`/py.json", "w").write(json.dumps(rows))
print("ok", len(rows))`)
		wantExit(t, rep, 0)
		if !strings.Contains(rep.Stdout, "ok 2") {
			t.Fatalf("stdout = %q", rep.Stdout)
		}
	})
	t.Run("exit-code-passes-through", func(t *testing.T) {
		wantExit(t, sh(t, spec, "exit 7"), 7)
	})
	t.Run("signal-is-128-plus-n", func(t *testing.T) {
		rep := sh(t, spec, "kill -9 $$")
		wantExit(t, rep, 128+9)
		if rep.Signal == nil || *rep.Signal != 9 {
			t.Fatalf("signal = %v, want 9", rep.Signal)
		}
	})
	t.Run("not-found-is-127", func(t *testing.T) {
		wantExit(t, run(t, spec, "/nonexistent/tool"), 127)
	})
}
