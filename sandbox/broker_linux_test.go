package sandbox

import (
	"net"
	"os"
	"testing"
	"time"
)

// TestBrokerListenerAdmitsOnlyItsOwn: the egress proxy's loopback
// listeners without namespaces serve only connections the broker made for
// the sandbox; any other process of the host that finds the port (it is
// listed in /proc/net/tcp) is closed before the proxy reads a byte.
func TestBrokerListenerAdmitsOnlyItsOwn(t *testing.T) {
	fd, ap, err := loopbackListener()
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "listener")
	inner, err := net.FileListener(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	br := &broker{issued: map[uint16]bool{}}
	l := &admitListener{Listener: inner, admit: br.admit}
	defer l.Close()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()

	// A host process dials the listener straight: closed at once.
	stranger, err := net.Dial("tcp", ap.String())
	if err != nil {
		t.Fatal(err)
	}
	defer stranger.Close()
	_ = stranger.SetReadDeadline(time.Now().Add(5 * time.Second))
	// EOF or a reset: closed unserved. A timeout: it was kept open.
	if _, err := stranger.Read(make([]byte, 1)); err == nil {
		t.Fatal("a connection the broker did not make was answered")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("a connection the broker did not make was kept open")
	}
	select {
	case c := <-accepted:
		t.Fatalf("the proxy was handed a stranger's connection from %s", c.RemoteAddr())
	default:
	}

	// The broker's own connection is admitted, once.
	v := br.dial(ap)
	if v.Conn == nil {
		t.Fatalf("broker dial: errno %v", v.Errno)
	}
	defer v.Conn.Close()
	select {
	case c := <-accepted:
		c.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("the broker's own connection was not admitted")
	}
	if len(br.issued) != 0 {
		t.Fatalf("issued ports left after admission: %v", br.issued)
	}
}
