package nsinit

import (
	"errors"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
)

// maxFDs is the kernel's SCM_MAX_FD: the most fds one message carries.
const maxFDs = 253

// Send writes m with fds attached.
func Send(sock int, m Message, fds ...int) error {
	b := m.marshal()
	if len(fds) > maxFDs {
		return fmt.Errorf("control message with %d fds exceeds %d (SCM_MAX_FD): fewer mounts are needed", len(fds), maxFDs)
	}
	if len(b) > maxMessage {
		return fmt.Errorf("control message of %d bytes exceeds %d: shorten the command line or pass data through a file", len(b), maxMessage)
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	return unix.Sendmsg(sock, b, oob, nil, 0)
}

// recvBufs holds Recv's buffers: a message is decoded into strings of its
// own, so a buffer is reused at once rather than allocated and zeroed per
// message.
var recvBufs = sync.Pool{New: func() any { return new(recvBuf) }}

type recvBuf struct {
	data [maxMessage]byte
	oob  [(maxFDs*4 + 64)]byte // unix.CmsgSpace(maxFDs*4) with room to spare
}

// Recv reads one message and the fds attached to it.
func Recv(sock int) (Message, []int, error) {
	rb := recvBufs.Get().(*recvBuf)
	defer recvBufs.Put(rb)
	buf, oob := rb.data[:], rb.oob[:unix.CmsgSpace(maxFDs*4)]
	n, oobn, flags, _, err := unix.Recvmsg(sock, buf, oob, unix.MSG_CMSG_CLOEXEC)
	if errors.Is(err, unix.ECONNRESET) {
		// The peer closed with messages of ours unread: the kernel says so
		// once, before the messages the peer sent, which are still queued
		// (an init's error sent just before it exited). Read them.
		n, oobn, flags, _, err = unix.Recvmsg(sock, buf, oob, unix.MSG_CMSG_CLOEXEC)
	}
	if err != nil {
		return Message{}, nil, err
	}
	if flags&(unix.MSG_CTRUNC|unix.MSG_TRUNC) != 0 {
		return Message{}, nil, fmt.Errorf("control message truncated (flags %#x): fds or data were lost", flags)
	}
	if n == 0 {
		return Message{}, nil, fmt.Errorf("control socket closed")
	}
	var fds []int
	if oobn > 0 {
		scms, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			return Message{}, nil, err
		}
		for _, s := range scms {
			f, err := unix.ParseUnixRights(&s)
			if err != nil {
				return Message{}, nil, err
			}
			fds = append(fds, f...)
		}
	}
	var m Message
	if err := m.unmarshal(buf[:n]); err != nil {
		for _, f := range fds {
			unix.Close(f)
		}
		return Message{}, nil, fmt.Errorf("control message: %w", err)
	}
	return m, fds, nil
}
