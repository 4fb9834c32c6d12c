package nsinit

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// BundleInitPath is where an exported OCI bundle binds airlock's init
// (export/oci.InitPath): the bundle's pid 1, in front of the command.
const BundleInitPath = "/.airlock/init"

// BundleInit is pid 1 of an exported OCI bundle run by a runtime alone
// (runc run, crun run, a Kubernetes node): args are
//
//	/.airlock/init MAX_WALL -- COMMAND [ARG]...
//
// It starts COMMAND as its only child, forwards SIGTERM, SIGINT, SIGHUP,
// SIGQUIT, SIGUSR1, SIGUSR2 and SIGWINCH to it (a program that is pid 1
// itself ignores every signal it has no handler for, so `timeout 6 runc
// run` would wait for a Python workload forever), reaps every orphan, and
// exits with COMMAND's status once COMMAND has exited, killing whatever
// it left behind. MAX_WALL (a Go duration, "0" for none) is the policy's
// deadline: when it passes, everything in the container is killed and the
// exit status is 124, as under airlock run. It never returns.
func BundleInit() {
	os.Exit(bundleInit(os.Args[1:]))
}

func bundleInit(args []string) int {
	say := func(format string, a ...any) { fmt.Fprintf(os.Stderr, "airlock init: "+format+"\n", a...) }
	if len(args) < 3 || args[1] != "--" {
		say("usage: %s MAX_WALL -- COMMAND [ARG]... (the bundle's process.args are wrong)", BundleInitPath)
		return 125
	}
	wall, err := time.ParseDuration(args[0])
	if err != nil || wall < 0 {
		say("max_wall %q: want a duration such as 30s, or 0 for none", args[0])
		return 125
	}
	if os.Getpid() != 1 {
		// Killing what the command leaves behind is kill(-1), which only a
		// pid namespace's init may do safely.
		say("must run as pid 1 of the container (the bundle's process); it is pid %d", os.Getpid())
		return 125
	}
	sigs := make(chan os.Signal, 16)
	forwarded := []os.Signal{unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2, unix.SIGWINCH}
	signal.Notify(sigs, forwarded...)
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, unix.SIGCHLD) // before the fork: no exit is missed
	pid, err := syscall.ForkExec(args[2], args[2:], &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: []uintptr{0, 1, 2},
		Dir:   mustGetwd(),
	})
	if err != nil {
		say("start %s: %v", args[2], err)
		if errors.Is(err, unix.ENOENT) {
			return 127
		}
		return 126
	}
	var deadline <-chan time.Time
	if wall > 0 {
		t := time.NewTimer(wall)
		defer t.Stop()
		deadline = t.C
	}
	for {
		select {
		case s := <-sigs:
			_ = unix.Kill(pid, s.(unix.Signal)) // gone is fine: its exit is on its way
		case <-deadline:
			say("max_wall %v passed: the command and everything it started were killed", wall)
			_ = unix.Kill(-1, unix.SIGKILL) // everything in the pid namespace but this init
			reapAll()
			return 124
		case <-chld:
			if code, done := reapUntil(pid); done {
				_ = unix.Kill(-1, unix.SIGKILL) // what the command left behind
				reapAll()
				return code
			}
		}
	}
}

// reapUntil reaps every exited child without blocking and reports the
// command's exit status once pid is among them.
func reapUntil(pid int) (int, bool) {
	for {
		var ws unix.WaitStatus
		got, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || got <= 0 {
			return 0, false
		}
		if got == pid {
			if ws.Signaled() {
				return 128 + int(ws.Signal()), true
			}
			return ws.ExitStatus(), true
		}
	}
}

// reapAll waits for every remaining child (all of them killed).
func reapAll() {
	for {
		var ws unix.WaitStatus
		if _, err := unix.Wait4(-1, &ws, 0, nil); err != nil && !errors.Is(err, unix.EINTR) {
			return // ECHILD: none left
		}
	}
}

func mustGetwd() string {
	wd, err := os.Getwd()
	if err != nil {
		return "/"
	}
	return wd
}
