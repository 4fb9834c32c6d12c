package nsinit

import (
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func socketPair(t *testing.T) (a, b int) {
	t.Helper()
	p, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(p[0]); unix.Close(p[1]) })
	return p[0], p[1]
}

// TestProtoRoundTrip: a message and its fds arrive as sent; received fds
// are close-on-exec, so a child the receiver starts never inherits them.
func TestProtoRoundTrip(t *testing.T) {
	a, b := socketPair(t)
	f, err := os.CreateTemp(t.TempDir(), "fd")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := Message{Type: MsgExec, ID: "7", Argv: []string{"python3", "-c", "print(1)"}, Env: []string{"A=b"}, Cwd: "/tmp", PTY: true}
	if err := Send(a, want, int(f.Fd()), int(f.Fd())); err != nil {
		t.Fatal(err)
	}
	got, fds, err := Recv(b)
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll(fds)
	if got.Type != want.Type || got.ID != want.ID || strings.Join(got.Argv, " ") != strings.Join(want.Argv, " ") || got.Cwd != want.Cwd || !got.PTY {
		t.Errorf("Recv = %+v, want %+v", got, want)
	}
	if len(fds) != 2 {
		t.Fatalf("Recv returned %d fds, want 2", len(fds))
	}
	for _, fd := range fds {
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil || flags&unix.FD_CLOEXEC == 0 {
			t.Errorf("received fd %d: flags %#x, %v; want FD_CLOEXEC", fd, flags, err)
		}
	}
}

// TestProtoBounds: what one side sends is bounded before it is sent, and
// the receiver refuses a datagram cut short rather than act on part of it.
func TestProtoBounds(t *testing.T) {
	a, b := socketPair(t)
	if err := Send(a, Message{Type: MsgExec, Argv: []string{strings.Repeat("x", maxMessage)}}); err == nil {
		t.Error("Send of a message above maxMessage succeeded")
	}
	fds := make([]int, maxFDs+1)
	for i := range fds {
		fds[i] = b
	}
	if err := Send(a, Message{Type: MsgMounts}, fds...); err == nil {
		t.Error("Send with more fds than SCM_MAX_FD succeeded")
	}
	// A datagram larger than the receiver's buffer arrives truncated.
	if _, err := unix.Write(a, []byte(`{"type":"exec","argv":["`+strings.Repeat("y", maxMessage)+`"]}`)); err != nil {
		t.Fatal(err)
	}
	if m, _, err := Recv(b); err == nil {
		t.Errorf("Recv of a truncated datagram = %+v, want an error", m)
	}
	// A peer that shut its end is an error, not an empty message.
	if err := unix.Shutdown(a, unix.SHUT_WR); err != nil {
		t.Fatal(err)
	}
	if m, _, err := Recv(b); err == nil {
		t.Errorf("Recv after the peer closed = %+v, want an error", m)
	}
}

// TestRecvAfterPeerClosedUnread: a peer that sends its last message and
// exits with a message of ours unread (an init that failed its set-up
// while the supervisor's exec request waited for it) makes the kernel
// report ECONNRESET on the next receive, before the messages it sent.
// Recv still returns them: the init's error, with the stage and the fix,
// reached the caller only when it was read before the init exited (seen
// in CI as "sandbox init died during setup: exit status 125").
func TestRecvAfterPeerClosedUnread(t *testing.T) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	sup, ini := pair[0], pair[1]
	defer unix.Close(sup)
	if err := Send(sup, Message{Type: MsgExec, ID: "x", Argv: []string{"/bin/true"}}); err != nil {
		t.Fatal(err)
	}
	if err := Send(ini, Message{Type: MsgError, Stage: "mounts", Error: "proc refused"}); err != nil {
		t.Fatal(err)
	}
	unix.Close(ini) // the exec request is still unread
	m, _, err := Recv(sup)
	if err != nil || m.Type != MsgError || m.Stage != "mounts" {
		t.Fatalf("Recv = %+v, %v; want the init's error message", m, err)
	}
	if _, _, err := Recv(sup); err == nil {
		t.Fatal("a second Recv after the peer closed returned a message")
	}
}
