package sandbox_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/internal/enforce/fsaudit"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// TestFSDenialsReported: a read outside the grants that reaches Landlock
// (the path exists inside the sandbox but is not granted) is itemized in
// the report with the grant that would allow it.
func TestFSDenialsReported(t *testing.T) {
	requireSandbox(t)
	airtest.RequireRoot(t)
	if err := fsaudit.Available(); err != nil {
		airtest.SkipOrFail(t, "Landlock audit records unavailable: %v", err)
	}
	p, err := policy.New(policy.Spec{Budget: spec20s()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// "/" exists inside but is not readable: listing it is a Landlock denial.
	rep, err := (&sandbox.Cmd{Config: sandbox.Config{Policy: p, FSAudit: true}, Args: []string{"/usr/bin/python3", "-c", "import os\ntry:\n    os.listdir('/')\nexcept OSError as e:\n    print('denied', e.errno)"}, CommandIsGranted: true}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantExit(t, rep, 0)
	found := false
	for _, d := range rep.Denials {
		if d.Layer == "fs" && d.Target == "/" && d.Rule == "fs_read" {
			found = true
		}
	}
	if !found {
		t.Fatalf("no fs denial for / in %+v (fs_denials: %q)", rep.Denials, rep.Enforcement.FSDenials)
	}
	// No policy may grant "/": the report must not suggest it.
	if rep.Operator != nil {
		for _, o := range rep.Operator.Suggestions {
			if o.Target == "/" {
				t.Errorf("the report suggests %q for /, which policy.Parse refuses", o.Suggestion)
			}
		}
	}
}

func TestFSDenialsOffSaysSo(t *testing.T) {
	requireSandbox(t)
	rep := run(t, policy.Spec{}, "/bin/true")
	if !strings.HasPrefix(rep.Enforcement.FSDenials, "off") {
		t.Fatalf("fs_denials = %q, want it to say reporting is off", rep.Enforcement.FSDenials)
	}
}

// TestSessionFSDenialsEveryExec: in a session under FSAudit, each exec's
// report itemizes the reads the kernel refused it, though the sandbox
// (its Landlock domain) lives on, and an exec that repeats an earlier
// exec's denial has it in its own report too.
func TestSessionFSDenialsEveryExec(t *testing.T) {
	requireSandbox(t)
	airtest.RequireRoot(t)
	if err := fsaudit.Available(); err != nil {
		airtest.SkipOrFail(t, "Landlock audit records unavailable: %v", err)
	}
	// Granting one file per folder makes each folder exist inside, but
	// not readable: listing it is a Landlock denial with its own target.
	// Not below /tmp, which is the sandbox's own scratch space.
	base, err := os.MkdirTemp("/var/tmp", "airlock-fsaudit-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	var dirs, files []string
	for i := range 4 {
		d := filepath.Join(base, strconv.Itoa(i))
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(d, "granted.txt")
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		dirs, files = append(dirs, d), append(files, f)
	}
	p, err := policy.New(policy.Spec{FSRead: files, AllowedTools: []string{"python3"}, Budget: spec20s()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := sandbox.NewSession(ctx, sandbox.Config{Policy: p, FSAudit: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, d := range append(dirs, dirs[0]) {
		rep, err := s.Exec(ctx, sandbox.ExecRequest{Args: []string{"python3", "-c", "import os, sys; os.listdir(sys.argv[1])", d}})
		if err != nil {
			t.Fatal(err)
		}
		if rep.ExitCode == 0 {
			t.Fatalf("listing %s succeeded inside the sandbox", d)
		}
		found := false
		for _, dn := range rep.Denials {
			found = found || (dn.Layer == "fs" && dn.Target == d && dn.Rule == "fs_read")
		}
		if !found {
			t.Errorf("the report of the exec that listed %s does not itemize it: %+v", d, rep.Denials)
		}
	}
}
