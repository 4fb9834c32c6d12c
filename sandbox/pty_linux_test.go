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

func TestPTY(t *testing.T) {
	requireSandbox(t)
	p, err := policy.New(policy.Spec{Budget: spec20s(), AllowDowngrade: airtest.RootlessDowngrades()})
	if err != nil {
		t.Fatal(err)
	}
	code := `import os, sys, fcntl, termios
print("tty", os.isatty(0), os.isatty(1))
try:
    fcntl.ioctl(0, termios.TIOCSTI, b"x"); print("TIOCSTI worked")
except OSError as e:
    print("TIOCSTI refused")`
	for _, pty := range []bool{false, true} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		rep, err := (&sandbox.Cmd{Config: sandbox.Config{Policy: p}, Args: []string{"/usr/bin/python3", "-c", code}, CommandIsGranted: true, PTY: pty}).Run(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		wantExit(t, rep, 0)
		want := "tty False False"
		if pty {
			want = "tty True True"
		}
		if !strings.Contains(rep.Stdout, want) || !strings.Contains(rep.Stdout, "TIOCSTI refused") {
			t.Errorf("PTY=%v: stdout = %q, want %q and TIOCSTI refused", pty, rep.Stdout, want)
		}
	}
}
