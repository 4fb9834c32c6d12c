package connbroker

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"

	"golang.org/x/sys/unix"
)

// This file answers one notification: read what it asks about, then
// carry out a Verdict and answer the kernel.

// read reads what the notification n asks about: the target's socket and
// the sockaddr it points to. It returns the Request and the socket, whose
// copy the caller must close, when errno is 0; else the errno to refuse
// with and nothing to close; and false when the notification is no longer
// valid and needs no answer.
func (b *broker) read(n notif) (req Request, sock socketInfo, errno unix.Errno, ok bool) {
	if n.arch != b.arch || n.nr != unix.SYS_CONNECT {
		return Request{}, socketInfo{}, unix.EPERM, true
	}
	// connect's fd and addrlen are ints: the kernel reads the low 32 bits
	// of the registers, and so does the broker.
	fd, addrlen := int(int32(n.args[0])), int(int32(n.args[2]))
	if addrlen < minAddrLen || addrlen > maxAddrLen {
		return Request{}, socketInfo{}, unix.EINVAL, true
	}
	sock, errno = inspectSocket(n.pid, fd)
	if errno == 0 {
		var raw []byte
		if raw, errno = readSockaddr(n.pid, n.args[1], addrlen); errno == 0 {
			req, errno = parseSockaddr(raw)
		}
		if errno != 0 {
			unix.Close(sock.copy)
		}
	}
	// Only now is what was read known to be the target's: the thread was
	// still waiting in this connect after every read, so its pid had not
	// been reused.
	if !b.valid(n.id) {
		if errno == 0 {
			unix.Close(sock.copy)
		}
		return Request{}, socketInfo{}, 0, false
	}
	if errno != 0 {
		return Request{}, socketInfo{}, errno, true
	}
	req.Pid, req.FD = n.pid, fd
	req.Domain, req.Type, req.Protocol = sock.domain, sock.typ, sock.protocol
	req.NetNS = sock.netns
	return req, sock, 0, true
}

// answerQuick answers the notification id with Handler.Quick's Verdict
// v, which may only continue or refuse: nothing Quick returns is ever
// installed or connected on the receiving goroutine.
func (b *broker) answerQuick(id uint64, v Verdict) {
	switch {
	case v.Conn != nil || v.Connect.IsValid():
		discard(v)
	case v.Continue && v.Errno == 0:
		b.respondContinue(id)
		return
	case v.Errno != 0 && v.Errno <= maxErrno && !v.Continue:
		b.respond(id, v.Errno)
		return
	}
	b.respond(id, unix.EACCES)
}

// discard lets go of what a Verdict the broker does not carry out holds:
// it closes Conn and tells Bound that no connection will come.
func discard(v Verdict) {
	if v.Conn != nil {
		v.Conn.Close()
	}
	if v.Connect.IsValid() && v.Bound != nil {
		v.Bound(netip.AddrPort{})
	}
}

// carryOut carries out decide's Verdict v on the Request r of the
// notification id, whose socket is sock. It returns the errno to answer
// with (0: connect returns 0), and false when it answered itself or the
// notification is no longer valid.
func (b *broker) carryOut(id uint64, r Request, sock socketInfo, v Verdict) (unix.Errno, bool) {
	switch {
	case v.Continue && v.Conn == nil && v.Errno == 0 && !v.Connect.IsValid():
		b.respondContinue(id)
		return 0, false // answered
	case v.Connect.IsValid() && v.Conn == nil && v.Errno == 0 && !v.Continue:
		return b.connectOwn(sock, v), true
	case v.Continue || v.Connect.IsValid():
		discard(v)
		return unix.EACCES, true // a Verdict that asks for two things
	}
	return b.install(id, r.Pid, r.FD, v)
}

// connectOwn carries out v.Connect on the broker's copy of the target's
// socket and returns the errno the target's connect answers with. It
// calls v.Bound once: with the local address before it connects, or with
// the zero AddrPort when it does not.
func (b *broker) connectOwn(sock socketInfo, v Verdict) unix.Errno {
	told := false
	tell := func(local netip.AddrPort) {
		if v.Bound != nil && !told {
			told = true
			v.Bound(local)
		}
	}
	defer tell(netip.AddrPort{})
	dst := v.Connect
	want := netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	var sa unix.Sockaddr
	switch {
	case sock.domain == unix.AF_INET && dst.Addr().Is4():
		sa = &unix.SockaddrInet4{Addr: dst.Addr().As4(), Port: int(dst.Port())}
	case sock.domain == unix.AF_INET6:
		sa = &unix.SockaddrInet6{Addr: dst.Addr().As16(), Port: int(dst.Port())}
	default:
		return unix.EAFNOSUPPORT
	}
	// A stream socket that is connected already was connected here by the
	// broker when the target's connect was interrupted by a signal after
	// that and restarted, which asks again: it is where it was asked to
	// go. Connected anywhere else it stays so, as from the kernel's
	// connect (EISCONN).
	if peer, err := unix.Getpeername(sock.copy); err == nil && sock.typ == unix.SOCK_STREAM {
		if addrOf(peer) == want {
			return 0
		}
		return unix.EISCONN
	}
	local, err := unix.Getsockname(sock.copy)
	if err != nil {
		return unix.EACCES
	}
	if addrOf(local).Port() == 0 {
		if err := unix.Bind(sock.copy, b.bindAddr(sock.domain, dst.Addr())); err != nil {
			return errnoOr(err, unix.EADDRNOTAVAIL)
		}
		if local, err = unix.Getsockname(sock.copy); err != nil {
			return unix.EACCES
		}
	}
	tell(addrOf(local))
	err = unix.Connect(sock.copy, sa)
	if errors.Is(err, unix.EISCONN) {
		// A signal to this thread (the Go runtime's preemption) restarts
		// a blocking connect (SA_RESTART); when the handshake completed
		// meanwhile, the restarted call finds the socket connected.
		if peer, perr := unix.Getpeername(sock.copy); perr == nil && addrOf(peer) == want {
			return 0
		}
	}
	return errnoOr(err, unix.ECONNREFUSED)
}

// bindAddr is where connectOwn binds a socket of domain without a local
// address before it connects it to dst: the next loopback address, or ::1
// for an IPv6 dst. An address of its own each time, because a bind to an
// ephemeral port of one address searches every port of that address that
// is in use, TIME_WAIT included: on 127.0.0.1 alone that took 490 us per
// connect after 20000 tunnels, and runs out of ports after some 28000 in
// a minute.
func (b *broker) bindAddr(domain int, dst netip.Addr) unix.Sockaddr {
	switch {
	case domain == unix.AF_INET:
		return &unix.SockaddrInet4{Addr: b.loopback()}
	case dst.Is6() && !dst.Is4In6():
		return &unix.SockaddrInet6{Addr: netip.IPv6Loopback().As16()}
	}
	return &unix.SockaddrInet6{Addr: netip.AddrFrom4(b.loopback()).As16()}
}

// loopback returns the addresses from 127.0.0.1 to 127.255.255.254 in
// turn, one per call: each has ephemeral ports of its own, so a bind to
// one finds a free port at once, and its connections, even in TIME_WAIT,
// hold no port another needs.
func (b *broker) loopback() [4]byte {
	n := (b.loopbacks.Add(1)-1)%(1<<24-2) + 1
	return [4]byte{127, byte(n >> 16), byte(n >> 8), byte(n)}
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
// target, the thread tid, at fd, with the O_NONBLOCK and O_CLOEXEC the
// target's fd has, and returns the errno to answer with and whether to
// answer at all (as carryOut does).
func (b *broker) install(id uint64, tid, fd int, v Verdict) (unix.Errno, bool) {
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
	// The fd's flags are read only here, where they are needed, after the
	// notification was found valid: if the thread has died since and its
	// tid was reused, the flags read are another's, but ADDFD, which
	// names the notification, then fails and installs nothing.
	flags, err := fdinfoFlags(tid, fd)
	switch {
	case errors.Is(err, os.ErrNotExist): // closed since the copy was taken
		return unix.EBADF, true
	case err != nil:
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
