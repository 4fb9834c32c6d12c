package landlock_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/internal/enforce/landlock"
	"golang.org/x/sys/unix"
)

// The tests use raw sockets, not package net: net links cgo in this
// configuration, and that would force ThreadOnly on every test.

var loopback = [4]byte{127, 0, 0, 1}

// tcpListen returns a listening TCP socket on 127.0.0.1 and its port.
func tcpListen() (int, int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, 0, err
	}
	err = unix.Bind(fd, &unix.SockaddrInet4{Addr: loopback})
	if err == nil {
		err = unix.Listen(fd, 8)
	}
	var sa unix.Sockaddr
	if err == nil {
		sa, err = unix.Getsockname(fd)
	}
	if err != nil {
		unix.Close(fd)
		return -1, 0, err
	}
	return fd, sa.(*unix.SockaddrInet4).Port, nil
}

// withSocket runs fn on a new TCP or unix stream socket and closes it.
func withSocket(family int, fn func(fd int) error) error {
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return fn(fd)
}

func tcpConnect(port *int) func() error {
	return func() error {
		return withSocket(unix.AF_INET, func(fd int) error {
			return unix.Connect(fd, &unix.SockaddrInet4{Addr: loopback, Port: *port})
		})
	}
}

func tcpBind(port *int) func() error {
	return func() error {
		return withSocket(unix.AF_INET, func(fd int) error {
			return unix.Bind(fd, &unix.SockaddrInet4{Addr: loopback, Port: *port})
		})
	}
}

func TestRestrictTCP(t *testing.T) {
	airtest.RequireLandlockABI(t, 4)
	// Filled in by the child before it restricts itself.
	var allowed, denied int
	zero := 0
	tests := []struct {
		name      string
		bind      bool
		bindPorts []uint16
		ops       []op
	}{
		{"connect-only", false, nil, []op{
			{"connect-allowed", tcpConnect(&allowed), "ok"},
			{"connect-denied", tcpConnect(&denied), "EACCES"},
			// Unrestricted bind reaches the address check: in use.
			{"bind-unrestricted", tcpBind(&denied), "EADDRINUSE"},
		}},
		{"restrict-bind", true, []uint16{0}, []op{
			{"connect-allowed", tcpConnect(&allowed), "ok"},
			{"connect-denied", tcpConnect(&denied), "EACCES"},
			{"bind-ephemeral", tcpBind(&zero), "ok"},
			{"bind-denied", tcpBind(&denied), "EACCES"},
		}},
		{"restrict-bind-nil", true, nil, []op{
			{"bind-ephemeral", tcpBind(&zero), "EACCES"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runOps(t, func() (landlock.Config, error) {
				var err error
				if _, allowed, err = tcpListen(); err != nil {
					return landlock.Config{}, err
				}
				if _, denied, err = tcpListen(); err != nil {
					return landlock.Config{}, err
				}
				return landlock.Config{
					ConnectTCP:   []uint16{uint16(allowed)},
					RestrictBind: tt.bind,
					BindTCP:      tt.bindPorts,
					MinABI:       4,
				}, nil
			}, tt.ops)
		})
	}
}

const abstractEnv = "AIRLOCK_LANDLOCK_TEST_ABSTRACT"

// parentAbstract listens, in the parent, on an abstract unix socket and
// hands its name to the child; in the child it returns that name.
func parentAbstract(t *testing.T) string {
	t.Helper()
	if airtest.InChild() {
		return os.Getenv(abstractEnv)
	}
	name := fmt.Sprintf("@airlock-landlock-test-%d", os.Getpid())
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: name}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(fd, 8); err != nil {
		t.Fatal(err)
	}
	t.Setenv(abstractEnv, name)
	return name
}

func unixConnect(name string) func() error {
	return func() error {
		return withSocket(unix.AF_UNIX, func(fd int) error {
			return unix.Connect(fd, &unix.SockaddrUnix{Name: name})
		})
	}
}

// ownAbstract listens on an abstract socket made after Restrict, inside
// the domain, and connects to it.
func ownAbstract() error {
	name := fmt.Sprintf("@airlock-landlock-test-own-%d", os.Getpid())
	return withSocket(unix.AF_UNIX, func(fd int) error {
		if err := unix.Bind(fd, &unix.SockaddrUnix{Name: name}); err != nil {
			return err
		}
		if err := unix.Listen(fd, 1); err != nil {
			return err
		}
		return unixConnect(name)()
	})
}

func TestRestrictScopes(t *testing.T) {
	airtest.RequireLandlockABI(t, 6)
	name := parentAbstract(t)
	killParent := func() error { return unix.Kill(os.Getppid(), 0) }
	killSelf := func() error { return unix.Kill(os.Getpid(), 0) }
	tests := []struct {
		name           string
		signals, abstr bool
		ops            []op
	}{
		{"scoped", true, true, []op{
			{"connect-parent-abstract", unixConnect(name), "EPERM"},
			{"connect-own-abstract", ownAbstract, "ok"},
			{"kill-parent", killParent, "EPERM"},
			{"kill-self", killSelf, "ok"},
		}},
		{"signals-only", true, false, []op{
			{"connect-parent-abstract", unixConnect(name), "ok"},
			{"kill-parent", killParent, "EPERM"},
		}},
		{"abstract-only", false, true, []op{
			{"connect-parent-abstract", unixConnect(name), "EPERM"},
			{"kill-parent", killParent, "ok"},
		}},
		{"unscoped", false, false, []op{
			{"connect-parent-abstract", unixConnect(name), "ok"},
			{"kill-parent", killParent, "ok"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runOps(t, func() (landlock.Config, error) {
				return landlock.Config{ScopeSignals: tt.signals, ScopeAbstractUnix: tt.abstr, MinABI: 6}, nil
			}, tt.ops)
		})
	}
}
