package connbroker

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

const (
	// maxInFlight bounds the notifications being decided at once by
	// Handler.Decide. Each runs in its own goroutine, so a slow decide
	// (one that dials) holds up only its own connect; beyond the bound the
	// broker refuses at once with EAGAIN, which connect(2) documents for
	// a transient shortage and programs retry.
	maxInFlight = 64

	// pollMillis is how often Serve looks at stop while no notification
	// comes.
	pollMillis = 200

	// maxErrno is the largest errno a Verdict may name. From 512 on are
	// the kernel's internal codes (ERESTARTSYS and the like, linux/errno.h),
	// which the kernel would act on when returning to the target rather
	// than pass on.
	maxErrno = 511
)

// Layout of the seccomp_unotify(2) structs (linux/seccomp.h), all in
// native byte order.
const (
	sizeofNotif = 80 // struct seccomp_notif: id, pid, flags, then struct seccomp_data
	sizeofResp  = 24 // struct seccomp_notif_resp: id u64, val s64, error s32, flags u32
	sizeofAddfd = 24 // struct seccomp_notif_addfd: id u64, flags, srcfd, newfd, newfd_flags u32
)

// notif is the part of struct seccomp_notif the broker uses.
type notif struct {
	id   uint64    // the notification's cookie
	pid  int       // the calling thread, in the reader's pid namespace
	nr   int32     // seccomp_data.nr
	arch uint32    // seccomp_data.arch
	args [6]uint64 // seccomp_data.args
}

func parseNotif(b []byte) notif {
	e := binary.NativeEndian
	n := notif{id: e.Uint64(b), pid: int(e.Uint32(b[8:])), nr: int32(e.Uint32(b[16:])), arch: e.Uint32(b[20:])}
	for i := range n.args {
		n.args[i] = e.Uint64(b[32+8*i:])
	}
	return n
}

// nativeArch returns the AUDIT_ARCH value of the syscalls this binary
// makes, the only one its filter lets reach the broker.
func nativeArch() (uint32, error) {
	switch runtime.GOARCH {
	case "amd64":
		return unix.AUDIT_ARCH_X86_64, nil
	case "arm64":
		return unix.AUDIT_ARCH_AARCH64, nil
	}
	return 0, fmt.Errorf("connbroker: serve: architecture %s is not supported: airlock filters amd64 and arm64", runtime.GOARCH)
}

// Serve answers the connect notifications of the seccomp filter whose
// listener fd is listener (from seccomp.InstallListener), calling decide
// for each connect whose fd and sockaddr it could read (see Verdict). It
// is Handler{Decide: decide}.Serve(listener, stop): see there.
func Serve(listener int, decide func(Request) Verdict, stop <-chan struct{}) error {
	return Handler{Decide: decide}.Serve(listener, stop)
}

// Serve answers the connect notifications of the seccomp filter whose
// listener fd is listener (from seccomp.InstallListener), asking h about
// each connect whose fd and sockaddr it could read (see Verdict). It
// answers the rest itself: EINVAL for an addrlen below 2 or above 128, or
// a sockaddr shorter than its family's struct, without reading memory for
// a bad addrlen; EBADF or ENOTSOCK for an fd that is not an open socket;
// EFAULT when the sockaddr is not readable; EACCES when the broker is not
// allowed to read the target (process_vm_readv, pidfd_getfd); EPERM for a
// foreign architecture, which a filter built by seccomp.Build never hands
// over, and for a syscall other than connect when h.Syscall is nil (with
// it, h.Syscall answers those, sharing Decide's bound). It answers
// SECCOMP_USER_NOTIF_FLAG_CONTINUE only when h asks for it
// (Verdict.Continue): see the package doc.
//
// One goroutine receives the notifications, reads each target and asks
// h.Quick, and answers there what it can; each Request Quick leaves goes
// to h.Decide on a goroutine of its own, at most 64 at a time; beyond
// that a connect is refused at once with EAGAIN. Decide may therefore
// dial (the target's thread waits in connect meanwhile), but it must
// bound the time it takes: Serve waits for every Decide in flight before
// it returns. When the target's connect is interrupted before the answer
// (a signal, or the target is killed), its notification is gone: the
// broker closes the connection Decide made and answers nothing, and the
// kernel restarts or fails the target's connect as for any interrupted
// syscall.
//
// Serve returns nil once stop is closed (nil stop: never) or every task
// that used the filter is gone (poll(2) reports POLLHUP, Linux 5.8). It
// returns an error when the listener fails or the kernel refuses an
// answer, which the broker cannot recover from. In every case it owns
// listener and closes it before it returns, after the last answer: from
// then on the kernel fails the filter's pending and future connects with
// ENOSYS, where a listener left open with nobody serving would block them
// forever.
//
// Serve panics if h.Decide is nil.
//
// Preconditions:
//   - the calling process may ptrace-attach to the target (ptrace(2)
//     access mode PTRACE_MODE_ATTACH_REALCREDS, which process_vm_readv and
//     pidfd_getfd check): the same uid and a Yama ptrace_scope of at most
//     1 for an ancestor, or CAP_SYS_PTRACE; otherwise every connect is
//     refused with EACCES;
//   - /proc is mounted for the supervisor's pid namespace.
func (h Handler) Serve(listener int, stop <-chan struct{}) error {
	if h.Decide == nil {
		panic("connbroker: Serve called with a nil decide")
	}
	b, err := newBroker(listener, h)
	if err != nil {
		unix.Close(listener)
		return err
	}
	err = b.serve(stop)
	b.inflight.Wait()
	if cerr := unix.Close(listener); err == nil && cerr != nil {
		err = fmt.Errorf("connbroker: close listener fd %d: %w", listener, cerr)
	}
	return err
}

// broker is one Serve call.
type broker struct {
	listener int
	quick    func(Request) (Verdict, bool) // nil: every Request goes to decide
	decide   func(Request) Verdict
	syscall  func(*Call) bool // nil: every syscall but connect is refused
	arch     uint32
	sizes    notifSizes

	slots    chan struct{} // one token per decide in flight
	inflight sync.WaitGroup

	loopbacks atomic.Uint32 // how many loopback addresses connectOwn has bound to

	failOnce sync.Once
	failed   chan struct{} // closed with err set when an answer was refused
	err      error         // set once, before failed is closed
}

func newBroker(listener int, h Handler) (*broker, error) {
	arch, err := nativeArch()
	if err != nil {
		return nil, err
	}
	sizes, err := getNotifSizes()
	if err != nil {
		return nil, fmt.Errorf("connbroker: seccomp(SECCOMP_GET_NOTIF_SIZES): %w: seccomp user notification needs Linux 5.0 with CONFIG_SECCOMP_FILTER", err)
	}
	if int(sizes.notif) < sizeofNotif || int(sizes.resp) < sizeofResp {
		return nil, fmt.Errorf("connbroker: airlock bug: the kernel's seccomp_notif is %d bytes and seccomp_notif_resp %d, smaller than linux/seccomp.h says", sizes.notif, sizes.resp)
	}
	return &broker{
		listener: listener,
		quick:    h.Quick,
		decide:   h.Decide,
		syscall:  h.Syscall,
		arch:     arch,
		sizes:    sizes,
		slots:    make(chan struct{}, maxInFlight),
		failed:   make(chan struct{}),
	}, nil
}

// fail records the first error that must stop Serve.
func (b *broker) fail(err error) {
	b.failOnce.Do(func() {
		b.err = err
		close(b.failed)
	})
}

// serve receives notifications and dispatches them until it must stop.
func (b *broker) serve(stop <-chan struct{}) error {
	// Only speed depends on it, so a kernel before 6.6 that does not
	// know the flag (EINVAL) changes nothing.
	_ = syncWakeUp(b.listener)
	// The kernel requires a zeroed buffer of its own struct's size, which
	// may be larger than ours.
	buf := make([]byte, b.sizes.notif)
	fds := []unix.PollFd{{Fd: int32(b.listener), Events: unix.POLLIN}}
	// An eventfd made readable when stop closes wakes poll at once: the
	// sandbox's teardown waits for Serve, and must not wait for pollMillis.
	if wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err == nil {
		defer unix.Close(wake)
		done := make(chan struct{})
		defer close(done)
		go func() {
			select {
			case <-stop:
			case <-b.failed:
			case <-done:
				return
			}
			_, _ = unix.Write(wake, []byte{1, 0, 0, 0, 0, 0, 0, 0})
		}()
		fds = append(fds, unix.PollFd{Fd: int32(wake), Events: unix.POLLIN})
	}
	for {
		select {
		case <-stop:
			return nil
		case <-b.failed:
			return b.err
		default:
		}
		for i := range fds {
			fds[i].Revents = 0
		}
		n, err := unix.Poll(fds, pollMillis)
		switch {
		case errors.Is(err, unix.EINTR) || n == 0:
			continue
		case err != nil:
			return fmt.Errorf("connbroker: poll listener fd %d: %w", b.listener, err)
		}
		re := fds[0].Revents
		switch {
		case re&unix.POLLNVAL != 0:
			return fmt.Errorf("connbroker: poll listener fd %d: it is not open: pass the fd seccomp.InstallListener returned", b.listener)
		case re&unix.POLLIN == 0 && re&(unix.POLLHUP|unix.POLLERR) != 0:
			return nil // no task uses the filter any more
		case re&unix.POLLIN == 0:
			continue
		}

		clear(buf)
		if _, err := ioctlBuf(b.listener, unix.SECCOMP_IOCTL_NOTIF_RECV, buf); err != nil {
			// ENOENT: the target was killed between poll and receive.
			if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EINTR) {
				continue
			}
			return fmt.Errorf("connbroker: receive notification on fd %d: %w: pass a seccomp listener fd", b.listener, err)
		}
		b.dispatch(parseNotif(buf))
	}
}

// dispatch answers the notification n: on the receiving goroutine when it
// can (what the broker refuses by itself, what Quick answers), else on a
// goroutine of its own, where Decide may block.
//
// Answering on the receiving goroutine is what makes a connect the sandbox
// carries out by itself cheap: with the listener's wake-ups synchronous
// (syncWakeUp) the target's thread and this goroutine's pass one CPU back
// and forth, where a hand-over to another goroutine wakes a thread on the
// other CPU and back again, an idle CPU each time in a VM (measured: 3 us
// for the round trip alone against 25-60 us).
func (b *broker) dispatch(n notif) {
	if n.nr != unix.SYS_CONNECT && n.arch == b.arch && b.syscall != nil {
		b.dispatchCall(n)
		return
	}
	req, sock, errno, ok := b.read(n)
	switch {
	case !ok:
		return // the target is gone: nothing to answer
	case errno != 0:
		b.respond(n.id, errno)
		return
	}
	if b.quick != nil {
		if v, ok := b.quick(req); ok {
			b.answerQuick(n.id, v)
			unix.Close(sock.copy)
			return
		}
	}
	select {
	case b.slots <- struct{}{}:
		b.inflight.Add(1)
		go func() {
			defer b.inflight.Done()
			defer func() { <-b.slots }()
			defer unix.Close(sock.copy)
			if errno, ok := b.carryOut(n.id, req, sock, b.decide(req)); ok {
				b.respond(n.id, errno)
			}
		}()
	default:
		unix.Close(sock.copy)
		b.respond(n.id, unix.EAGAIN)
	}
}

// dispatchCall offers the notification n of a syscall other than connect
// to Handler.Syscall, within the bound of notifications in flight (beyond
// it the call fails with EAGAIN at once, as it does when Syscall leaves
// it). A Call Syscall takes stays in flight until its Answer.
func (b *broker) dispatchCall(n notif) {
	select {
	case b.slots <- struct{}{}:
	default:
		b.respond(n.id, unix.EAGAIN)
		return
	}
	b.inflight.Add(1)
	c := &Call{Pid: n.pid, Nr: int(n.nr), Args: n.args, id: n.id, b: b, pidfd: -1}
	if !b.syscall(c) {
		c.Answer(unix.EAGAIN)
	}
}

// syncWakeUp sets SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP on the listener
// (SECCOMP_IOCTL_NOTIF_SET_FLAGS, Linux 6.6): the kernel wakes a waiter
// of the listener (this broker's poll) on the CPU of the target's thread
// that notified, and the target's thread on the CPU of the broker's
// thread that answered, as a synchronous hand-off instead of a wake-up on
// another CPU. It changes when threads run, nothing of what they may do.
func syncWakeUp(listener int) error {
	return unix.IoctlSetInt(listener, unix.SECCOMP_IOCTL_NOTIF_SET_FLAGS, unix.SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP)
}
