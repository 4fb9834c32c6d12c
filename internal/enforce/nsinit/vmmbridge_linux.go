package nsinit

import (
	"fmt"
	"os"
	"sync"
)

// fromGuest are the control messages the launcher passes from the guest
// to the supervisor.
var fromGuest = map[Kind]bool{MsgReady: true, MsgError: true, MsgStarted: true, MsgExit: true, MsgHalt: true}

// hostMaxFrame bounds a frame the host reads: the guest sends control
// messages and output, never a plan.
const hostMaxFrame = maxMessage + 64<<10

// hostExec is an exec the supervisor started: its fds on the host.
type hostExec struct {
	out, errw *os.File
}

// bridgeHost relays the supervisor's control socket and the link until
// either ends.
func bridgeHost(l *link) {
	var mu sync.Mutex
	execs := map[string]*hostExec{} // guarded by mu
	pc := newProxyConns(l)
	defer pc.closeAll()
	done := make(chan struct{}, 2)
	go func() { // the supervisor's messages to the guest
		defer func() { done <- struct{}{} }()
		for {
			m, fds, err := Recv(ControlFD)
			if err != nil {
				return
			}
			if m.Type != MsgExec {
				closeAll(fds)
				if l.sendMsg(m) != nil {
					return
				}
				continue
			}
			if len(fds) != 3 {
				closeAll(fds)
				_ = Send(ControlFD, Message{Type: MsgExit, ID: m.ID, Code: 125, Error: "airlock bug: exec needs three fds"})
				continue
			}
			in := os.NewFile(uintptr(fds[0]), "stdin")
			mu.Lock()
			execs[m.ID] = &hostExec{out: os.NewFile(uintptr(fds[1]), "stdout"), errw: os.NewFile(uintptr(fds[2]), "stderr")}
			mu.Unlock()
			if l.sendMsg(m) != nil {
				in.Close()
				return
			}
			go func(id string) { l.pump(frameIn, id, in); in.Close() }(m.ID)
		}
	}()
	go func() { // the guest's frames to the supervisor
		defer func() { done <- struct{}{} }()
		for {
			f, err := l.recv()
			if err != nil {
				return
			}
			switch f.kind {
			case frameCtl:
				m, err := f.msg()
				if err != nil {
					return
				}
				// The guest is the sandbox: only what the init reports
				// about itself and its execs passes (never listeners, a
				// broker or mounts, which would carry host fds).
				if !fromGuest[m.Type] {
					_ = Send(ControlFD, Message{Type: MsgError, Stage: "microvm", Error: fmt.Sprintf("the guest sent a %q control message, which never comes from a guest", m.Type)})
					return
				}
				if Send(ControlFD, m) != nil {
					return
				}
			case frameOpen:
				openFromGuest(pc, f.id, f.data)
			case frameConn:
				pc.data(f.id, f.data)
			case frameOut, frameErr:
				mu.Lock()
				x := execs[f.id]
				mu.Unlock()
				if x == nil {
					continue
				}
				w := &x.out
				if f.kind == frameErr {
					w = &x.errw
				}
				if *w == nil {
					continue
				}
				if len(f.data) == 0 {
					(*w).Close()
					mu.Lock()
					*w = nil
					if x.out == nil && x.errw == nil {
						delete(execs, f.id)
					}
					mu.Unlock()
					continue
				}
				// A reader that stopped reading (the output cap) gets no more.
				_, _ = (*w).Write(f.data)
			}
		}
	}()
	<-done
}
