//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package egress

import (
	"net"
	"syscall"
)

// idle reports whether c, an upstream connection between requests, is
// still open with nothing to read: a peek that does not wait (recv(2)
// with MSG_PEEK|MSG_DONTWAIT) finds no data. EOF, a reset or bytes that no
// request asked for make it false. A connection that is not a socket is
// taken as idle; the request sent on it fails if it is not.
func idle(c net.Conn) bool {
	if tc, ok := c.(*trackedConn); ok {
		c = tc.Conn
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var buf [1]byte
	var rerr error
	if err := rc.Control(func(fd uintptr) {
		_, _, rerr = syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	}); err != nil {
		return false
	}
	return rerr == syscall.EAGAIN || rerr == syscall.EWOULDBLOCK
}
