package k8stest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// proc is one control-plane process, its output in a log file.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed once the process has exited and been waited for
	err  error         // cmd.Wait's result, set before done is closed
}

// startProc starts argv with its stdout and stderr in logPath.
func startProc(name, logPath string, argv []string, env []string) (*proc, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("k8stest: %s: %w", name, err)
	}
	defer f.Close() // the child holds its own copy
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr, cmd.Env = f, f, env
	cmd.SysProcAttr = sysProcAttr()
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// PR_SET_PDEATHSIG fires when the thread that started the child
		// exits, not the process (golang/go#27505): this goroutine keeps
		// its thread locked until the child is gone. Returning while
		// locked ends the thread, which no longer matters then.
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			runtime.UnlockOSThread()
			started <- err
			return
		}
		started <- nil
		p.err = cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("k8stest: start %s: %w", name, err)
	}
	return p, nil
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop ends the process: SIGTERM, then SIGKILL after grace, and waits.
func (p *proc) stop(grace time.Duration) {
	if p.exited() {
		return
	}
	// An error here means the process already exited; done says so below.
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		_ = p.cmd.Process.Kill() // as above
		<-p.done
	}
}

// tail returns the last n lines of the process's log.
func (p *proc) tail(n int) string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// errPortTaken reports a process that exited because another took one of
// the ports chosen for it between freePorts and its bind.
var errPortTaken = errors.New("k8stest: a port chosen for the process was taken before it bound it")

// waitReady polls ready every interval until it returns nil, the process
// exits, or ctx ends.
func (p *proc) waitReady(ctx context.Context, interval time.Duration, ready func(context.Context) error) error {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var last error
	for {
		if last = ready(ctx); last == nil {
			return nil
		}
		select {
		case <-p.done:
			if strings.Contains(p.tail(50), "address already in use") {
				return errPortTaken
			}
			return fmt.Errorf("k8stest: %s exited before it was ready (%v); its log ends:\n%s", p.name, p.err, p.tail(30))
		case <-ctx.Done():
			return fmt.Errorf("k8stest: %s not ready: %w (last check: %v); its log ends:\n%s", p.name, ctx.Err(), last, p.tail(30))
		case <-tick.C:
		}
	}
}

// freePorts returns n distinct loopback TCP ports that were free a moment
// ago. Another process may take one before the child binds it; the
// caller retries then (errPortTaken).
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("k8stest: free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
