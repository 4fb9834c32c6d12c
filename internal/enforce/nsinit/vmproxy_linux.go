package nsinit

import (
	"fmt"
	"net"
	"os"
	"sync"
)

// Egress from a microVM: the guest has no network device. The sandbox's
// init in the guest listens on the proxy's ports on its own loopback, as
// on the host, and hands the listeners to the guest's pid 1, which
// carries each accepted connection over the link (frameOpen, frameConn).
// The VMM launcher connects each one to a unix socket of its own whose
// listener the supervisor serves airlock's egress proxy on: the proxy
// decides every connection, as for every other backend.

// proxyConns is one end's table of the link's proxy connections.
type proxyConns struct {
	l  *link
	mu sync.Mutex
	m  map[string]net.Conn // guarded by mu
}

func newProxyConns(l *link) *proxyConns { return &proxyConns{l: l, m: map[string]net.Conn{}} }

// add registers c as id and pumps what it reads to the link.
func (p *proxyConns) add(id string, c net.Conn) {
	p.mu.Lock()
	p.m[id] = c
	p.mu.Unlock()
	go func() {
		p.l.pump(frameConn, id, c)
		if cw, ok := c.(interface{ CloseRead() error }); ok {
			_ = cw.CloseRead()
		}
	}()
}

// data writes what the link carried for id to its connection; an empty
// frame is the other side's EOF.
func (p *proxyConns) data(id string, b []byte) {
	p.mu.Lock()
	c := p.m[id]
	if len(b) == 0 {
		delete(p.m, id)
	}
	p.mu.Unlock()
	if c == nil {
		return
	}
	if len(b) == 0 {
		if cw, ok := c.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			c.Close()
		}
		return
	}
	if _, err := c.Write(b); err != nil {
		c.Close()
	}
}

// closeAll ends every connection.
func (p *proxyConns) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, c := range p.m {
		c.Close()
		delete(p.m, id)
	}
}

// serveGuestListeners accepts connections on the sandbox's proxy
// listeners (fds, in the order of MsgListeners: HTTP, SOCKS5) and opens
// each on the link.
func serveGuestListeners(p *proxyConns, fds []int) {
	var mu sync.Mutex
	n := 0
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "proxy listener")
		ln, err := net.FileListener(f)
		f.Close()
		if err != nil {
			continue // the sandbox then has no way out on that port
		}
		go func(port byte) {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				mu.Lock()
				n++
				id := fmt.Sprintf("p%d", n)
				mu.Unlock()
				if p.l.send(frameOpen, id, []byte{port}) != nil {
					c.Close()
					return
				}
				p.add(id, c)
			}
		}(byte(i))
	}
}

// VMMProxySockets are the unix sockets in the launcher's root that the
// supervisor serves the proxy on (HTTP, SOCKS5).
var VMMProxySockets = []string{"/run/http.sock", "/run/socks.sock"}

// listenProxySockets makes the launcher's proxy sockets and sends their
// listeners to the supervisor.
func listenProxySockets() error {
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	var fds []int
	for _, path := range VMMProxySockets {
		ln, err := net.Listen("unix", path)
		if err != nil {
			return fmt.Errorf("proxy socket %s: %w", path, err)
		}
		ul := ln.(*net.UnixListener)
		ul.SetUnlinkOnClose(false) // the supervisor listens on it from here
		f, err := ul.File()        // a dup
		ul.Close()
		if err != nil {
			return err
		}
		files = append(files, f)
		fds = append(fds, int(f.Fd()))
	}
	return Send(ControlFD, Message{Type: MsgListeners}, fds...)
}

// openFromGuest connects a connection the guest opened to the proxy's
// socket for its port.
func openFromGuest(p *proxyConns, id string, data []byte) {
	if len(data) != 1 || int(data[0]) >= len(VMMProxySockets) {
		_ = p.l.send(frameConn, id, nil)
		return
	}
	c, err := net.Dial("unix", VMMProxySockets[data[0]])
	if err != nil {
		_ = p.l.send(frameConn, id, nil)
		return
	}
	p.add(id, c)
}
