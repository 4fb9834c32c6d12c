package cgroup_test

import (
	"bufio"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/enforce/cgroup"
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
	"leader":  helperLeader,
}

func init() {
	if os.Getenv(helperEnv) == "leader" {
		// init runs on the main thread, the thread group leader: keep the
		// main goroutine (TestMain, then helperLeader) there.
		runtime.LockOSThread()
	}
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

// helperLeader is TestDetectWhileLeaderInside's child. On the thread group
// leader (see init) it does what Group.Start does for a moment, moving
// itself into a group's v1 directories, and meanwhile has Detect run on
// another thread: Detect must still find the process's own cgroups, not
// the group the leader is passing through.
func helperLeader() error {
	if unix.Gettid() != os.Getpid() {
		return fmt.Errorf("not on the leader thread (tid %d, pid %d)", unix.Gettid(), os.Getpid())
	}
	h, err := cgroup.Detect()
	if err != nil {
		return err
	}
	name, err := cgroup.NewName(os.Getpid())
	if err != nil {
		return err
	}
	g, err := cgroup.Create(h, cgroup.Config{Name: name, Pids: 8})
	if err != nil {
		return err
	}
	defer g.Destroy() // the exit status says whether this helper passed
	var moved []string
	for _, d := range g.Status().Dirs {
		if err := os.WriteFile(filepath.Join(d, "tasks"), []byte("0"), 0); err == nil {
			moved = append(moved, filepath.Dir(d))
		}
	}
	if len(moved) == 0 {
		return errors.New("no v1 directory to move into: the host has no cgroup v1 hierarchy")
	}
	during := make(chan cgroup.Host, 1)
	go func() { // another thread: the leader is locked to this goroutine's caller
		h2, _ := cgroup.Detect() // an error leaves h2 zero, which differs below
		during <- h2
	}()
	h2 := <-during
	for _, parent := range moved {
		if err := os.WriteFile(filepath.Join(parent, "tasks"), []byte("0"), 0); err != nil {
			return fmt.Errorf("leave: %w", err)
		}
	}
	if !maps.Equal(h.Self, h2.Self) {
		return fmt.Errorf("Detect while the leader was inside %s found Self %v, want %v", name, h2.Self, h.Self)
	}
	return nil
}

// helperIdle ignores SIGTERM and SIGHUP and idles for helperLife.
func helperIdle() error {
	signal.Ignore(syscall.SIGTERM, syscall.SIGHUP)
	time.Sleep(helperLife) // bounded idle: the test kills us long before
	return nil
}
