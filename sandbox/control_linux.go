package sandbox

import (
	"bytes"
	"os/exec"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// control is a backend's control process, as the box holds it: the process
// (pid 1 of the sandbox's pid namespace, or of the OCI launcher's), its end
// of the control socket, and the watchers that halt the box from outside.
type control struct {
	cmd    *exec.Cmd
	sock   int           // the supervisor's end of the control socket
	exited chan struct{} // closed once the process has been reaped
	stderr *tailBuffer   // the control process's own stderr, for why()
	// onExit, when set, runs once the process has been reaped (a
	// backend's own cleanup: the OCI runtime's cgroups and work folder).
	onExit func()
	// graceful makes kill send SIGTERM first: the init without namespaces
	// kills its own tree then, and gets SIGKILL if it has not exited
	// after killGrace.
	graceful bool

	killOnce  sync.Once
	stopOnce  sync.Once
	stopWatch chan struct{}
	watching  sync.WaitGroup
	closeOnce sync.Once
}

// killGrace is how long the init without namespaces has to kill its tree.
const killGrace = 5 * time.Second

func newControl(cmd *exec.Cmd, sock int) *control {
	return &control{cmd: cmd, sock: sock, exited: make(chan struct{}), stopWatch: make(chan struct{}), stderr: &tailBuffer{max: 4 << 10}}
}

// kill ends the sandbox: SIGKILL to pid 1 of its pid namespace makes the
// kernel kill every process in it.
func (c *control) kill() {
	c.killOnce.Do(func() {
		if c.cmd.Process == nil {
			return
		}
		if !c.graceful {
			_ = c.cmd.Process.Kill() // already gone is fine
			return
		}
		_ = c.cmd.Process.Signal(unix.SIGTERM)
		go func() {
			select {
			case <-c.exited:
			case <-time.After(killGrace):
				_ = c.cmd.Process.Kill()
			}
		}()
	})
}

// watch runs fn until the watchers are stopped.
func (c *control) watch(fn func(stop <-chan struct{})) {
	c.watching.Add(1)
	go func() {
		defer c.watching.Done()
		fn(c.stopWatch)
	}()
}

// stopWatchers ends the watchers and waits for them: none may read a cgroup
// or the stage while they are torn down.
func (c *control) stopWatchers() {
	c.stopOnce.Do(func() { close(c.stopWatch) })
	c.watching.Wait()
}

// close releases the control socket.
func (c *control) close() {
	c.closeOnce.Do(func() { unix.Close(c.sock) })
}

// why describes how the control process ended, with the end of its stderr.
// It waits (bounded) for the process to be reaped: its status is read
// only after Wait has returned.
func (c *control) why() string {
	s := "still running"
	select {
	case <-c.exited:
		s = c.cmd.ProcessState.String()
	case <-time.After(5 * time.Second):
	}
	if t := c.stderr.String(); t != "" {
		s += ": " + t
	}
	return s
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max int
	mu  sync.Mutex
	buf bytes.Buffer // guarded by mu
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf.Write(p)
	if extra := t.buf.Len() - t.max; extra > 0 {
		t.buf.Next(extra)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(bytes.TrimSpace(t.buf.Bytes()))
}
