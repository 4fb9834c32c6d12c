package sandbox

import (
	"bytes"
	"os"
	"testing"
	"time"
)

// TestCopyOutKeepsOutputPastTheDeadline: a command that wrote and exited
// while a background process keeps its pipe open loses nothing when drain's
// deadline passes before the reader ran (100 runs at once on 2 cores lost
// two runs' output this way).
func TestCopyOutKeepsOutputPastTheDeadline(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close() // held open, as by a background process
	want := bytes.Repeat([]byte("output\n"), 10000)
	go func() { _, _ = w.Write(want) }()
	time.Sleep(50 * time.Millisecond) // let the writer fill the pipe
	if err := r.SetReadDeadline(time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	done := make(chan struct{})
	go func() { copyOut(&got, r); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("copyOut waited for a writer that never closes")
	}
	if got.Len() == 0 {
		t.Fatal("copyOut dropped the buffered output once the deadline had passed")
	}
	if !bytes.HasPrefix(want, got.Bytes()) {
		t.Fatalf("copyOut returned %d bytes that are not the output's start", got.Len())
	}
}
