package egress

import (
	"net"
	"syscall"
)

// acker acknowledges at once what an upstream connection has received.
//
// Linux delays the ACK of data that arrives on a connection it takes to be
// interactive (one that sent data soon after it last received some: a
// connection carrying request after request), for up to 40 ms, hoping to
// send it with the next request. An upstream with Nagle's algorithm on
// (Python's http.server, many small servers) holds the second write of a
// response until the first is acknowledged, so the two wait for each
// other: 40 ms per request. The proxy reads a response to forward it, not
// to answer it, so nothing rides on its ACK: setting TCP_QUICKACK after
// each read leaves that mode and sends the ACK the read left pending
// (tcp(7): the flag is not permanent, so it is set again after every
// read; Linux 2.4.4).
type acker struct{ rc syscall.RawConn }

// newAcker returns an acker for c, the connection the proxy dialed (a
// trackedConn or a TCP connection); for any other it does nothing.
func newAcker(c net.Conn) acker {
	if tc, ok := c.(*trackedConn); ok {
		c = tc.Conn
	}
	tcp, ok := c.(*net.TCPConn)
	if !ok {
		return acker{}
	}
	rc, err := tcp.SyscallConn()
	if err != nil {
		return acker{}
	}
	return acker{rc: rc}
}

// ack sends the pending ACK, if any, and leaves delayed-ACK mode. Errors
// are ignored: a connection that cannot take the option only stays slow,
// and a closed one fails its next read.
func (a acker) ack() {
	if a.rc == nil {
		return
	}
	a.rc.Control(func(fd uintptr) {
		syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_QUICKACK, 1)
	})
}
