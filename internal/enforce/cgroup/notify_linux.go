package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// Notifier wakes a watcher when the kernel announces that one of a group's
// limit counters (Events) may have changed, so that the watcher need not
// poll them. The announcements are: a modification of cgroup v2
// pids.events and memory.events (inotify IN_MODIFY; cgroup-v2.rst: "a
// value change in this file generates a file modified event"), and the
// cgroup v1 memory controller's OOM notification (an eventfd registered
// through cgroup.event_control on memory.oom_control). cgroup v1
// pids.events announces nothing: Covers reports false for it and the
// watcher must poll.
//
// A wake-up says only "read Events now"; it may be spurious (the group's
// removal also signals the v1 eventfd).
type Notifier struct {
	c     chan struct{}
	files []*os.File
	wg    sync.WaitGroup
	pids  bool
	oom   bool
}

// Notify starts a Notifier for the group's counters. It returns an error
// only when the kernel refused something it should offer (inotify or
// eventfd); a counter it does not announce is reported by Covers.
func (g *Group) Notify() (*Notifier, error) {
	n := &Notifier{c: make(chan struct{}, 1)}
	g.mu.Lock()
	err := g.notifyLocked(n)
	g.mu.Unlock()
	if err != nil {
		n.Close()
		return nil, err
	}
	for _, f := range n.files {
		n.wg.Add(1)
		go n.forward(f)
	}
	return n, nil
}

func (g *Group) notifyLocked(n *Notifier) error {
	if g.destroyed {
		return fmt.Errorf("cgroup: notify %s: group is destroyed: Create a new one", g.plan.Name)
	}
	var v2 []string
	for _, d := range g.plan.Dirs {
		if d.V2 && d.has(Pids) {
			v2 = append(v2, filepath.Join(d.Path, "pids.events"))
			n.pids = true
		}
		if d.V2 && d.has(Memory) {
			v2 = append(v2, filepath.Join(d.Path, "memory.events"))
			n.oom = true
		}
		if !d.V2 && d.has(Memory) {
			if err := g.oomEventFD(n, d); err != nil {
				return err
			}
			n.oom = true
		}
	}
	if len(v2) == 0 {
		return nil
	}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return fmt.Errorf("cgroup: notify %s: inotify_init1: %w", g.plan.Name, err)
	}
	n.files = append(n.files, os.NewFile(uintptr(fd), "inotify"))
	for _, name := range v2 {
		if _, err := unix.InotifyAddWatch(fd, name, unix.IN_MODIFY); err != nil {
			return fmt.Errorf("cgroup: notify: watch %s: %w", name, err)
		}
	}
	return nil
}

// oomEventFD registers an eventfd for v1 OOM notifications of d
// (cgroup-v1/memory.rst, "OOM Control").
func (g *Group) oomEventFD(n *Notifier, d Dir) error {
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return fmt.Errorf("cgroup: notify %s: eventfd: %w", g.plan.Name, err)
	}
	n.files = append(n.files, os.NewFile(uintptr(efd), "oom eventfd"))
	ctl := filepath.Join(d.Path, "memory.oom_control")
	cfd, err := g.openIn(ctl, unix.O_RDONLY)
	if err != nil {
		return fmt.Errorf("cgroup: notify: %w", err)
	}
	// The registration holds the eventfd, not the control file.
	defer unix.Close(cfd) // read-only: nothing to flush
	return g.write(filepath.Join(d.Path, "cgroup.event_control"), strconv.Itoa(efd)+" "+strconv.Itoa(cfd))
}

// forward turns readiness of f into a pending wake-up until f is closed.
func (n *Notifier) forward(f *os.File) {
	defer n.wg.Done()
	// Large enough for any inotify event (struct inotify_event plus a
	// name) and for an eventfd's 8-byte counter.
	buf := make([]byte, unix.SizeofInotifyEvent+unix.NAME_MAX+1)
	for {
		if _, err := f.Read(buf); err != nil {
			if errors.Is(err, os.ErrClosed) {
				return
			}
			if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) {
				continue
			}
			return // anything else: the watcher's own timer remains
		}
		select {
		case n.c <- struct{}{}:
		default: // a wake-up is already pending
		}
	}
}

// C returns the channel that receives a value when the counters may have
// changed. Nil Notifiers return nil (a channel that never fires).
func (n *Notifier) C() <-chan struct{} {
	if n == nil {
		return nil
	}
	return n.c
}

// Covers reports which of Events' counters the kernel announces here:
// refused forks (PidsMaxHits) and OOM kills.
func (n *Notifier) Covers() (pids, oom bool) {
	if n == nil {
		return false, false
	}
	return n.pids, n.oom
}

// Close stops the Notifier and waits until it has released everything.
// It is safe on a nil Notifier and idempotent.
func (n *Notifier) Close() {
	if n == nil {
		return
	}
	for _, f := range n.files {
		_ = f.Close() // inotify or eventfd: nothing to flush; a second Close reports ErrClosed
	}
	n.wg.Wait()
}
