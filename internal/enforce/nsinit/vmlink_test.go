package nsinit

import (
	"bytes"
	"encoding/binary"
	"io"
	"strings"
	"testing"
)

// TestLinkRoundTrip: every kind of frame reads back as written, a control
// frame decodes to its message, and pump ends with the empty frame.
func TestLinkRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	w := &link{w: &buf}
	m := Message{Type: MsgExit, ID: "x1", Code: 3, Argv: []string{"a", "b"}}
	if err := w.sendMsg(m); err != nil {
		t.Fatal(err)
	}
	if err := w.send(framePlan, "", []byte("plan")); err != nil {
		t.Fatal(err)
	}
	w.pump(frameOut, "x1", strings.NewReader("hello"))
	r := &link{r: &buf}
	f, err := r.recv()
	if err != nil {
		t.Fatal(err)
	}
	got, err := f.msg()
	if err != nil || got.Type != MsgExit || got.ID != "x1" || got.Code != 3 || len(got.Argv) != 2 {
		t.Fatalf("control frame = %+v, %v; want %+v", got, err, m)
	}
	for _, want := range []frame{{framePlan, "", []byte("plan")}, {frameOut, "x1", []byte("hello")}, {frameOut, "x1", nil}} {
		f, err := r.recv()
		if err != nil || f.kind != want.kind || f.id != want.id || !bytes.Equal(f.data, want.data) {
			t.Fatalf("recv() = %+v, %v; want %+v", f, err, want)
		}
	}
	if _, err := r.recv(); err != io.EOF {
		t.Fatalf("recv() at the end = %v, want EOF", err)
	}
}

// TestLinkRefuses: an unknown kind, a frame over the reader's bound, a
// truncated frame and a data frame read as a control message are errors.
func TestLinkRefuses(t *testing.T) {
	header := func(k byte, n uint32) []byte {
		b := []byte{k, 0, 0, 0, 0, 0}
		binary.BigEndian.PutUint32(b[2:], n)
		return b
	}
	tests := []struct {
		name string
		in   []byte
		max  uint32
	}{
		{"unknown-kind", header(99, 0), 0},
		{"zero-kind", header(0, 0), 0},
		{"over-max", header(byte(frameCtl), 2048), 1024},
		{"over-maxFrame", header(byte(framePlan), maxFrame+1), 0},
		{"truncated", append(header(byte(frameOut), 10), "abc"...), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := &link{r: bytes.NewReader(tt.in), max: tt.max}
			if f, err := l.recv(); err == nil {
				t.Fatalf("recv(%q) = %+v, want an error", tt.in, f)
			}
		})
	}
	if _, err := (frame{kind: frameOut, data: []byte("x")}).msg(); err == nil {
		t.Fatal("an output frame decoded as a control message")
	}
	if err := (&link{w: io.Discard}).send(frameOut, strings.Repeat("i", 256), nil); err == nil {
		t.Fatal("an exec id of 256 bytes was sent")
	}
}
