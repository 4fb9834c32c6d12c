package image

import (
	"encoding/json"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// The unpack's protocol: JSON messages, one per SOCK_SEQPACKET packet,
// between the caller (Unpack) and a child, with at most one fd each. Two
// children run, one after the other, each in a process of its own:
//
// The resolver reads the image's documents and proposes what to unpack.
//
//	child  -> caller  open NAME     a layout's file; the answer is file (with its fd) or error
//	child  -> caller  image         the kind, the config's and the layers' blobs, the diff_ids
//	child  -> caller  confine       the child could not confine itself (Error says why)
//
// The caller reads the config's and the layers' blobs itself and checks
// them against the digests proposed; the key is made of what it checked.
// The unpacker gets those bytes and nothing else of the image:
//
//	child  -> caller  ready | confine  confined, or not
//	caller -> child   unpack           the diff_ids and the limits
//	caller -> child   layer            a pipe (its fd) that the caller fills with one layer's blob
//	caller -> child   end              no more layers
//	child  -> caller  done | error     the unpack's end: done says only that the child is finished
type message struct {
	Op      string   `json:"op"`
	Name    string   `json:"name,omitempty"`
	Error   string   `json:"error,omitempty"`
	Kind    Kind     `json:"kind,omitempty"`
	Config  *blob    `json:"config,omitempty"`
	Layers  []blob   `json:"layers,omitempty"`
	DiffIDs []string `json:"diff_ids,omitempty"`
	// Limits, with unpack, are the bounds the child applies: the
	// caller's, at most the package's constants.
	Limits *limits `json:"limits,omitempty"`
}

// blob is where the resolver says a blob of the image is and what it
// holds: Off is its offset in an archive (a layout's blob is found by its
// digest), Size its bytes, Digest their sha256.
type blob struct {
	Digest string `json:"digest"`
	Size   int64  `json:"size"`
	Off    int64  `json:"off,omitempty"`
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

// maxMessage bounds one packet: MaxLayers blobs and diff_ids fit with
// room to spare.
const maxMessage = 128 << 10

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
			return fail(errors.New("an unpack message over 128 KiB"))
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
