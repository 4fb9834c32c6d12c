package nsinit

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/enforce/mount"
	"github.com/airlock-sandbox/airlock/internal/enforce/netns"
	"github.com/airlock-sandbox/airlock/plan/spec"
)

// stageError is a failure before the command started: exit 125.
type stageError struct {
	stage string
	err   error
}

func (e *stageError) Error() string { return e.stage + ": " + e.err.Error() }

func fail(stage string, err error) error { return &stageError{stage: stage, err: err} }

// Main runs the init and exits the process; it never returns.
//
// Preconditions:
//   - the process was started by the sandbox supervisor with argv[0] == Arg0,
//     in new namespaces, with PlanFD and ControlFD open
func Main() {
	// Every credential, Landlock domain and thread-level restriction below
	// must land on the thread that forks the command.
	runtime.LockOSThread()
	os.Exit(run())
}

func run() int {
	// Nothing the supervisor leaked may reach the command.
	for _, fd := range []int{PlanFD, ControlFD} {
		unix.CloseOnExec(fd)
	}
	var code int
	var err error
	if cerr := unix.CloseRange(ControlFD+1, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); cerr != nil {
		// Fail closed: an fd the supervisor leaked could reach the command.
		err = fail("close inherited fds", cerr)
	} else {
		code, err = setupAndRun(earlyNetwork())
	}
	if err != nil {
		var se *stageError
		stage := "init"
		if errors.As(err, &se) {
			stage = se.stage
		}
		_ = Send(ControlFD, Message{Type: MsgError, Stage: stage, Error: err.Error()}) // the supervisor also sees exit 125
		return 125
	}
	return code
}

// maxPlan bounds the plan the init reads: a plan is tens of kilobytes.
const maxPlan = 16 << 20

// readPlan reads the plan (plan.Plan's binary form) up to EOF.
func readPlan() (*spec.Plan, error) {
	f := os.NewFile(PlanFD, "plan")
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxPlan+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxPlan {
		return nil, fmt.Errorf("plan larger than %d bytes", maxPlan)
	}
	var pl spec.Plan
	if err := pl.UnmarshalBinary(b); err != nil {
		return nil, err
	}
	return &pl, nil
}

// earlyNet is the loopback set-up an init cloned into a network
// namespace of its own did before its plan came.
type earlyNet struct {
	done bool  // the init was started with NewNetArg and tried
	err  error // why it failed; reported once the plan is read
}

// earlyNetwork brings lo up and checks that it is the only interface when
// the supervisor says (NewNetArg) that this init has a network namespace
// of its own: that needs no plan, so it happens while the plan is on its
// way (or, for a warm init, while it waits to be taken).
func earlyNetwork() earlyNet {
	if len(os.Args) < 2 || os.Args[1] != NewNetArg {
		return earlyNet{}
	}
	return earlyNet{done: true, err: loopbackOnly()}
}

func loopbackOnly() error {
	if err := netns.LoopbackUp(); err != nil {
		return err
	}
	return netns.VerifyOnlyLoopback()
}

func setupAndRun(early earlyNet) (int, error) {
	var pre *premounted
	if premountAsked() {
		var err error
		if pre, err = premount(); err != nil {
			return 0, fail("mount ahead", err)
		}
	}
	pl, err := readPlan()
	if err != nil {
		return 0, fail("read plan", err)
	}
	msg, idmapFDs, err := Recv(ControlFD)
	if err != nil || msg.Type != MsgGo {
		return 0, fail("wait for supervisor", fmt.Errorf("expected go message: %v %v", msg.Type, err))
	}
	if pl.NoNamespaces {
		if pre != nil {
			closeAll(idmapFDs)
			return 0, fail("mounts", errors.New("airlock bug: a plan without namespaces for an init that mounted steps ahead"))
		}
		closeAll(idmapFDs)
		if err := checkChildrenFile(); err != nil {
			return 0, fail("init", err)
		}
		return setupUnshared(pl)
	}
	if err := setupNetwork(pl, early); err != nil {
		return 0, fail("network", err)
	}
	stage, grants, procShared, err := setupMounts(pl, idmapFDs, pre, msg.Premounted)
	if err != nil {
		return 0, fail("mounts", err)
	}
	// The supervisor keeps the stage (to copy the writes back) and the
	// grant roots (for its file API); the init keeps neither.
	fds := grants
	if stage >= 0 {
		fds = append([]int{stage}, grants...)
	}
	err = Send(ControlFD, Message{Type: MsgMounts, Staged: stage >= 0}, fds...)
	closeAll(fds)
	if err != nil {
		return 0, fail("report mounts", err)
	}
	// A container's seccomp profile may refuse sethostname without
	// CAP_SYS_ADMIN (Docker's and podman's do): the sandbox's own UTS
	// namespace then keeps the container's name, which it cannot change
	// for anyone else; the report says so.
	hostnameKept := false
	if err := unix.Sethostname([]byte(pl.Hostname)); errors.Is(err, unix.EPERM) {
		hostnameKept = true
	} else if err != nil {
		return 0, fail("hostname", err)
	}
	abi, listener, err := restrict(pl)
	if err != nil {
		return 0, err
	}
	if listener >= 0 {
		// Transparent egress: the supervisor answers connect(2). The init
		// keeps no copy, so nothing under the filter can answer its own.
		err := Send(ControlFD, Message{Type: MsgBroker}, listener)
		unix.Close(listener)
		if err != nil {
			return 0, fail("report broker", err)
		}
	}
	if procShared && abi == 0 {
		// The container's processes are listed in this /proc: Landlock's
		// ptrace rule is what keeps their memory and fds from the sandbox.
		return 0, fail("landlock", errors.New("the sandbox sees the container's /proc (allow_downgrade: proc), and only Landlock keeps the container's processes listed there out of reach, but Landlock is unavailable here: nothing was started; run on a kernel with Landlock, or where the sandbox can have a /proc of its own"))
	}
	if err := Send(ControlFD, Message{Type: MsgReady, Landlock: abi, ProcShared: procShared, HostnameKept: hostnameKept}); err != nil {
		return 0, fail("report ready", err)
	}
	return serve(pl)
}

func setupNetwork(pl *spec.Plan, early earlyNet) error {
	switch {
	case early.done && early.err != nil:
		return early.err
	case !early.done:
		if err := loopbackOnly(); err != nil {
			return err
		}
	}
	if !pl.Proxy {
		return nil
	}
	httpFD, err := netns.Listen(spec.HTTPProxyPort)
	if err != nil {
		return err
	}
	defer unix.Close(httpFD)
	socksFD, err := netns.Listen(spec.SOCKSProxyPort)
	if err != nil {
		return err
	}
	defer unix.Close(socksFD)
	fds := []int{httpFD, socksFD}
	if pl.Transparent {
		tunnelFD, err := netns.Listen(spec.TunnelPort)
		if err != nil {
			return err
		}
		defer unix.Close(tunnelFD)
		dnsFD, err := netns.ListenUDP(spec.DNSPort)
		if err != nil {
			return err
		}
		defer unix.Close(dnsFD)
		fds = append(fds, tunnelFD, dnsFD)
	}
	return Send(ControlFD, Message{Type: MsgListeners}, fds...)
}

// setupMounts builds the root and pivots into it. It returns the fds the
// supervisor keeps: the stage (-1 when nothing is staged) and the root of
// every grant, in plan order, as the sandbox sees them.
//
// pre is what this init mounted ahead (nil: nothing), and use how many
// of those steps the supervisor says the plan begins with: all of them
// (the plan goes on from there, once this init has checked that it does
// begin with them) or 0 (what was mounted ahead is detached first). Only
// the binds after them have clones in cloneFDs.
func setupMounts(pl *spec.Plan, cloneFDs []int, pre *premounted, use int) (stage int, grants []int, procShared bool, err error) {
	var b *mount.Builder
	first := 0 // the first step still to mount
	switch {
	case use == 0 && pre != nil:
		if err := pre.b.Abandon(); err != nil {
			closeAll(cloneFDs)
			return -1, nil, false, err
		}
	case use != 0 && (pre == nil || use != len(pre.steps) || !pre.begins(pl)):
		closeAll(cloneFDs)
		return -1, nil, false, fmt.Errorf("airlock bug: the supervisor says the plan begins with the %d steps mounted ahead, and it does not", use)
	case use != 0:
		b, first = pre.b, use
	}
	// Clone every source before the root tmpfs covers /tmp: grants may live
	// there on the host.
	trees := make([]int, len(pl.Mounts))
	for i := range trees {
		trees[i] = -1
	}
	defer func() {
		for _, fd := range trees {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
		if err != nil {
			closeAll(grants)
			if stage >= 0 {
				unix.Close(stage)
			}
			stage, grants = -1, nil
		}
	}()
	stage = -1
	// With root, the supervisor cloned every bind source (in plan order);
	// rootless, the init clones them itself with the caller's access.
	binds := 0
	for _, m := range pl.Mounts[first:] {
		if m.Cloned() {
			binds++
		}
	}
	if (len(cloneFDs) != 0 || first > 0) && len(cloneFDs) != binds {
		// After steps mounted ahead the root covers /tmp: the init cannot
		// clone host paths itself any more, the supervisor sends them all.
		return -1, nil, false, fmt.Errorf("airlock bug: %d cloned mounts received for %d binds", len(cloneFDs), binds)
	}
	next := 0
	var staged int64 // bytes of staged files copied onto the stage
	for i, m := range pl.Mounts {
		if i < first || !m.Cloned() {
			continue
		}
		if len(cloneFDs) > 0 {
			trees[i] = cloneFDs[next]
			next++
		} else {
			fd, err := mount.Clone(m, -1)
			if err != nil {
				if m.Optional {
					continue
				}
				return -1, nil, false, err
			}
			trees[i] = fd
		}
		if m.Kind == spec.KindStagedFile {
			n, err := mount.StagedFileSize(trees[i])
			if err != nil {
				return -1, nil, false, fmt.Errorf("fs_write %s: %w", m.Source, err)
			}
			staged += n + 4096 // a page of slack per file
		}
	}
	if b == nil {
		b = &mount.Builder{Root: "/tmp", ProcFallback: pl.ProcFallback}
		if err := b.MountRoot(); err != nil {
			return -1, nil, false, err
		}
	}
	for i, m := range pl.Mounts {
		switch {
		case i < first:
			continue // mounted ahead
		case m.Cloned() && trees[i] < 0:
			continue // an optional source that is absent
		case m.Kind == spec.KindStage:
			err = b.MountStage(m, staged)
		case m.Kind == spec.KindOverlay:
			err = b.PlaceOverlay(m, trees[i])
		case m.Kind == spec.KindStagedFile:
			err = b.PlaceStagedFile(m, trees[i])
		case m.Kind == spec.KindReadonly || m.Kind == spec.KindHide:
			_, err = b.PlaceNarrowing(m)
		default:
			err = b.Place(m, trees[i])
		}
		if err != nil {
			return -1, nil, false, err
		}
	}
	if err := b.ProtectPaths(pl.ReadonlyPaths, pl.MaskedPaths); err != nil {
		return -1, nil, false, err
	}
	for _, m := range pl.Mounts {
		if m.Grant() {
			fd, err := b.OpenGrant(m.Target)
			if err != nil {
				return -1, nil, false, err
			}
			grants = append(grants, fd)
		}
	}
	if stage, err = b.DetachStage(); err != nil {
		return -1, nil, false, err
	}
	return stage, grants, b.ProcShared, b.Finish()
}

// exitMessage is the "exit" message for a reaped command: its status, and
// the CPU time and peak resident size of it and the descendants it waited
// for (getrusage(2): ru_maxrss is in KiB).
func exitMessage(ws unix.WaitStatus, ru *unix.Rusage) Message {
	m := Message{Type: MsgExit, Code: ws.ExitStatus()}
	if ws.Signaled() {
		m.Signal = int(ws.Signal())
		m.Code = 128 + m.Signal
	}
	if ru != nil {
		m.CPUMS = (unix.TimevalToNsec(ru.Utime) + unix.TimevalToNsec(ru.Stime)) / 1e6
		m.MaxRSS = ru.Maxrss * 1024
	}
	return m
}
