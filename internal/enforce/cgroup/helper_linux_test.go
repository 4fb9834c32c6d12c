package cgroup_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"testing"
	"time"
)

// helperEnv selects a helper mode when the test binary re-executes itself.
const helperEnv = "AIRLOCK_CGROUP_HELPER"

// helperLife bounds every helper's life, so that a broken test cannot leave
// processes running for long even if nothing kills them.
const helperLife = 2 * time.Minute

// helpers are the modes the test binary runs as a child. Each waits for a
// line on stdin ("go") before doing anything, so that the test can place it
// in every hierarchy first.
var helpers = map[string]func() error{
	"alloc":   helperAlloc,
	"spin":    helperSpin,
	"tree":    helperTree,
	"daemon":  helperDaemon,
	"idle":    helperIdle,
	"sleeper": helperIdle,
}

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		fn, ok := helpers[mode]
		if !ok {
			fmt.Fprintf(os.Stderr, "unknown helper %q\n", mode)
			os.Exit(2)
		}
		if err := fn(); err != nil {
			fmt.Fprintf(os.Stderr, "helper %s: %v\n", mode, err)
			os.Exit(3)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// helperCmd returns a command running the test binary as helper mode.
func helperCmd(mode string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode)
	return cmd
}

func waitGo() error {
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return fmt.Errorf("waiting for go: %w", err)
	}
	return nil
}

// helperAlloc touches 512 MiB; in a 64 MiB group the OOM killer must stop it.
func helperAlloc() error {
	if err := waitGo(); err != nil {
		return err
	}
	b := make([]byte, 512<<20)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	fmt.Println("survived")
	return nil
}

// helperSpin burns CPU until stdin closes or helperLife passes.
func helperSpin() error {
	if err := waitGo(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		bufio.NewReader(os.Stdin).ReadString('\n') // any outcome ends the spin
		close(done)
	}()
	stop := time.After(helperLife)
	for n := 0; ; n++ {
		if n%1_000_000 == 0 {
			select {
			case <-done:
				return nil
			case <-stop:
				return nil
			default:
			}
		}
	}
}

// helperTree builds the escape attempts Kill must defeat: a double-forked,
// setsid'd grandchild that ignores SIGTERM, and a child in its own process
// group. It prints "pid N" for itself and each of them, then "ready".
func helperTree() error {
	signal.Ignore(syscall.SIGTERM, syscall.SIGHUP)
	if err := waitGo(); err != nil {
		return err
	}
	fmt.Printf("pid %d\n", os.Getpid())
	d := helperCmd("daemon")
	d.Stdout, d.Stderr = os.Stdout, os.Stderr
	d.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := d.Run(); err != nil { // the daemon exits once its own child runs
		return fmt.Errorf("daemon: %w", err)
	}
	s := helperCmd("sleeper")
	s.Stdout, s.Stderr = os.Stdout, os.Stderr
	s.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.Start(); err != nil {
		return fmt.Errorf("sleeper: %w", err)
	}
	fmt.Printf("pid %d\nready\n", s.Process.Pid)
	time.Sleep(helperLife) // bounded idle: the test kills us long before
	return nil
}

// helperDaemon is the middle of a double fork: it starts a setsid'd idle
// grandchild, reports its pid and exits, orphaning it.
func helperDaemon() error {
	c := helperCmd("idle")
	c.Stdout, c.Stderr = os.Stdout, os.Stderr
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := c.Start(); err != nil {
		return err
	}
	fmt.Printf("pid %d\n", c.Process.Pid)
	return nil
}

// helperIdle ignores SIGTERM and SIGHUP and idles for helperLife.
func helperIdle() error {
	signal.Ignore(syscall.SIGTERM, syscall.SIGHUP)
	time.Sleep(helperLife) // bounded idle: the test kills us long before
	return nil
}
