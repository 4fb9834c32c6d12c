package nsinit

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/plan/spec"
)

// reaper matches reaped children to the exec that started them. Orphans
// reparented to the init are reaped and forgotten.
type reaper struct {
	mu    sync.Mutex
	ids   map[int]string // guarded by mu: pid -> exec ID
	early map[int]reaped // guarded by mu: reaped before registration
}

// reaped is how a process ended and what it and the descendants it waited
// for used (wait4(2)).
type reaped struct {
	ws unix.WaitStatus
	ru unix.Rusage
}

func (rp *reaper) register(pid int, id string) {
	rp.mu.Lock()
	r, done := rp.early[pid]
	if done {
		delete(rp.early, pid)
	} else {
		rp.ids[pid] = id
	}
	rp.mu.Unlock()
	if done {
		reportExit(id, r)
	}
}

func (rp *reaper) reaped(pid int, r reaped) {
	rp.mu.Lock()
	id, ok := rp.ids[pid]
	if ok {
		delete(rp.ids, pid)
	} else {
		if len(rp.early) >= 4096 {
			// Orphans reparented to the init are never registered; do not
			// let them accumulate. A registration lost this way would need
			// 4096 orphans to die between one fork and its registration.
			clear(rp.early)
		}
		rp.early[pid] = r
	}
	rp.mu.Unlock()
	if ok {
		reportExit(id, r)
	}
}

func reportExit(id string, r reaped) {
	m := exitMessage(r.ws, &r.ru)
	m.ID = id
	_ = Send(ControlFD, m) // the supervisor is gone when this fails; the init exits soon after
}

// serve runs exec requests until the supervisor closes the control
// socket. Each command is forked from this (restricted, locked) thread so it
// inherits every restriction; its process group is killed on request.
//
// Preconditions:
//   - every restriction is applied (restrict returned)
//   - runs on the locked OS thread that applied them
func serve(pl *spec.Plan) (int, error) {
	return serveOn(pl, func(f func()) { f() }, false)
}

// serveOn is serve with commands forked by fork (which runs its function
// on the thread that carries the restrictions). Unshared, the init has no
// pid namespace to end its tree: it kills every descendant on SIGTERM
// (the supervisor's teardown and its death signal) and when the control
// socket closes.
func serveOn(pl *spec.Plan, fork func(func()), unshared bool) (int, error) {
	signal.Ignore(unix.SIGINT, unix.SIGHUP, unix.SIGQUIT)
	if unshared {
		term := make(chan os.Signal, 1)
		signal.Notify(term, unix.SIGTERM)
		go func() {
			<-term
			killTree(5 * time.Second)
			os.Exit(0)
		}()
	} else {
		signal.Ignore(unix.SIGTERM)
	}
	rp := &reaper{ids: map[int]string{}, early: map[int]reaped{}}
	// Registered before any child exists, so no SIGCHLD can be missed.
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, unix.SIGCHLD)
	go func() {
		for {
			var r reaped
			pid, err := unix.Wait4(-1, &r.ws, 0, &r.ru)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if errors.Is(err, unix.ECHILD) {
				<-chld // nothing to reap yet: wait for the next SIGCHLD
				continue
			}
			if err != nil {
				return
			}
			rp.reaped(pid, r)
		}
	}()
	tools := map[string]bool{}
	for _, t := range pl.Tools {
		tools[t] = true
	}
	for {
		m, fds, err := Recv(ControlFD)
		if err != nil {
			if unshared {
				killTree(5 * time.Second)
			}
			return 0, nil // the supervisor is gone: end the session
		}
		switch m.Type {
		case MsgExec:
			startExec(pl, tools, rp, m, fds, fork)
		case MsgKill:
			if m.Pid > 0 {
				_ = unix.Kill(-m.Pid, unix.SIGKILL) // the group may be gone already
			}
			closeAll(fds)
		default:
			closeAll(fds)
		}
	}
}

func startExec(pl *spec.Plan, tools map[string]bool, rp *reaper, m Message, fds []int, fork func(func())) {
	defer closeAll(fds)
	fail := func(code int, msg string) {
		_ = Send(ControlFD, Message{Type: MsgExit, ID: m.ID, Code: code, Error: msg}) // reported as the exec's result
	}
	if len(fds) != 3 || len(m.Argv) == 0 {
		fail(125, "airlock bug: exec needs argv and three fds")
		return
	}
	// The supervisor resolved the tool; the init checks it again against
	// the plan so a confused supervisor cannot widen the allow-list.
	if !tools[m.Argv[0]] {
		fail(127, fmt.Sprintf("%s is not an allowed tool in this session", m.Argv[0]))
		return
	}
	cwd := m.Cwd
	if cwd == "" {
		cwd = pl.Cwd
	}
	attr := &syscall.ProcAttr{
		Dir:   cwd,
		Env:   m.Env,
		Files: []uintptr{uintptr(fds[0]), uintptr(fds[1]), uintptr(fds[2])},
		// A new session has no controlling terminal; with a PTY, fd 0 (the
		// pty slave) becomes it.
		Sys: &syscall.SysProcAttr{Setsid: true, Setctty: m.PTY, Ctty: 0},
	}
	var pid int
	var err error
	fork(func() { pid, err = syscall.ForkExec(m.Argv[0], m.Argv, attr) })
	if err != nil {
		code := 126
		if errors.Is(err, unix.ENOENT) {
			code = 127
		}
		fail(code, fmt.Sprintf("exec %s: %v", m.Argv[0], err))
		return
	}
	_ = Send(ControlFD, Message{Type: MsgStarted, ID: m.ID, Pid: pid}) // the supervisor needs the pid only to kill
	rp.register(pid, m.ID)
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}
