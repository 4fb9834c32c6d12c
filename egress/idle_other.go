//go:build !(linux || darwin || dragonfly || freebsd || netbsd || openbsd)

package egress

import "net"

// idle reports true: where no non-blocking peek is available, a kept
// upstream connection is taken as idle and a request sent on it fails
// if the upstream closed it.
func idle(net.Conn) bool { return true }
