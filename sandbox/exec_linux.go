package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/internal/enforce/nsinit"
	"github.com/airlock-sandbox/airlock/policy/budget"
)

// drainGrace is how long output is still read after an exec's process
// exited: background processes may keep its pipes open forever.
const drainGrace = 100 * time.Millisecond

// execSpec is one command for box.exec, checked and resolved.
type execSpec struct {
	argv []string // argv[0] is the tool's path inside the sandbox
	env  []string
	cwd  string // "" = the plan's

	stdin          io.Reader // nil = /dev/null; an *os.File is passed as it is
	stdout, stderr io.Writer // the capture's tees, may be nil
	pty            bool      // a pseudo-terminal as stdin, stdout, stderr and controlling tty

	// wall bounds the exec; it never outlasts the box's deadline.
	wall time.Duration
	// whole makes the exec the sandbox's only one (Cmd.Run): a halt ends
	// the box, not just the exec's process group.
	whole bool
}

// exec runs one command in the box and waits for it, its deadline, ctx,
// the output cap, or the box's end. It is the only place where a command's
// life is supervised. The report it returns has the exec's own output,
// status and usage, and its halt; the caller adds the denials.
func (b *box) exec(ctx context.Context, x execSpec) *Report {
	p, rep := b.sendExec(x)
	if rep != nil {
		rep.Enforcement = b.enf
		return rep
	}
	return b.awaitExec(ctx, x, p)
}

// sentExec is an exec whose request the control process has (or will
// read once it is ready).
type sentExec struct {
	e    *execRun
	sio  *stdio
	id   string
	msgs chan nsinit.Message
}

// sendExec opens the exec's streams and sends the request; on failure it
// returns the exec's report instead.
//
// Preconditions:
//   - the box is launched (b.ctl is set)
func (b *box) sendExec(x execSpec) (*sentExec, *Report) {
	e := newExecRun(b, x.wall, x.whole)
	sio, err := openStdio(x, e)
	if err != nil {
		e.fail(err)
		return nil, e.report
	}
	p := &sentExec{e: e, sio: sio, id: newID()}
	p.msgs = b.execChan(p.id)
	err = nsinit.Send(b.ctl.sock, nsinit.Message{Type: nsinit.MsgExec, ID: p.id, Argv: x.argv, Env: x.env, Cwd: x.cwd, PTY: x.pty}, sio.childFDs()...)
	sio.closeChildEnds()
	if err != nil {
		p.abandon()
		e.fail(fmt.Errorf("exec: %w", err))
		return nil, e.report
	}
	return p, nil
}

// abandon releases an exec that will not be waited for.
func (p *sentExec) abandon() {
	p.sio.close()
	p.e.b.forget(p.id)
}

// awaitExec supervises a sent exec to its end and returns its report.
//
// Preconditions:
//   - the box is ready (it has sent "ready", so its enforcement is known)
func (b *box) awaitExec(ctx context.Context, x execSpec, p *sentExec) *Report {
	defer p.abandon()
	p.e.report.Enforcement = b.enf
	p.sio.start()
	exit := p.e.wait(ctx, x, p.msgs, p.sio)
	if x.whole {
		// The sandbox ends with its only command, as a container ends with
		// its pid 1: kill it now rather than after the drain. Background
		// processes holding the command's pipes open die at once instead of
		// holding the drain for drainGrace (100 ms), what they wrote stays
		// in the pipes and is read, and the kernel's teardown overlaps the
		// report.
		b.kill()
	}
	p.sio.drain()
	p.e.finish(exit, p.sio, x.argv[0])
	p.e.emitExit(p.id, x.argv[0])
	return p.e.report
}

// emitExit writes the exec's end to the audit: its exit status or signal,
// or the budget that halted it, and how long it ran.
func (e *execRun) emitExit(id, argv0 string) {
	r := e.report
	msg := fmt.Sprintf("exit %d after %v", r.ExitCode, time.Since(e.start).Round(time.Millisecond))
	rule := ""
	switch {
	case r.HaltedBy != nil:
		rule = *r.HaltedBy
		msg = fmt.Sprintf("halted by %s (exit %d) after %v", rule, r.ExitCode, time.Since(e.start).Round(time.Millisecond))
	case r.Signal != nil:
		msg = fmt.Sprintf("killed by signal %d after %v", *r.Signal, time.Since(e.start).Round(time.Millisecond))
	}
	e.b.sink.Emit(audit.Event{Time: time.Now(), Kind: audit.Exit, Layer: audit.LayerExec, Op: "exit", Target: argv0, Rule: rule, Message: msg, Exec: id})
}

// wait supervises the exec until it exits, or until the sandbox ended
// under it, killing it (or, for the sandbox's only exec, the sandbox) when
// a halt comes first. It returns the exit message.
func (e *execRun) wait(ctx context.Context, x execSpec, msgs <-chan nsinit.Message, sio *stdio) *nsinit.Message {
	b := e.b
	var pid int
	var exit *nsinit.Message
	killed := false
	kill := func(l budget.Limit, msg string) {
		if l != "" {
			e.halt(l, msg)
		}
		killed = true
		switch {
		case x.whole:
			b.kill() // the command was the sandbox's reason to exist
		case pid > 0:
			_ = nsinit.Send(b.ctl.sock, nsinit.Message{Type: nsinit.MsgKill, Pid: pid}) // the sandbox may be ending anyway
		}
	}
	timer := time.NewTimer(time.Until(e.meter.Deadline()))
	defer timer.Stop()
	cancelled, boxHalted := ctx.Done(), b.meter.Done()
	outHalted, errHalted := sio.stdout.halted, sio.stderr.halted
	for exit == nil {
		select {
		case m := <-msgs:
			switch m.Type {
			case nsinit.MsgStarted:
				pid = m.Pid
				if killed && !x.whole {
					kill("", "")
				}
			case nsinit.MsgExit:
				exit = &m
			}
		case <-timer.C:
			kill(budget.MaxWall, e.wallMessage())
		case <-cancelled:
			cancelled = nil // closed for good; kill once
			kill(budget.Interrupted, "the caller stopped the exec ("+context.Cause(ctx).Error()+"): it was killed")
		case <-outHalted:
			outHalted = nil // receives once; kill once
			kill("", "")
		case <-errHalted:
			errHalted = nil
			kill("", "")
		case <-boxHalted:
			boxHalted = nil
			kill(b.meter.HaltedBy(), b.haltMessage())
		case <-b.routed:
			// The control process is gone and every message it sent is
			// delivered: no exit will come.
			select {
			case m := <-msgs:
				if m.Type == nsinit.MsgExit {
					exit = &m
					continue
				}
			default:
			}
			e.halt(b.meter.HaltedBy(), b.haltMessage())
			// The exec's usage is then the sandbox's since it began, once
			// the teardown has read the kernel's counters.
			why := b.ctl.why()
			<-b.done
			f := b.finalState()
			exit = &nsinit.Message{Type: nsinit.MsgExit, Code: 125, Error: "the sandbox ended during the exec: " + why,
				CPUMS: max(f.usage.CPUMS-e.cpuBefore, 0), MaxRSS: f.usage.MaxMemoryBytes}
		}
	}
	return exit
}

// finish fills the report from the exit message and the captures.
func (e *execRun) finish(exit *nsinit.Message, sio *stdio, argv0 string) {
	b := e.b
	e.report.Stdout, e.report.StdoutTruncated = sio.stdout.result()
	e.report.Stderr, e.report.StderrTruncated = sio.stderr.result()
	e.report.Usage.CPUMS, e.report.Usage.MaxMemoryBytes = exit.CPUMS, exit.MaxRSS
	_, e.report.Usage.OutputBytes = e.meter.Usage()
	// RLIMIT_CPU is max_cpu per process: the kernel ends a process that
	// used it (SIGXCPU at the soft limit, SIGKILL at the hard one).
	if maxCPU := b.pl.Limits.CPU; exit.Signal == int(unix.SIGXCPU) || exit.Signal != 0 && exit.CPUMS >= maxCPU.Milliseconds() {
		e.halt(budget.MaxCPU, "the process tree used max_cpu of CPU time and was killed")
	}
	if !e.reportHalt() {
		e.exitStatus(*exit, argv0)
	}
}

// stdio is an exec's standard streams: what the command gets (the child
// ends, passed to the init) and what the supervisor keeps.
type stdio struct {
	child          [3]*os.File // stdin, stdout, stderr as the command gets them
	owned          []*os.File  // child ends this exec made, closed once sent
	stdinW         *os.File    // the write end of a stdin pipe, fed from stdin
	stdinSrc       io.Reader
	outR, errR     *os.File // read ends of the output pipes (errR nil with a pty)
	master         *os.File // the pty master, with a pty
	stdout, stderr *capture
	copied         chan struct{}
	readers        int
}

// openStdio makes the exec's streams: pipes the captures read, or a pty
// whose master the stdout capture reads; stdin from an *os.File as it is
// (an operator's terminal stays a terminal), else through a pipe.
func openStdio(x execSpec, e *execRun) (*stdio, error) {
	s := &stdio{stdout: newCapture(e, x.stdout), stderr: newCapture(e, x.stderr), copied: make(chan struct{}, 2)}
	fail := func(err error) (*stdio, error) {
		s.close()
		s.closeChildEnds()
		return nil, err
	}
	if x.pty {
		master, slave, err := openPTY()
		if err != nil {
			return fail(err)
		}
		s.master = master
		s.owned = append(s.owned, slave)
		s.child = [3]*os.File{slave, slave, slave}
		s.stdinSrc = x.stdin
		return s, nil
	}
	switch in := x.stdin.(type) {
	case nil:
		null, err := os.Open(os.DevNull)
		if err != nil {
			return fail(err)
		}
		s.owned = append(s.owned, null)
		s.child[0] = null
	case *os.File:
		s.child[0] = in
	default:
		r, w, err := os.Pipe()
		if err != nil {
			return fail(err)
		}
		s.owned = append(s.owned, r)
		s.child[0], s.stdinW, s.stdinSrc = r, w, in
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return fail(err)
	}
	s.outR, s.owned, s.child[1] = outR, append(s.owned, outW), outW
	errR, errW, err := os.Pipe()
	if err != nil {
		return fail(err)
	}
	s.errR, s.owned, s.child[2] = errR, append(s.owned, errW), errW
	return s, nil
}

func (s *stdio) childFDs() []int {
	return []int{int(s.child[0].Fd()), int(s.child[1].Fd()), int(s.child[2].Fd())}
}

// closeChildEnds closes the ends the init now holds: EOF on the read ends
// then means every process holding the write ends is gone.
func (s *stdio) closeChildEnds() {
	for _, f := range s.owned {
		f.Close()
	}
	s.owned = nil
}

// start copies stdin in and the output out.
func (s *stdio) start() {
	if s.master != nil {
		if s.stdinSrc != nil {
			go func() { _, _ = io.Copy(s.master, s.stdinSrc) }() // ends with the master
		}
		s.readers = 1
		go func() {
			copyOut(s.stdout, s.master) // EIO once every slave is closed
			s.copied <- struct{}{}
		}()
		return
	}
	if s.stdinW != nil {
		go func() {
			_, _ = io.Copy(s.stdinW, s.stdinSrc) // the command may exit without reading
			s.stdinW.Close()
		}()
	}
	s.readers = 2
	for _, c := range []struct {
		f *os.File
		w *capture
	}{{s.outR, s.stdout}, {s.errR, s.stderr}} {
		go func() {
			copyOut(c.w, c.f)
			s.copied <- struct{}{}
		}()
	}
}

// sweepMax bounds what copyOut reads after the drain deadline: what a
// pipe can hold (fcntl(2) F_SETPIPE_SZ raises it to 1 MiB unprivileged).
const sweepMax = 1 << 20

// copyOut copies a stream until EOF, or until drain's deadline passes; then
// it takes what is already buffered without waiting, so that output the
// command wrote before it exited is never lost to a slow reader (the
// deadline may pass before this goroutine ever ran).
func copyOut(w io.Writer, f *os.File) {
	_, err := io.Copy(w, f)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		return // EOF, EIO (a pty whose slaves are closed) or closed
	}
	if f.SetReadDeadline(time.Time{}) != nil {
		return
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	buf := make([]byte, 32<<10)
	_ = rc.Read(func(fd uintptr) bool {
		for left := sweepMax; left > 0; {
			n, err := unix.Read(int(fd), buf[:min(len(buf), left)])
			if n <= 0 || err != nil {
				break // EAGAIN: nothing more is buffered
			}
			_, _ = w.Write(buf[:n])
			left -= n
		}
		return true // never wait for more
	})
}

// drain reads what the command left in its streams, for a bounded time:
// background processes may hold them open forever.
func (s *stdio) drain() {
	deadline := time.Now().Add(drainGrace)
	for _, f := range []*os.File{s.outR, s.errR, s.master} {
		if f != nil {
			_ = f.SetReadDeadline(deadline) // pipes and the pty master support deadlines
		}
	}
	for range s.readers {
		<-s.copied
	}
}

func (s *stdio) close() {
	for _, f := range []*os.File{s.outR, s.errR, s.master} {
		if f != nil {
			f.Close()
		}
	}
	if s.stdinW != nil && s.readers == 0 {
		s.stdinW.Close() // never started: nothing else closes it
	}
}
