package connbroker

import (
	"io"
	"net/netip"
	"sync/atomic"
	"syscall"
)

// Request is one intercepted connect(2), as the broker read it from the
// target. It is the broker's own copy: the target can change its memory
// afterwards, but the broker never reads the address again and never lets
// the kernel read it.
type Request struct {
	// Pid is the id of the calling thread (a tid) in the supervisor's pid
	// namespace.
	Pid int

	// FD is the fd number the target passed to connect. The broker installs
	// the verdict's connection at this number.
	FD int

	// Domain, Type and Protocol describe the target's socket (SO_DOMAIN,
	// SO_TYPE, SO_PROTOCOL; Type without SOCK_NONBLOCK or SOCK_CLOEXEC).
	// decide should make its socket alike, so that a UDP connect (a DNS
	// resolver's) gets a UDP socket and an AF_INET6 socket an AF_INET6
	// one. Domain may disagree with Family: decide refuses what it does
	// not understand.
	Domain, Type, Protocol int

	// Family is the sockaddr's sa_family as the target wrote it:
	// unix.AF_INET, AF_INET6, AF_UNIX, or any other value, AF_UNSPEC
	// included (which would dissolve the socket's association).
	Family int

	// Addr is the destination for AF_INET and AF_INET6. A v4-mapped IPv6
	// address is unmapped, so one rule covers both spellings of an IPv4
	// address; any other IPv6 address with a non-zero sin6_scope_id has
	// it as its zone, in decimal. It is the zero AddrPort for other
	// families.
	Addr netip.AddrPort

	// Path is the AF_UNIX destination: the socket's path, or "@" and the
	// name for an abstract socket. It is empty for other families.
	Path string

	// Raw is the sockaddr exactly as read: addrlen bytes, 2 to 128.
	Raw []byte

	// NetNS is the cookie of the network namespace the target's socket
	// belongs to (SO_NETNS_COOKIE, Linux 5.14), which a socket keeps for
	// life; compare it with NetNSCookie of a socket known to be in the
	// sandbox's namespace. It is 0 when the kernel does not tell.
	NetNS uint64
}

// Conn is a socket the supervisor connected for the target, as decide
// hands it back: a *net.TCPConn, *net.UDPConn or *net.UnixConn, or an
// *os.File (os.NewFile) holding a socket fd.
type Conn interface {
	syscall.Conn
	io.Closer
}

// Verdict is decide's answer to one Request. The zero Verdict refuses the
// connect with EACCES.
type Verdict struct {
	// Conn, when Errno is zero, is the connection to give the target. The
	// broker installs the socket in the target at Request.FD (replacing
	// the target's own socket there, whose options and local address are
	// therefore not kept), with O_NONBLOCK and close-on-exec as the
	// target's fd had them, and answers connect with 0; a non-blocking
	// connect thus succeeds at once rather than with EINPROGRESS. The
	// broker takes ownership of Conn whatever the Verdict and closes the
	// supervisor's copy. Nil with a zero Errno refuses with EACCES.
	Conn Conn

	// Errno, when non-zero, fails the connect with this errno (EACCES,
	// ECONNREFUSED, ENETUNREACH, ...). A value above 511, where the
	// kernel's internal codes start, refuses with EACCES.
	Errno syscall.Errno

	// Continue lets the kernel carry out the target's own connect
	// (SECCOMP_USER_NOTIF_FLAG_CONTINUE). The kernel then reads the
	// sockaddr again, after the check, so whatever the target wrote there
	// meanwhile is what gets connected: set it only where every address
	// the socket can reach is acceptable, which is a socket in a network
	// namespace that holds only lo and whose loopback is the sandbox's own
	// (check Request.NetNS). Conn, Errno and Connect must be unset, or the
	// connect is refused with EACCES.
	Continue bool

	// Connect, when valid (and Conn, Errno and Continue unset), connects
	// the target's own socket to this address instead of the one it asked
	// for. The broker does it from the supervisor on the socket it took
	// from the target (pidfd_getfd), so the socket keeps its fd number,
	// options and network namespace: an address on lo is the loopback of
	// the socket's namespace, not the supervisor's. A socket without a
	// local address is first bound to an ephemeral port on a loopback
	// address (127.0.0.1 to 127.255.255.254, a different one for each
	// Connect in turn; v4-mapped for AF_INET6, or ::1 for an IPv6
	// Connect), then Bound, when set, is called with the local address,
	// before the connect. The target's connect returns what the
	// supervisor's did, so a non-blocking socket may get EINPROGRESS and
	// complete later, as from its own connect; a stream socket that is
	// connected already answers 0 if it is connected to Connect (the
	// broker connected it for the same connect, which a signal then
	// interrupted and restarted), else EISCONN. For AF_INET6 an IPv4
	// Connect is v4-mapped.
	Connect netip.AddrPort

	// Bound, when set with Connect, is called exactly once, and must not
	// block: with the socket's local address before the broker connects
	// it, so the listener at Connect can tell the connection by its
	// source address; or with the zero AddrPort when the broker makes no
	// connection for this Verdict (it refuses it, or the socket cannot be
	// bound or is connected already), so whatever was kept for the
	// connection can be let go.
	Bound func(local netip.AddrPort)
}

// Handler is what Serve asks about the connects of one filter.
type Handler struct {
	// Quick, when set, is asked first about every Request, on the
	// goroutine that received its notification, which receives no other
	// notification until Quick returns: it must return at once, without
	// blocking, dialing or writing anywhere. It answers with its Verdict
	// and true, or leaves the Request to Decide with false. Its Verdict may
	// only let the connect continue or name an Errno: one with Conn or
	// Connect is refused with EACCES (Conn closed), as is the zero
	// Verdict. Nil leaves every Request to Decide.
	//
	// An answer from Quick costs the target no more than the kernel's
	// notification round trip and the reads the broker makes anyway; one
	// from Decide adds a hand-over to another goroutine and back.
	Quick func(Request) (Verdict, bool)

	// Decide answers every Request Quick leaves, each on a goroutine of
	// its own, so it may block (dial) for a bounded time. It must not be
	// nil.
	Decide func(Request) Verdict

	// Syscall, when set, takes the notifications of every syscall other
	// than connect that the filter hands over (the metadata broker's
	// chmod, chown, utimes and xattr calls). It is called on the goroutine
	// that receives the notifications, like Quick, so it must not block:
	// it may read what it needs through the Call (a few syscalls each) and
	// then either take the Call, returning true, and answer it exactly
	// once with Call.Answer, from any goroutine and soon (Serve waits for
	// every taken Call's answer before it returns; taken Calls count
	// against Decide's bound of 64 in flight), or leave it, returning
	// false, and the broker fails the call with EAGAIN. The broker never
	// lets such a call continue in the kernel: an answer that let the
	// target's own call run would read its memory again after the check.
	// Nil refuses those calls with EPERM.
	Syscall func(*Call) bool
}

// Call is one intercepted syscall other than connect, as Handler.Syscall
// receives it. Its methods (Linux only) read the target (its memory, its
// fds and its working folder) and answer it. What they read is the
// target's only once Valid has reported true afterwards (until then the
// thread id may have been reused), and it is a copy: the target can
// change its memory afterwards, which changes nothing of what was read.
type Call struct {
	// Pid is the calling thread (a tid) in the supervisor's pid namespace.
	Pid int
	// Nr is the syscall's number on the architecture this binary was
	// built for, the only one a filter built by seccomp.Build hands over.
	Nr int
	// Args are the syscall's six argument registers.
	Args [6]uint64

	id       uint64
	b        *broker
	pidfd    int // opened by the first FD call; -1 until then
	answered atomic.Bool
}
