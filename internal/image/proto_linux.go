package image

import (
	"encoding/json"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// The unpack's protocol: JSON messages, one per SOCK_SEQPACKET packet,
// between the caller (Unpack) and its child, with at most one fd each.
//
//	child  -> caller  open NAME     a layout's file; the answer is file (with its fd) or error
//	child  -> caller  image         the image's kind, config digest and diff_ids
//	caller -> child   unpack | stop unpack it into the entry's root, or stop (cached)
//	child  -> caller  done | error  the unpack's end
//	child  -> caller  confine       the child could not confine itself (Error says why)
type message struct {
	Op      string   `json:"op"`
	Name    string   `json:"name,omitempty"`
	Error   string   `json:"error,omitempty"`
	Kind    Kind     `json:"kind,omitempty"`
	Config  string   `json:"config,omitempty"`
	Layers  []string `json:"layers,omitempty"`
	Entries int      `json:"entries,omitempty"`
	Bytes   int64    `json:"bytes,omitempty"`
	Skipped int      `json:"skipped,omitempty"`
	// Limits, with unpack, are the bounds the child applies: the
	// caller's, at most the package's constants.
	Limits *limits `json:"limits,omitempty"`
}

// limits are the unpack's bounds that tests lower.
type limits struct {
	Bytes   int64 `json:"bytes"`
	Entries int   `json:"entries"`
	Depth   int   `json:"depth"`
}

// current returns the limits in force here.
func current() *limits { return &limits{Bytes: maxBytes, Entries: maxEntries, Depth: maxDepth} }

// apply makes l the limits in force, where each is positive and no more
// than the package's constant.
func (l *limits) apply() {
	if l == nil {
		return
	}
	if l.Bytes > 0 && l.Bytes <= MaxBytes {
		maxBytes = l.Bytes
	}
	if l.Entries > 0 && l.Entries <= MaxEntries {
		maxEntries = l.Entries
	}
	if l.Depth > 0 && l.Depth <= MaxDepth {
		maxDepth = l.Depth
	}
}

// maxMessage bounds one packet: MaxLayers diff_ids fit with room to spare.
const maxMessage = 64 << 10

// send writes m, with fd when it is not -1, to the socket sock.
func send(sock int, m message, fd int) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if len(b) > maxMessage {
		return fmt.Errorf("airlock bug: a %d-byte unpack message", len(b))
	}
	var oob []byte
	if fd >= 0 {
		oob = unix.UnixRights(fd)
	}
	return unix.Sendmsg(sock, b, oob, nil, 0)
}

// recv reads one message from sock and the fd it carries (-1 when none).
// A closed socket is io.EOF-like: errClosed.
func recv(sock int) (message, int, error) {
	buf := make([]byte, maxMessage+1)
	oob := make([]byte, unix.CmsgSpace(4*4))
	for {
		n, oobn, flags, _, err := unix.Recvmsg(sock, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return message{}, -1, err
		}
		fds, ferr := rights(oob[:oobn])
		if n == 0 && len(fds) == 0 {
			return message{}, -1, errClosed
		}
		fd := -1
		if len(fds) > 0 {
			fd = fds[0]
			for _, extra := range fds[1:] {
				unix.Close(extra)
			}
		}
		fail := func(err error) (message, int, error) {
			if fd >= 0 {
				unix.Close(fd)
			}
			return message{}, -1, err
		}
		if ferr != nil {
			return fail(ferr)
		}
		if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 || n > maxMessage {
			return fail(errors.New("an unpack message over 64 KiB"))
		}
		var m message
		if err := json.Unmarshal(buf[:n], &m); err != nil {
			return fail(fmt.Errorf("an unpack message: %w", err))
		}
		return m, fd, nil
	}
}

// errClosed is the other end's close.
var errClosed = errors.New("the other end closed the unpack's socket")

// rights returns the fds of an SCM_RIGHTS control message.
func rights(oob []byte) ([]int, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var fds []int
	for _, m := range msgs {
		fs, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		fds = append(fds, fs...)
	}
	return fds, nil
}
