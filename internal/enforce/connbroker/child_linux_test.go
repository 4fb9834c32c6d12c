package connbroker

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/enforce/seccomp"
	"github.com/airlock-sandbox/airlock/plan"
)

// The target side of the tests: the test binary re-executed with childEnv
// set to a mode. It installs a filter whose connect goes to a listener on
// its main thread, sends the listener to the parent over fd 3 (a unix
// socketpair) and closes its own copy, then makes the mode's connects from
// that thread with raw syscalls and prints "key value" lines, and "done"
// last.

// Environment of a child.
const (
	childEnv     = "AIRLOCK_BROKER_CHILD"     // the mode
	forbiddenEnv = "AIRLOCK_BROKER_FORBIDDEN" // ip:port of a loopback listener no connect may reach
	unixEnv      = "AIRLOCK_BROKER_UNIX"      // path of a unix listener no connect may reach
	abstractEnv  = "AIRLOCK_BROKER_ABSTRACT"  // "@name" of an abstract unix listener, likewise
	benchEnv     = "AIRLOCK_BROKER_BENCH"     // the bench child's "udp" or "tcp", and how many connects
	plainEnv     = "AIRLOCK_BROKER_PLAIN"     // "1": the filter lets connect through (a baseline)
	listEnv      = "AIRLOCK_BROKER_LIST"      // the list child's "key=ip:port" destinations, comma-separated
	callsEnv     = "AIRLOCK_BROKER_CALLS"     // "1": the filter hands fchmodat over too (Handler.Syscall)
	ctlFD        = 3                          // the socketpair end, ExtraFiles[0]
)

// testNet is a TEST-NET-1 address (RFC 5737): never routed, so nothing
// outside this machine can be reached even if a connect leaked.
var testNet = netip.MustParseAddr("192.0.2.1")

// childModes are the targets, by mode.
var childModes = map[string]func() error{
	"redirect": childRedirect,
	"own":      childOwn,
	"refuse":   childConnectForbidden,
	"toctou":   childTOCTOU,
	"swap":     childSwap,
	"unix":     childUnix,
	"gone":     childGone,
	"pending":  childPending,
	"badargs":  childBadArgs,
	"bench":    childBench,
	"list":     childList,
	"calls":    childCalls,
}

// runChild is the whole life of a child; it returns the exit status.
func runChild(mode string) int {
	fn, ok := childModes[mode]
	if !ok {
		fmt.Fprintf(os.Stderr, "child: unknown mode %q\n", mode)
		return 2
	}
	if err := installAndSend(); err != nil {
		fmt.Fprintf(os.Stderr, "child %s: %v\n", mode, err)
		return 3
	}
	if err := fn(); err != nil {
		fmt.Fprintf(os.Stderr, "child %s: %v\n", mode, err)
		return 3
	}
	fmt.Println("done")
	return 0
}

// notifyProfile is the default profile with connect sent to the listener,
// or left as it is when plainEnv is set.
func notifyProfile() plan.Seccomp {
	p := plan.DefaultSeccomp()
	if os.Getenv(plainEnv) == "1" {
		return p
	}
	for i := range p.Syscalls {
		if p.Syscalls[i].Name == "connect" || p.Syscalls[i].Name == "fchmodat" && os.Getenv(callsEnv) == "1" {
			p.Syscalls[i].Rules = []plan.SyscallRule{{Action: plan.ActNotify}}
		}
	}
	return p
}

// installAndSend filters the calling thread (locked for good by
// InstallListener) and passes the listener to the parent.
func installAndSend() error {
	runtime.LockOSThread()
	prog, err := seccomp.Build(notifyProfile(), seccomp.Options{})
	if err != nil {
		return err
	}
	lfd, err := seccomp.InstallListener(prog)
	if err != nil {
		return err
	}
	if err := unix.Sendmsg(ctlFD, []byte{'L'}, unix.UnixRights(lfd), nil, 0); err != nil {
		return fmt.Errorf("send listener: %w", err)
	}
	// The target must not hold its own listener: the parent's copy is the
	// only one, so that closing it ends the filter's answers.
	return unix.Close(lfd)
}

// inet4 is a sockaddr_in in an 8-byte-aligned buffer, so that a second
// thread can swap its first word (family, port, address) atomically.
type inet4 [2]uint64

func inet4Word(ap netip.AddrPort) uint64 {
	var b [8]byte
	binary.NativeEndian.PutUint16(b[:], unix.AF_INET)
	binary.BigEndian.PutUint16(b[2:], ap.Port())
	a := ap.Addr().As4()
	copy(b[4:], a[:])
	return binary.NativeEndian.Uint64(b[:])
}

// Sockaddrs handed to rawConnect live in package variables, which never
// move, so their addresses may be kept as uintptr.
var (
	toctouAddr  inet4        // flipped by childTOCTOU's second thread
	swapAddr    inet4        // rewritten by childSwap's second thread
	badArgsAddr inet4        // childBadArgs' valid sockaddr
	badArgsBig  [4096]byte   // childBadArgs' readable 4096 bytes
	unmapped    = uintptr(8) // an address in the never-mapped first page
)

// rawConnect calls connect(2) with the sockaddr at p, length n (all 64
// bits of the register), and returns its errno (0 on success).
func rawConnect(fd int, p uintptr, n uint64) unix.Errno {
	_, _, errno := unix.Syscall(unix.SYS_CONNECT, uintptr(fd), p, uintptr(n))
	return errno
}

// connectTo makes a socket and connects it to sa; it returns the socket
// and connect's errno.
func connectTo(domain, typ int, sa unix.Sockaddr) (int, unix.Errno, error) {
	fd, err := unix.Socket(domain, typ, 0)
	if err != nil {
		return -1, 0, fmt.Errorf("socket: %w", err)
	}
	return fd, errnoOf(unix.Connect(fd, sa)), nil
}

func errnoOf(err error) unix.Errno {
	var e unix.Errno
	if err == nil || !errors.As(err, &e) {
		return 0
	}
	return e
}

func sockaddr(ap netip.AddrPort) unix.Sockaddr {
	if ap.Addr().Is4() {
		return &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
	}
	return &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}
}

func forbidden() (netip.AddrPort, error) {
	return netip.ParseAddrPort(os.Getenv(forbiddenEnv))
}

// describe prints what the target sees of its fd after a connect: its
// number, O_NONBLOCK, FD_CLOEXEC, type and peer.
func describe(key string, fd int) error {
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return err
	}
	fdfl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	if err != nil {
		return err
	}
	typ, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
	if err != nil {
		return err
	}
	peer, local := "none", "none"
	if sa, err := unix.Getpeername(fd); err == nil {
		if in, ok := sa.(*unix.SockaddrInet4); ok {
			peer = netip.AddrPortFrom(netip.AddrFrom4(in.Addr), uint16(in.Port)).String()
		}
	}
	if sa, err := unix.Getsockname(fd); err == nil {
		if in, ok := sa.(*unix.SockaddrInet4); ok {
			local = netip.AddrPortFrom(netip.AddrFrom4(in.Addr), uint16(in.Port)).String()
		}
	}
	fmt.Printf("%s.fd %d\n%s.nonblock %v\n%s.cloexec %v\n%s.type %d\n%s.peer %s\n%s.local %s\n",
		key, fd, key, fl&unix.O_NONBLOCK != 0, key, fdfl&unix.FD_CLOEXEC != 0, key, typ, key, peer, key, local)
	return nil
}

// childRedirect connects to TEST-NET addresses, which the parent redirects
// to loopback listeners, and writes through the connections it gets.
func childRedirect() error {
	fmt.Printf("tid %d\n", unix.Gettid())
	for _, c := range []struct {
		key  string
		typ  int
		dst  netip.AddrPort
		data string
	}{
		{"nonblock", unix.SOCK_STREAM | unix.SOCK_NONBLOCK | unix.SOCK_CLOEXEC, netip.AddrPortFrom(testNet, 80), "hello"},
		{"blocking", unix.SOCK_STREAM, netip.AddrPortFrom(testNet, 80), "world"},
		{"udp", unix.SOCK_DGRAM | unix.SOCK_CLOEXEC, netip.AddrPortFrom(testNet, 53), "query"},
	} {
		fd, errno, err := connectTo(unix.AF_INET, c.typ, sockaddr(c.dst))
		if err != nil {
			return err
		}
		fmt.Printf("%s.connect %d\n", c.key, errno)
		if err := describe(c.key, fd); err != nil {
			return err
		}
		n, err := unix.Write(fd, []byte(c.data))
		fmt.Printf("%s.write %d %d\n", c.key, n, errnoOf(err))
		unix.Close(fd)
	}
	// An AF_INET6 socket to the v4-mapped TEST-NET address: the parent
	// sees it unmapped and refuses it.
	fd, errno, err := connectTo(unix.AF_INET6, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, sockaddr(netip.AddrPortFrom(netip.AddrFrom16(testNet.As16()), 443)))
	if err != nil {
		return err
	}
	fmt.Printf("mapped.connect %d\n", errno)
	return unix.Close(fd)
}

// childOwn connects its own sockets: to TEST-NET, which the parent
// connects to a loopback listener instead (blocking and non-blocking, one
// already bound, and one that then connects to TEST-NET again, as a
// connect restarted after a signal does); to the forbidden listener,
// which the parent lets continue (once more, then to TEST-NET: EISCONN);
// and to TEST-NET port 9, which the parent answers with a Verdict that
// asks for two things.
func childOwn() error {
	dst, err := forbidden()
	if err != nil {
		return err
	}
	own := netip.AddrPortFrom(testNet, 80)
	for _, c := range []struct {
		key   string
		typ   int
		to    netip.AddrPort
		bind  bool
		data  string
		again netip.AddrPort // connect again, to this
	}{
		{"blocking", unix.SOCK_STREAM, own, false, "own", netip.AddrPort{}},
		{"nonblock", unix.SOCK_STREAM | unix.SOCK_NONBLOCK, own, false, "nb", netip.AddrPort{}},
		{"bound", unix.SOCK_STREAM, own, true, "bound", netip.AddrPort{}},
		{"again", unix.SOCK_STREAM, own, false, "again", own},
		{"continue", unix.SOCK_STREAM, dst, false, "cont", netip.AddrPort{}},
		{"elsewhere", unix.SOCK_STREAM, dst, false, "", own},
		{"both", unix.SOCK_STREAM, netip.AddrPortFrom(testNet, 9), false, "", netip.AddrPort{}},
	} {
		fd, err := unix.Socket(unix.AF_INET, c.typ, 0)
		if err != nil {
			return err
		}
		if c.bind {
			if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
				return err
			}
			sa, _ := unix.Getsockname(fd)
			fmt.Printf("bound.port %d\n", sa.(*unix.SockaddrInet4).Port)
		}
		errno := errnoOf(unix.Connect(fd, sockaddr(c.to)))
		fmt.Printf("%s.connect %d\n", c.key, errno)
		if errno == unix.EINPROGRESS {
			pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
			unix.Poll(pfd, 10000)
			v, _ := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
			fmt.Printf("%s.so_error %d\n", c.key, v)
		}
		if c.again.IsValid() {
			fmt.Printf("%s.again %d\n", c.key, errnoOf(unix.Connect(fd, sockaddr(c.again))))
		}
		if err := describe(c.key, fd); err != nil {
			return err
		}
		if c.data != "" {
			n, err := unix.Write(fd, []byte(c.data))
			fmt.Printf("%s.write %d %d\n", c.key, n, errnoOf(err))
		}
		unix.Close(fd)
	}
	return nil
}

// childConnectForbidden connects straight to the forbidden listener.
func childConnectForbidden() error {
	dst, err := forbidden()
	if err != nil {
		return err
	}
	fd, errno, err := connectTo(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, sockaddr(dst))
	if err != nil {
		return err
	}
	fmt.Printf("connect %d\n", errno)
	return unix.Close(fd)
}

// toctouAttempts is how many connects the TOCTOU child makes.
const toctouAttempts = 200

// childTOCTOU connects again and again while another thread flips the
// sockaddr between an address the parent allows and the forbidden one.
// A broker that let the kernel re-read the address after its check would
// sooner or later connect to the forbidden listener.
func childTOCTOU() error {
	dst, err := forbidden()
	if err != nil {
		return err
	}
	allowed, bad := inet4Word(netip.AddrPortFrom(testNet, 80)), inet4Word(dst)
	sa := &toctouAddr
	atomic.StoreUint64(&sa[0], allowed)
	var stop atomic.Bool
	flipped := make(chan struct{})
	go func() { // never on this locked thread
		defer close(flipped)
		for !stop.Load() {
			atomic.StoreUint64(&sa[0], bad)
			atomic.StoreUint64(&sa[0], allowed)
		}
	}()
	counts := map[unix.Errno]int{}
	peers := map[string]int{}
	for range toctouAttempts {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			stop.Store(true)
			return fmt.Errorf("socket: %w", err)
		}
		errno := rawConnect(fd, uintptr(unsafe.Pointer(sa)), uint64(unsafe.Sizeof(*sa)))
		counts[errno]++
		if errno == 0 {
			if p, err := unix.Getpeername(fd); err == nil {
				in := p.(*unix.SockaddrInet4)
				peers[netip.AddrPortFrom(netip.AddrFrom4(in.Addr), uint16(in.Port)).String()]++
			}
		}
		unix.Close(fd)
	}
	stop.Store(true)
	<-flipped
	for errno, n := range counts {
		fmt.Printf("errno %d %d\n", errno, n)
	}
	for peer, n := range peers {
		fmt.Printf("peer %s %d\n", peer, n)
	}
	return nil
}

// childSwap connects once to the allowed address; while the parent's
// decide holds the connect, it asks a second thread (over the control
// socket) to rewrite the sockaddr to the forbidden address, and waits
// until that is done before it answers. A broker that let the kernel read
// the address after its check would connect to the forbidden listener.
func childSwap() error {
	dst, err := forbidden()
	if err != nil {
		return err
	}
	sa := &swapAddr
	atomic.StoreUint64(&sa[0], inet4Word(netip.AddrPortFrom(testNet, 80)))
	swapped := make(chan error, 1)
	go func() { // never on this locked thread
		var b [1]byte
		if _, err := unix.Read(ctlFD, b[:]); err != nil {
			swapped <- fmt.Errorf("wait for the swap request: %w", err)
			return
		}
		atomic.StoreUint64(&sa[0], inet4Word(dst))
		_, err := unix.Write(ctlFD, []byte{'K'})
		swapped <- err
	}()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	fmt.Printf("connect %d\n", rawConnect(fd, uintptr(unsafe.Pointer(sa)), uint64(unsafe.Sizeof(*sa))))
	if err := describe("sock", fd); err != nil {
		return err
	}
	unix.Close(fd)
	if err := <-swapped; err != nil {
		return err
	}
	fmt.Printf("memory %v\n", atomic.LoadUint64(&sa[0]) == inet4Word(dst))
	return nil
}

// childUnix connects to the unix listeners, by path and abstract name.
func childUnix() error {
	for _, c := range []struct{ key, name string }{
		{"path", os.Getenv(unixEnv)},
		{"abstract", os.Getenv(abstractEnv)},
	} {
		fd, errno, err := connectTo(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, &unix.SockaddrUnix{Name: c.name})
		if err != nil {
			return err
		}
		fmt.Printf("%s.connect %d\n", c.key, errno)
		unix.Close(fd)
	}
	return nil
}

// childGone connects once while the parent serves, then waits until the
// parent has stopped serving, and connects again.
func childGone() error {
	if err := childConnectForbidden(); err != nil {
		return err
	}
	if _, err := unix.Write(ctlFD, []byte{'A'}); err != nil {
		return err
	}
	var b [1]byte
	if _, err := unix.Read(ctlFD, b[:]); err != nil {
		return err
	}
	return childConnectForbidden()
}

// childPending connects while nobody serves (the parent closes the
// listener while the connect waits), then once more.
func childPending() error {
	if err := childConnectForbidden(); err != nil {
		return err
	}
	return childConnectForbidden()
}

// childBadArgs makes connects the broker must refuse without asking
// decide, except "highbits", and prints their errnos.
func childBadArgs() error {
	dst, err := forbidden()
	if err != nil {
		return err
	}
	sock, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(sock)
	devnull, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(devnull)

	badArgsAddr[0] = inet4Word(dst)
	binary.NativeEndian.PutUint64(badArgsBig[:], badArgsAddr[0])
	sa, big := uintptr(unsafe.Pointer(&badArgsAddr)), uintptr(unsafe.Pointer(&badArgsBig))
	for _, c := range []struct {
		key string
		fd  int
		p   uintptr
		n   uint64
	}{
		// Lengths out of range, with a pointer that faults if read: EINVAL
		// shows the broker did not read.
		{"len0", sock, unmapped, 0},
		{"len1", sock, unmapped, 1},
		{"len4096", sock, unmapped, 4096},
		{"lenneg", sock, unmapped, 0xffffffff}, // int -1
		{"len4096valid", sock, big, 4096},
		{"badptr", sock, unmapped, 16}, // EFAULT
		{"short", sock, sa, 8},         // AF_INET in 8 bytes: EINVAL
		{"notsock", devnull, sa, 16},
		{"badfd", 9999, sa, 16},
		{"negfd", -1, sa, 16},
		// The kernel reads addrlen as an int: the high half is ignored, so
		// this is a valid 16-byte sockaddr that decide sees.
		{"highbits", sock, sa, 1<<32 | 16},
	} {
		fmt.Printf("%s %d\n", c.key, rawConnect(c.fd, c.p, c.n))
	}
	return nil
}

// childBench makes connects as fast as it can and prints how long they
// took: "udp N" connects one UDP socket to 127.0.0.1:9 N times; "tcp N"
// connects N new TCP sockets to the forbidden listener (which the parent
// lets continue, connects elsewhere or answers with a connection of its
// own) and closes each.
func childBench() error {
	kind, count, _ := strings.Cut(os.Getenv(benchEnv), " ")
	n, err := strconv.Atoi(count)
	if err != nil {
		return fmt.Errorf("%s: %w", benchEnv, err)
	}
	var one func() error
	switch kind {
	case "udp":
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		sa := &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}, Port: 9}
		one = func() error { return unix.Connect(fd, sa) }
	case "tcp":
		dst, err := forbidden()
		if err != nil {
			return err
		}
		one = func() error {
			fd, errno, err := connectTo(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, sockaddr(dst))
			if err == nil && errno != 0 {
				err = errno
			}
			// Reset rather than close: thousands of connections in
			// TIME_WAIT would use up the ephemeral ports.
			unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1})
			unix.Close(fd)
			return err
		}
	default:
		return fmt.Errorf("%s: unknown kind %q", benchEnv, kind)
	}
	start := time.Now()
	for range n {
		if err := one(); err != nil {
			return fmt.Errorf("connect: %w", err)
		}
	}
	fmt.Printf("elapsed %d\n", time.Since(start).Nanoseconds())
	return nil
}

// childList connects a new blocking TCP socket to each destination of
// listEnv in turn and prints, for each key, connect's errno and the peer.
func childList() error {
	for _, kv := range strings.Split(os.Getenv(listEnv), ",") {
		key, v, _ := strings.Cut(kv, "=")
		dst, err := netip.ParseAddrPort(v)
		if err != nil {
			return fmt.Errorf("%s: %w", listEnv, err)
		}
		fd, errno, err := connectTo(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, sockaddr(dst))
		if err != nil {
			return err
		}
		fmt.Printf("%s.connect %d\n", key, errno)
		if err := describe(key, fd); err != nil {
			return err
		}
		unix.Close(fd)
	}
	return nil
}
