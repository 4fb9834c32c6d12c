package nsinit

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
)

// The microVM link: the byte stream of one virtio-serial port between the
// VMM launcher on the host (VMM) and airlock's init as pid 1 of the guest
// (Guest). A stream carries no fds, so the control protocol crosses it as
// frames: control messages as they are (the marshalled Message), and each
// exec's stdin, stdout and stderr as data frames named by the exec's ID.
//
//	host launcher                          guest init
//	   | <--- hello --------------------------- |  modules loaded, root mounted
//	   | ---- plan (plan.Plan binary) --------> |  starts the sandbox's init
//	   | <--> ctl (Message) -------------------> |  ready, exec, started, exit, kill
//	   | ---- in id data (empty: EOF) --------> |
//	   | <--- out/err id data (empty: EOF) ---- |
//
// Both ends trust only what they check: the guest runs the plan the host
// sent through the same init as every other backend, and the host passes
// on only control messages (no fds can cross), writes data frames only to
// the fds of an exec the supervisor started, and enforces the deadline and
// the output cap itself.

// MsgHalt is a microVM guest's report that its sandbox's cgroup in the
// guest refused a fork (Stage "max_pids") or killed a process for memory
// (Stage "max_memory"), sent before the exit of the exec it ended: the
// supervisor halts the sandbox with that limit, as it does when the
// host's own cgroup counters say so.
const MsgHalt Kind = "halt"

// frameKind names a frame on the microVM link.
type frameKind byte

const (
	frameHello frameKind = iota + 1
	framePlan
	frameCtl
	frameIn
	frameOut
	frameErr
	frameOpen // a connection accepted on the guest's proxy listener data[0]
	frameConn // a proxy connection's bytes, either way
)

// maxFrame bounds a frame's payload: a plan (at most maxPlan) is the largest.
const maxFrame = 16 << 20

// linkHeader is the fixed part of a frame: kind, ID length, payload length.
const linkHeader = 1 + 1 + 4

// link writes and reads frames on one stream. Writes are serialized.
type link struct {
	r io.Reader
	// max bounds the frames recv accepts; 0 means maxFrame.
	max uint32
	mu  sync.Mutex
	w   io.Writer // guarded by mu
}

// frame is one frame read from a link.
type frame struct {
	kind frameKind
	id   string
	data []byte
}

// send writes one frame.
func (l *link) send(k frameKind, id string, data []byte) error {
	if len(id) > 255 {
		return fmt.Errorf("microvm link: exec id of %d bytes", len(id))
	}
	if len(data) > maxFrame {
		return fmt.Errorf("microvm link: frame of %d bytes exceeds %d", len(data), maxFrame)
	}
	b := make([]byte, linkHeader, linkHeader+len(id)+len(data))
	b[0], b[1] = byte(k), byte(len(id))
	binary.BigEndian.PutUint32(b[2:], uint32(len(data)))
	b = append(append(b, id...), data...)
	l.mu.Lock()
	defer l.mu.Unlock()
	_, err := l.w.Write(b)
	return err
}

// sendMsg writes a control message.
func (l *link) sendMsg(m Message) error { return l.send(frameCtl, "", m.marshal()) }

// recv reads one frame.
func (l *link) recv() (frame, error) {
	var h [linkHeader]byte
	if _, err := io.ReadFull(l.r, h[:]); err != nil {
		return frame{}, err
	}
	k, idLen, n := frameKind(h[0]), int(h[1]), binary.BigEndian.Uint32(h[2:])
	if k < frameHello || k > frameConn {
		return frame{}, fmt.Errorf("microvm link: unknown frame kind %d", k)
	}
	limit := uint32(maxFrame)
	if l.max > 0 {
		limit = l.max
	}
	if n > limit {
		return frame{}, fmt.Errorf("microvm link: frame of %d bytes exceeds %d", n, limit)
	}
	b := make([]byte, idLen+int(n))
	if _, err := io.ReadFull(l.r, b); err != nil {
		return frame{}, errors.Join(errors.New("microvm link: truncated frame"), err)
	}
	return frame{kind: k, id: string(b[:idLen]), data: b[idLen:]}, nil
}

// msg decodes a control frame.
func (f frame) msg() (Message, error) {
	var m Message
	if f.kind != frameCtl {
		return m, fmt.Errorf("microvm link: expected a control frame, got kind %d", f.kind)
	}
	err := m.unmarshal(f.data)
	return m, err
}

// pump copies r to the link as data frames of kind k for exec id, then
// sends the empty frame that means EOF.
func (l *link) pump(k frameKind, id string, r io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if l.send(k, id, buf[:n]) != nil {
				return
			}
		}
		if err != nil {
			_ = l.send(k, id, nil) // the other end is gone when this fails
			return
		}
	}
}
