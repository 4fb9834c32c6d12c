package connbroker

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

const (
	// maxInFlight bounds the notifications being decided at once. Each
	// runs in its own goroutine, so a slow decide (one that dials) holds
	// up only its own connect; beyond the bound the broker refuses at
	// once with EAGAIN, which connect(2) documents for a transient
	// shortage and programs retry.
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
// answers the rest itself: EINVAL for an addrlen below 2 or above 128, or
// a sockaddr shorter than its family's struct, without reading memory for
// a bad addrlen; EBADF or ENOTSOCK for an fd that is not an open socket;
// EFAULT when the sockaddr is not readable; EACCES when the broker is not
// allowed to read the target (process_vm_readv, pidfd_getfd); EPERM for a
// syscall other than connect or a foreign architecture, which a filter
// built by seccomp.Build never hands over. It answers
// SECCOMP_USER_NOTIF_FLAG_CONTINUE only when decide asks for it
// (Verdict.Continue): see the package doc.
//
// Each notification is decided in its own goroutine, at most 64 at a
// time; beyond that a connect is refused at once with EAGAIN. decide may
// therefore dial (the target's thread waits in connect meanwhile), but it
// must bound the time it takes: Serve waits for every decide in flight
// before it returns. When the target's connect is interrupted before the
// answer (a signal, or the target is killed), its notification is gone:
// the broker closes the connection decide made and answers nothing, and
// the kernel restarts or fails the target's connect as for any
// interrupted syscall.
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
// Serve panics if decide is nil.
//
// Preconditions:
//   - the calling process may ptrace-attach to the target (ptrace(2)
//     access mode PTRACE_MODE_ATTACH_REALCREDS, which process_vm_readv and
//     pidfd_getfd check): the same uid and a Yama ptrace_scope of at most
//     1 for an ancestor, or CAP_SYS_PTRACE; otherwise every connect is
//     refused with EACCES;
//   - /proc is mounted for the supervisor's pid namespace.
func Serve(listener int, decide func(Request) Verdict, stop <-chan struct{}) error {
	if decide == nil {
		panic("connbroker: Serve called with a nil decide")
	}
	b, err := newBroker(listener, decide)
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
	decide   func(Request) Verdict
	arch     uint32
	sizes    notifSizes

	slots    chan struct{} // one token per notification in flight
	inflight sync.WaitGroup

	failOnce sync.Once
	failed   chan struct{} // closed with err set when an answer was refused
	err      error         // set once, before failed is closed
}

func newBroker(listener int, decide func(Request) Verdict) (*broker, error) {
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
		decide:   decide,
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
		nt := parseNotif(buf)
		select {
		case b.slots <- struct{}{}:
			b.inflight.Add(1)
			go func() {
				defer b.inflight.Done()
				defer func() { <-b.slots }()
				b.handle(nt)
			}()
		default:
			b.respond(nt.id, unix.EAGAIN)
		}
	}
}

// handle answers one notification, unless the target is gone.
func (b *broker) handle(n notif) {
	if errno, ok := b.answer(n); ok {
		b.respond(n.id, errno)
	}
}

// answer works out the answer to n, installing the connection when decide
// made one. It returns the errno to answer with (0: connect returns 0),
// and false when the notification is no longer valid and needs no answer.
func (b *broker) answer(n notif) (unix.Errno, bool) {
	if n.arch != b.arch || n.nr != unix.SYS_CONNECT {
		return unix.EPERM, true
	}
	// connect's fd and addrlen are ints: the kernel reads the low 32 bits
	// of the registers, and so does the broker.
	fd, addrlen := int(int32(n.args[0])), int(int32(n.args[2]))
	if addrlen < minAddrLen || addrlen > maxAddrLen {
		return unix.EINVAL, true
	}
	sock, errno := inspectSocket(n.pid, fd)
	var raw []byte
	if errno == 0 {
		defer unix.Close(sock.copy)
		raw, errno = readSockaddr(n.pid, n.args[1], addrlen)
	}
	// Only now is what was read known to be the target's: the thread was
	// still waiting in this connect after every read, so its pid had not
	// been reused.
	if !b.valid(n.id) {
		return 0, false
	}
	if errno != 0 {
		return errno, true
	}
	req, errno := parseSockaddr(raw)
	if errno != 0 {
		return errno, true
	}
	req.Pid, req.FD = n.pid, fd
	req.Domain, req.Type, req.Protocol = sock.domain, sock.typ, sock.protocol
	req.NetNS = sock.netns
	v := b.decide(req)
	switch {
	case v.Continue && v.Conn == nil && v.Errno == 0 && !v.Connect.IsValid():
		b.respondContinue(n.id)
		return 0, false // answered
	case v.Connect.IsValid() && v.Conn == nil && v.Errno == 0 && !v.Continue:
		return connectOwn(sock, v), true
	case v.Continue || v.Connect.IsValid():
		if v.Conn != nil {
			v.Conn.Close()
		}
		return unix.EACCES, true // a Verdict that asks for two things
	}
	return b.install(n.id, fd, sock.flags, v)
}

// connectOwn carries out v.Connect on the broker's copy of the target's
// socket and returns the errno the target's connect answers with.
func connectOwn(sock socketInfo, v Verdict) unix.Errno {
	dst := v.Connect
	var sa, loop unix.Sockaddr
	switch {
	case sock.domain == unix.AF_INET && dst.Addr().Is4():
		sa = &unix.SockaddrInet4{Addr: dst.Addr().As4(), Port: int(dst.Port())}
		loop = &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}
	case sock.domain == unix.AF_INET6:
		sa = &unix.SockaddrInet6{Addr: dst.Addr().As16(), Port: int(dst.Port())}
		loop = &unix.SockaddrInet6{Addr: netip.AddrFrom4([4]byte{127, 0, 0, 1}).As16()}
		if dst.Addr().Is6() && !dst.Addr().Is4In6() {
			loop = &unix.SockaddrInet6{Addr: netip.IPv6Loopback().As16()}
		}
	default:
		return unix.EAFNOSUPPORT
	}
	local, err := unix.Getsockname(sock.copy)
	if err != nil {
		return unix.EACCES
	}
	if addrOf(local).Port() == 0 {
		if err := unix.Bind(sock.copy, loop); err != nil {
			return errnoOr(err, unix.EADDRNOTAVAIL)
		}
		if local, err = unix.Getsockname(sock.copy); err != nil {
			return unix.EACCES
		}
	}
	if v.Bound != nil {
		v.Bound(addrOf(local))
	}
	return errnoOr(unix.Connect(sock.copy, sa), unix.ECONNREFUSED)
}

// addrOf returns the address of an AF_INET or AF_INET6 sockaddr, IPv4
// unmapped; the zero AddrPort for anything else.
func addrOf(sa unix.Sockaddr) netip.AddrPort {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port))
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr).Unmap(), uint16(a.Port))
	}
	return netip.AddrPort{}
}

// errnoOr returns err's errno (0 for nil), or def for an error without one.
func errnoOr(err error, def unix.Errno) unix.Errno {
	var e unix.Errno
	switch {
	case err == nil:
		return 0
	case errors.As(err, &e) && e <= maxErrno:
		return e
	}
	return def
}

// install carries out v for the notification id: it moves v.Conn into the
// target at fd, with the O_NONBLOCK and O_CLOEXEC of flags, and returns
// the errno to answer with and whether to answer at all (as answer does).
func (b *broker) install(id uint64, fd, flags int, v Verdict) (unix.Errno, bool) {
	if v.Conn != nil {
		// The supervisor's copy: the target has its own once installed.
		// A close error leaves nothing to undo.
		defer v.Conn.Close()
	}
	switch {
	case v.Errno != 0 && v.Errno <= maxErrno:
		return v.Errno, true
	case v.Errno != 0 || v.Conn == nil:
		return unix.EACCES, true
	}
	rc, err := v.Conn.SyscallConn()
	if err != nil {
		return unix.EACCES, true
	}
	errno, ok := unix.EACCES, true
	if err := rc.Control(func(src uintptr) { errno, ok = b.addFD(id, int(src), fd, flags) }); err != nil {
		return unix.EACCES, true // Conn was already closed
	}
	return errno, ok
}

// addFD installs the supervisor's socket src in the target at fd with
// SECCOMP_IOCTL_NOTIF_ADDFD and SECCOMP_ADDFD_FLAG_SETFD (Linux 5.9),
// which replaces whatever the target has at fd, as dup2 would. O_NONBLOCK
// is a flag of the open file, which the target and the supervisor now
// share, so it is set as the target had it before the target can see the
// socket; close-on-exec is a flag of the target's fd and given to ADDFD.
func (b *broker) addFD(id uint64, src, fd, flags int) (unix.Errno, bool) {
	fl, err := unix.FcntlInt(uintptr(src), unix.F_GETFL, 0)
	if err != nil {
		return unix.EACCES, true
	}
	if want := fl&^unix.O_NONBLOCK | flags&unix.O_NONBLOCK; want != fl {
		if _, err := unix.FcntlInt(uintptr(src), unix.F_SETFL, want); err != nil {
			return unix.EACCES, true
		}
	}
	arg := make([]byte, sizeofAddfd)
	e := binary.NativeEndian
	e.PutUint64(arg, id)
	e.PutUint32(arg[8:], unix.SECCOMP_ADDFD_FLAG_SETFD)
	e.PutUint32(arg[12:], uint32(src))
	e.PutUint32(arg[16:], uint32(fd))
	e.PutUint32(arg[20:], uint32(flags&unix.O_CLOEXEC))
	got, err := ioctlBuf(b.listener, unix.SECCOMP_IOCTL_NOTIF_ADDFD, arg)
	var errno unix.Errno
	switch {
	case errors.Is(err, unix.ENOENT):
		return 0, false // the target is gone, or its connect was interrupted
	case errors.As(err, &errno):
		// EBADF or EMFILE: fd is beyond the target's RLIMIT_NOFILE.
		return errno, true
	case err != nil:
		return unix.EACCES, true
	case got != fd:
		b.fail(fmt.Errorf("connbroker: airlock bug: ADDFD with SETFD installed fd %d, not the target's fd %d", got, fd))
		return 0, false
	}
	return 0, true
}

// valid reports whether the notification id still waits for an answer
// (SECCOMP_IOCTL_NOTIF_ID_VALID).
func (b *broker) valid(id uint64) bool {
	arg := make([]byte, 8)
	binary.NativeEndian.PutUint64(arg, id)
	_, err := ioctlBuf(b.listener, unix.SECCOMP_IOCTL_NOTIF_ID_VALID, arg)
	switch {
	case err == nil:
		return true
	case !errors.Is(err, unix.ENOENT):
		b.fail(fmt.Errorf("connbroker: check notification %#x: %w", id, err))
	}
	return false
}

// respondContinue answers the notification id with
// SECCOMP_USER_NOTIF_FLAG_CONTINUE: the kernel carries out the target's
// own connect (Verdict.Continue).
func (b *broker) respondContinue(id uint64) {
	resp := make([]byte, b.sizes.resp)
	e := binary.NativeEndian
	e.PutUint64(resp, id)
	e.PutUint32(resp[20:], unix.SECCOMP_USER_NOTIF_FLAG_CONTINUE)
	_, err := ioctlBuf(b.listener, unix.SECCOMP_IOCTL_NOTIF_SEND, resp)
	if err != nil && !errors.Is(err, unix.ENOENT) {
		b.fail(fmt.Errorf("connbroker: let notification %#x continue: %w", id, err))
	}
}

// respond answers the notification id: connect returns 0 for errno 0,
// else -1 with errno, and the kernel does nothing more.
func (b *broker) respond(id uint64, errno unix.Errno) {
	resp := make([]byte, b.sizes.resp)
	e := binary.NativeEndian
	e.PutUint64(resp, id)
	// val (resp[8:16]) stays 0: connect's result on success.
	e.PutUint32(resp[16:], uint32(-int32(errno)))
	_, err := ioctlBuf(b.listener, unix.SECCOMP_IOCTL_NOTIF_SEND, resp)
	if err != nil && !errors.Is(err, unix.ENOENT) { // ENOENT: the target is gone
		b.fail(fmt.Errorf("connbroker: answer notification %#x with errno %d: %w", id, errno, err))
	}
}
