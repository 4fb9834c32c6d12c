package sandbox_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// TestRootlessRefusalNamesEveryLayer: a normal user without a delegated
// cgroup learns, in the one refusal, every layer the host cannot enforce
// and the one flag and policy line that accept them all (before: the
// refusal named max_memory; accepting it, the next run named max_pids).
// Nothing is started.
func TestRootlessRefusalNamesEveryLayer(t *testing.T) {
	airtest.RequireNonRoot(t)
	requireSandbox(t)
	p, err := policy.New(policy.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := (&sandbox.Cmd{Config: sandbox.Config{Policy: p}, Args: []string{"/bin/true"}, CommandIsGranted: true}).Run(ctx)
	var msg string
	switch {
	case err != nil:
		msg = err.Error()
	case rep.ExitCode == 125:
		msg = rep.Error
	default:
		t.Skipf("this user can enforce every limit (exit %d): a cgroup is delegated to it", rep.ExitCode)
	}
	for _, want := range []string{"max_memory", "max_pids", "max_cpu", "--allow-downgrade max_memory,max_pids,max_cpu", "allow_downgrade: [max_memory, max_pids, max_cpu]", "nothing was started"} {
		if !strings.Contains(msg, want) {
			t.Errorf("refusal lacks %q:\n%s", want, msg)
		}
	}
}
