package sandbox_test

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// TestRunEndsWithItsCommand: a run ends when its command exits, as a
// container ends with its pid 1: the sandbox is killed before its output
// is drained, so a background process that keeps the command's stdout
// open neither holds the run nor costs it any output. The command writes
// far more than a pipe holds (the supervisor reads while it runs) and
// leaves a setsid'd sleep holding stdout; every line arrives, in order,
// the exit status is the command's, and the sleep is dead afterwards.
func TestRunEndsWithItsCommand(t *testing.T) {
	requireSandbox(t)
	for _, bin := range []string{"/bin/sh", "/usr/bin/seq", "/usr/bin/setsid", "/usr/bin/sleep"} {
		airtest.RequireBinary(t, bin)
	}
	mark := "airlock-endtest-" + strconv.Itoa(os.Getpid())
	spec := policy.Spec{
		AllowedTools: []string{"seq", "setsid", "sleep"},
		Env:          []string{"AIRLOCK_ENDTEST=" + mark},
		Budget:       budget.Limits{Wall: 60 * time.Second},
	}
	if os.Geteuid() != 0 {
		spec.AllowDowngrade = []string{"max_memory", "max_pids", "max_cpu"}
	}
	p, err := policy.New(spec)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const lines = 50000 // about 290 KB: the pipe fills many times
	var out, errOut bytes.Buffer
	cmd := &sandbox.Cmd{Config: sandbox.Config{Policy: p}, CommandIsGranted: true, Stdout: &out, Stderr: &errOut,
		Args: []string{"/bin/sh", "-c", `setsid sleep 1000 & seq 1 ` + strconv.Itoa(lines) + `; exit 3`}}
	rep, err := cmd.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.ExitCode != 3 || rep.HaltedBy != nil {
		t.Fatalf("exit %d, halted_by %v, error %q, stderr %q: want the command's exit 3", rep.ExitCode, rep.HaltedBy, rep.Error, errOut.String())
	}
	var want bytes.Buffer
	for i := 1; i <= lines; i++ {
		want.WriteString(strconv.Itoa(i) + "\n")
	}
	if !bytes.Equal(out.Bytes(), want.Bytes()) {
		t.Fatalf("stdout: %d bytes, want %d (the seq output whole and in order)", out.Len(), want.Len())
	}
	if alive := survivors(t, mark, time.Now().Add(10*time.Second)); len(alive) > 0 {
		t.Fatalf("the background sleep outlived the run: %v", alive)
	}
}
