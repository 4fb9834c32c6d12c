// Package netns prepares the sandbox's empty network namespace: it brings
// up lo (the only interface) and creates the egress proxy's listening
// sockets inside it, so the supervisor can serve them from outside and the
// sandbox needs no bridge, route or DNS. Plain TCP sockets are created with
// IPPROTO_TCP explicitly (never MPTCP, which Landlock's TCP rules miss).
//
// It imports golang.org/x/sys only. It stops exfiltration by construction:
// there is no interface that leads anywhere but airlock's proxy.
package netns

import (
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// LoopbackUp sets IFF_UP on lo (netdevice(7), SIOCSIFFLAGS).
//
// Preconditions:
//   - runs inside the new network namespace with CAP_NET_ADMIN over it
func LoopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("lo up: socket: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return fmt.Errorf("lo up: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("lo up: SIOCGIFFLAGS: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("lo up: SIOCSIFFLAGS: %w", err)
	}
	return nil
}

// VerifyOnlyLoopback fails unless lo is the namespace's only interface: the
// sandbox relies on it instead of a Landlock port allow-list, so it is
// checked, not assumed (fail closed).
func VerifyOnlyLoopback() error {
	ifs, err := net.Interfaces()
	if err != nil {
		return fmt.Errorf("list interfaces: %w", err)
	}
	if len(ifs) != 1 || ifs[0].Name != "lo" {
		names := make([]string, 0, len(ifs))
		for _, i := range ifs {
			names = append(names, i.Name)
		}
		return fmt.Errorf("the sandbox's network namespace has interfaces %v, want only lo: refusing to run", names)
	}
	return nil
}

// Listen returns a listening TCP socket on 127.0.0.1:port (close-on-exec).
func Listen(port int) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, unix.IPPROTO_TCP)
	if err != nil {
		return -1, fmt.Errorf("listen 127.0.0.1:%d: %w", port, err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("listen 127.0.0.1:%d: SO_REUSEADDR: %w", port, err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("listen 127.0.0.1:%d: bind: %w", port, err)
	}
	if err := unix.Listen(fd, 128); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("listen 127.0.0.1:%d: %w", port, err)
	}
	return fd, nil
}

// ListenUDP returns a UDP socket bound to 127.0.0.1:port (close-on-exec):
// airlock's DNS server inside the sandbox.
func ListenUDP(port int) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return -1, fmt.Errorf("listen udp 127.0.0.1:%d: %w", port, err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("listen udp 127.0.0.1:%d: bind: %w", port, err)
	}
	return fd, nil
}
