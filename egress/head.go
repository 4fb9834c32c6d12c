package egress

import (
	"bytes"
	"errors"
	"io"
)

// Buffer sizes for reading client connections. A connection that has sent
// nothing, or a few bytes, holds at most initialHeadBuf; the buffer doubles
// only while a request head is still incomplete, up to maxHeadBytes, and
// the bufio.Reader that http.ReadRequest needs is made only once a head is
// complete.
const (
	initialHeadBuf = 512
	bodyBuf        = 4 << 10
)

var errHeadTooLarge = errors.New("request head too large")

// headReader reads a client connection through a buffer that grows only as
// a request head does. Read returns buffered bytes first, then reads the
// connection directly.
type headReader struct {
	r   io.Reader
	buf []byte // unread bytes are buf[off:]
	off int
}

// Read implements io.Reader.
func (h *headReader) Read(p []byte) (int, error) {
	if h.off < len(h.buf) {
		n := copy(p, h.buf[h.off:])
		h.off += n
		if h.off == len(h.buf) {
			h.buf, h.off = h.buf[:0], 0
			if cap(h.buf) > bodyBuf {
				h.buf = nil // a large head is done with; a long tunnel must not keep it
			}
		}
		return n, nil
	}
	return h.r.Read(p)
}

// buffered returns how many bytes are buffered and unread.
func (h *headReader) buffered() int { return len(h.buf) - h.off }

// fill reads at least one more byte into the buffer, growing it when it is
// full, as long as at most maxHeadBytes are buffered. The caller sets the
// connection's deadline.
func (h *headReader) fill() error {
	if h.off > 0 {
		n := copy(h.buf, h.buf[h.off:])
		h.buf, h.off = h.buf[:n], 0
	}
	if len(h.buf) == cap(h.buf) {
		if len(h.buf) >= maxHeadBytes {
			return errHeadTooLarge
		}
		nb := make([]byte, len(h.buf), min(max(2*cap(h.buf), initialHeadBuf), maxHeadBytes))
		copy(nb, h.buf)
		h.buf = nb
	}
	n, err := h.r.Read(h.buf[len(h.buf):cap(h.buf)])
	h.buf = h.buf[:len(h.buf)+n]
	switch {
	case n > 0:
		return nil
	case err == nil:
		return io.ErrNoProgress
	}
	return err
}

// head returns the request line and headers through the blank line,
// reading from the connection as needed, without consuming them, so that
// http.ReadRequest parses the same bytes.
func (h *headReader) head() ([]byte, error) {
	scanned := 0
	for {
		buf := h.buf[h.off:]
		from := max(scanned-3, 0)
		if i := bytes.Index(buf[from:], []byte("\r\n\r\n")); i >= 0 {
			return buf[:from+i+4], nil
		}
		if i := bytes.Index(buf[from:], []byte("\n\n")); i >= 0 {
			return buf[:from+i+2], nil
		}
		scanned = len(buf)
		if scanned >= maxHeadBytes {
			return nil, errHeadTooLarge
		}
		if err := h.fill(); err != nil {
			return nil, err
		}
	}
}

// unread puts b back in front of the buffered bytes: what a bufio.Reader
// read ahead past the end of a request belongs to the next one.
func (h *headReader) unread(b []byte) {
	if len(b) == 0 {
		return
	}
	nb := make([]byte, 0, len(b)+h.buffered())
	nb = append(append(nb, b...), h.buf[h.off:]...)
	h.buf, h.off = nb, 0
}
