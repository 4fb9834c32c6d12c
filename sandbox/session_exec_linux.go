package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/enforce/nsinit"
	"github.com/airlock-sandbox/airlock/plan"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
)

// drainGrace is how long output is still read after an exec's process
// exited: background processes may keep its pipes open forever.
const drainGrace = 100 * time.Millisecond

// Exec runs one command inside the session and returns its report. The
// error is non-nil only when the session has ended (ErrSessionClosed) or
// ctx is nil; refusals, budget halts and failures are in the Report.
func (s *Session) Exec(ctx context.Context, req ExecRequest) (*Report, error) {
	if ctx == nil {
		panic("sandbox: nil context")
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrSessionClosed
	}
	s.execs++
	s.mu.Unlock()
	select {
	case <-s.done:
		return nil, ErrSessionClosed
	default:
	}

	start := time.Now()
	// Each exec has its own output budget and deadline; ops are the session's.
	wall := time.Until(s.r.meter.Deadline())
	if req.Timeout > 0 && req.Timeout < wall {
		wall = req.Timeout
	}
	lim := s.r.c.Policy.Budget()
	e := &run{c: s.r.c, start: start, report: &Report{Denials: []Denial{}}, log: s.r.log, sink: s.r.sink, pl: s.pl, session: s.r,
		meter: budget.NewMeter(budget.Limits{OutputBytes: lim.OutputBytes, Wall: max(wall, time.Millisecond)}, s.r.c.Clock)}
	e.report.Enforcement = s.r.report.Enforcement
	opsBefore, _ := s.r.meter.Usage()
	defer func() {
		// Records arrive asynchronously: a denial in the last instant of an
		// exec may appear in the next exec's report.
		s.r.fs.emit(s.r, false)
		e.report.DurationMS = time.Since(start).Milliseconds()
		// Everything denied since the previous exec's report, including
		// what background processes provoked between execs; concurrent
		// execs split the denials between them, each reported once.
		setDenials(e.report, s.r.rec.Take())
		// The exec's own usage: the ops charged while it ran (this exec's
		// and its background's), its output, and from wait4 the CPU and
		// peak memory of its process and what that process waited for.
		opsAfter, _ := s.r.meter.Usage()
		e.report.Usage.Ops = opsAfter - opsBefore
		_, e.report.Usage.OutputBytes = e.meter.Usage()
		e.report.Usage.WriteBytes, _ = s.ip.stage.usage()
	}()

	if err := s.r.meter.ChargeOp(); err != nil {
		var ex *budget.ExhaustedError
		if errors.As(err, &ex) {
			e.halt(ex.Limit, "the session's "+string(ex.Limit)+" is exhausted")
			e.meter.Halt(ex.Limit)
			e.reportHalt()
		}
		return e.report, nil
	}
	argv0, err := s.resolveTool(req.Args)
	if err != nil {
		e.refuse(127, err)
		return e.report, nil
	}
	env, err := s.env(req.Env)
	if err != nil {
		e.refuse(125, err)
		return e.report, nil
	}
	cwd := req.Dir
	if cwd != "" {
		if cwd, err = checkDir(s.r.c.Policy, cwd); err != nil {
			e.refuse(125, err)
			return e.report, nil
		}
	}
	s.run(ctx, e, req, append([]string{argv0}, req.Args[1:]...), env, cwd)
	return e.report, nil
}

// resolveTool maps Args[0] to the executable's path inside the sandbox:
// it must be one of the plan's tools (allowed_tools).
func (s *Session) resolveTool(args []string) (string, error) {
	if len(args) == 0 || args[0] == "" {
		return "", errors.New("exec: no command given")
	}
	name := args[0]
	if strings.HasPrefix(name, "/") {
		if p := path.Clean(name); slices.Contains(s.pl.Tools, p) {
			return p, nil
		}
		// The sandbox's own symlinks lead /bin/sh to the allowed
		// /usr/bin/sh: the same file, by the name the program used.
		if p, m := resolveInside(s.pl, name); m != nil && m.Target == p && slices.Contains(s.pl.Tools, p) {
			return p, nil
		}
	} else if !strings.Contains(name, "/") {
		for _, d := range strings.Split(plan.SandboxPath, ":") {
			if p := d + "/" + name; slices.Contains(s.pl.Tools, p) {
				return p, nil
			}
		}
	}
	return "", &policy.DenyError{Cap: policy.AllowedTools, Op: "exec", Subject: name, Reason: name + " is not in allowed_tools"}
}

// env returns the plan's environment plus the exec's additions; variables
// airlock controls cannot be changed.
func (s *Session) env(extra []string) ([]string, error) {
	env := slices.Clone(s.pl.Env)
	for _, kv := range extra {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.ContainsRune(kv, 0) {
			return nil, fmt.Errorf("exec env %q: want NAME=value", kv)
		}
		switch strings.ToUpper(k) {
		case "PATH", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT":
			return nil, fmt.Errorf("exec env %q: %s is set by airlock and cannot be changed per exec", kv, k)
		}
		env = slices.DeleteFunc(env, func(e string) bool { return strings.HasPrefix(e, k+"=") })
		env = append(env, kv)
	}
	return env, nil
}

func checkDir(p *policy.Policy, dir string) (string, error) {
	if !strings.HasPrefix(dir, "/") {
		return "", fmt.Errorf("exec dir %q: use an absolute path inside the sandbox", dir)
	}
	c := path.Clean(dir)
	if c == "/tmp" || strings.HasPrefix(c, "/tmp/") || p.CanRead(c) {
		return c, nil
	}
	return "", fmt.Errorf("exec dir %q is outside fs_read, fs_write and /tmp", dir)
}

// run starts argv in the sandbox and waits for it, its timeout, ctx, the
// output cap or the session's end.
func (s *Session) run(ctx context.Context, e *run, req ExecRequest, argv, env []string, cwd string) {
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		e.fail(err)
		return
	}
	defer stdinR.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		stdinW.Close()
		e.fail(err)
		return
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		stdinW.Close()
		outR.Close()
		outW.Close()
		e.fail(err)
		return
	}
	id := newID()
	msgs := s.pendingChan(id)
	defer func() {
		s.mu.Lock()
		delete(s.pending, id)
		s.mu.Unlock()
	}()
	err = nsinit.Send(s.ip.ctl, nsinit.Message{Type: "exec", ID: id, Argv: argv, Env: env, Cwd: cwd},
		int(stdinR.Fd()), int(outW.Fd()), int(errW.Fd()))
	stdinR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		stdinW.Close()
		outR.Close()
		errR.Close()
		e.fail(fmt.Errorf("exec: %w", err))
		return
	}
	go func() {
		if req.Stdin != nil {
			_, _ = io.Copy(stdinW, req.Stdin) // the command may exit without reading
		}
		stdinW.Close()
	}()
	stdout := &capture{r: e, tee: req.Stdout, halted: make(chan struct{}, 1)}
	stderr := &capture{r: e, tee: req.Stderr, halted: make(chan struct{}, 1)}
	copied := make(chan struct{}, 2)
	for _, c := range []struct {
		f *os.File
		w *capture
	}{{outR, stdout}, {errR, stderr}} {
		go func() {
			_, _ = io.Copy(c.w, c.f) // ends at EOF or when the read deadline passes
			copied <- struct{}{}
		}()
	}

	timer := time.NewTimer(time.Until(e.meter.Deadline()))
	defer timer.Stop()
	var pid int
	var exit *nsinit.Message
	kill := func(l budget.Limit, msg string) {
		if l != "" {
			e.halt(l, msg)
		}
		if pid > 0 {
			_ = nsinit.Send(s.ip.ctl, nsinit.Message{Type: "kill", Pid: pid}) // the session may be ending anyway
		}
	}
	var cpuBefore int64
	if g := s.ip.lim.group; g != nil {
		if u, err := g.Usage(); err == nil {
			cpuBefore = u.CPU.Milliseconds()
		}
	}
	killed := false
	sessionHalted := s.r.meter.Done() // the session's ops ran out: the session ends too
	cancelled := ctx.Done()
	outHalted, errHalted := stdout.halted, stderr.halted
	for exit == nil {
		select {
		case m := <-msgs:
			switch m.Type {
			case "started":
				pid = m.Pid
				if killed {
					kill("", "")
				}
			case "exit":
				exit = &m
			}
		case <-timer.C:
			killed = true
			kill(budget.MaxWall, "the exec passed its timeout and was killed; the session goes on")
		case <-cancelled:
			cancelled = nil // closed for good; kill once
			killed = true
			kill(budget.Interrupted, "the caller stopped the exec ("+context.Cause(ctx).Error()+"): it was killed; the session goes on")
		case <-outHalted:
			outHalted = nil // receives once; kill once
			killed = true
			kill("", "")
		case <-errHalted:
			errHalted = nil
			killed = true
			kill("", "")
		case <-sessionHalted:
			sessionHalted = nil
			killed = true
			kill(s.r.meter.HaltedBy(), "the session's "+string(s.r.meter.HaltedBy())+" ran out, so the exec was killed and the session ends")
		case <-s.done:
			e.halt(s.r.meter.HaltedBy(), "the session ended")
			// No exit message comes from a killed init: the session's own
			// final usage (recorded before done closed) since this exec
			// began stands in for the exec's.
			exit = &nsinit.Message{Type: "exit", Code: 125, Error: "the session ended during the exec",
				CPUMS: max(s.r.report.Usage.CPUMS-cpuBefore, 0), MaxRSS: s.r.report.Usage.MaxMemoryBytes}
		}
	}
	// Background processes may hold the pipes open: read what is there,
	// then stop.
	deadline := time.Now().Add(drainGrace)
	_ = outR.SetReadDeadline(deadline) // pipes from os.Pipe support deadlines
	_ = errR.SetReadDeadline(deadline)
	<-copied
	<-copied
	outR.Close()
	errR.Close()
	e.report.Stdout, e.report.StdoutTruncated = stdout.result()
	e.report.Stderr, e.report.StderrTruncated = stderr.result()
	e.report.Usage.CPUMS, e.report.Usage.MaxMemoryBytes = exit.CPUMS, exit.MaxRSS
	// RLIMIT_CPU is max_cpu per process: the kernel ends a process that
	// used it (SIGXCPU at the soft limit, SIGKILL at the hard one).
	if maxCPU := s.r.c.Policy.Budget().CPU; exit.Signal == int(unix.SIGXCPU) || exit.Signal != 0 && exit.CPUMS >= maxCPU.Milliseconds() {
		e.halt(budget.MaxCPU, "the exec used max_cpu of CPU time and was killed; the session goes on")
	}
	if e.reportHalt() {
		return
	}
	e.exitStatus(*exit, argv[0])
	if exit.Code == 125 && exit.Error != "" {
		e.report.Error = exit.Error
	}
}
