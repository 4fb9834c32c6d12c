package sandbox_test

import (
	"context"
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
