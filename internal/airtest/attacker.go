package airtest

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Attacker is a TCP listener on the host's loopback that plays an
// attacker's server in attack tests: it accepts every connection, reads
// what arrives (for at most 5 s each) and counts both, so a test can
// check that nothing reached it.
type Attacker struct {
	ln           net.Listener
	conns, bytes atomic.Int64
	wg           sync.WaitGroup
	once         sync.Once
}

// NewAttacker starts an Attacker on 127.0.0.1; Cleanup closes it.
func NewAttacker(t testing.TB) *Attacker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := &Attacker{ln: ln}
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return // closed
			}
			a.conns.Add(1)
			a.wg.Add(1)
			go func() {
				defer a.wg.Done()
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				n, _ := io.Copy(io.Discard, c)
				a.bytes.Add(n)
			}()
		}
	}()
	t.Cleanup(a.Close)
	return a
}

// Port is the port it listens on.
func (a *Attacker) Port() int { return a.ln.Addr().(*net.TCPAddr).Port }

// Close stops the listener and waits for the connections it is reading,
// so that Got counts everything. It may be called more than once.
func (a *Attacker) Close() {
	a.once.Do(func() {
		a.ln.Close()
		a.wg.Wait()
	})
}

// Got returns how many connections and bytes arrived.
func (a *Attacker) Got() (conns, bytes int64) { return a.conns.Load(), a.bytes.Load() }
