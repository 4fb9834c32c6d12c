package sandbox

import (
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/enforce/mount"
	"github.com/airlock-sandbox/airlock/internal/enforce/nsinit"
	"github.com/airlock-sandbox/airlock/plan"
)

// premountSet is the beginning of a plan that a warm init mounts while it
// waits: steps nsinit.Premountable accepts (the system base, /dev, /proc,
// /tmp, the synthesized /etc files), in plan order, and the plan's proc
// fallback, which the proc step depends on.
type premountSet struct {
	steps        []plan.Mount
	procFallback bool
}

// begins reports whether pl begins with exactly the steps of s, with the
// same proc fallback; an empty s begins nothing.
func (s premountSet) begins(pl *plan.Plan) bool { return nsinit.Begins(pl, s.steps, s.procFallback) }

// Bounds on what a warm init mounts ahead: a default plan begins with
// about 30 such steps, in a few KiB (the premount message must stay far
// below nsinit's 128 KiB).
const (
	maxPremount      = 64
	maxPremountBytes = 64 << 10
)

// premountWait bounds the wait for a warm init's answer: it mounts about
// 30 steps, in about a millisecond.
const premountWait = 10 * time.Second

// premount sends the init (started with nsinit.PremountArg, which waits
// for this message first) the steps of set with clones of their binds,
// and waits for its answer. The init mounts them on its new root while it
// waits for a plan; handOverPlan tells it to go on from there when the
// plan begins with exactly those steps, or to start over. When a clone
// fails or set is too large, the init is sent nothing to mount. It
// returns an error only when the init did not answer as it must (then it
// is of no use); an init that could not mount the steps answered with
// why, mounted none, and is used like any other.
func (in *initProc) premount(set premountSet) error {
	msg := nsinit.Message{Type: nsinit.MsgPremount}
	var fds []int
	ok := len(set.steps) > 0 && len(set.steps) <= maxPremount
	for _, m := range set.steps {
		if !ok {
			break
		}
		if !m.Cloned() {
			continue
		}
		fd, err := mount.Clone(m, -1)
		if err != nil {
			ok = false // cloneBinds tries it again and reports it with the plan
			break
		}
		fds = append(fds, fd)
	}
	if ok {
		pb, err := (&plan.Plan{Mounts: set.steps, ProcFallback: set.procFallback}).MarshalBinary()
		ok = err == nil && len(pb) <= maxPremountBytes
		msg.Premount = string(pb)
	}
	if !ok {
		closeFDs(fds)
		fds, msg.Premount = nil, ""
	}
	err := nsinit.Send(in.ctl.sock, msg, fds...)
	closeFDs(fds)
	if err != nil {
		return err
	}
	if err := waitReadable(in.ctl.sock, premountWait); err != nil {
		return err
	}
	r, rfds, err := nsinit.Recv(in.ctl.sock)
	closeFDs(rfds)
	switch {
	case err != nil:
		return err
	case r.Type == nsinit.MsgError:
		return fmt.Errorf("%s: %s", r.Stage, r.Error)
	case r.Type != nsinit.MsgPremounted:
		return fmt.Errorf("expected premounted message, got %q", r.Type)
	case r.Premounted == 0:
		return nil // nothing to mount, or it failed (r.Error): the plan mounts everything
	case !ok || r.Premounted != len(set.steps):
		return fmt.Errorf("the init says it mounted %d steps ahead; it was sent %d", r.Premounted, len(set.steps))
	}
	in.premounted = set
	return nil
}

// waitReadable waits until fd can be read, at most d.
func waitReadable(fd int, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("no answer in %s", d)
		}
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(pfd, int(left.Milliseconds())+1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		if n > 0 {
			return nil
		}
	}
}
