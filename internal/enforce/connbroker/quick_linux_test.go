package connbroker

import (
	"net"
	"net/netip"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestQuick: Handler.Quick answers on the receiving goroutine with
// Continue (the kernel connects what the target named) or an errno; a
// Verdict from Quick that would install or connect something is refused
// with EACCES and connects nothing (its Conn is closed), as are the zero
// Verdict and one that asks for two things; what Quick leaves goes to
// Decide, and only that.
func TestQuick(t *testing.T) {
	requireBroker(t)
	t.Parallel()
	direct, other := listenTCP(t), listenTCP(t)
	port := func(r Request) uint16 {
		if r.Addr.Addr() != testNet {
			return 0
		}
		return r.Addr.Port()
	}
	quick := func(r Request) (Verdict, bool) {
		if r.Addr == addrPort(direct) {
			return Verdict{Continue: true}, true
		}
		switch port(r) {
		case 1:
			return Verdict{Errno: unix.ECONNREFUSED}, true
		case 2:
			c, err := net.Dial("tcp4", other.Addr().String())
			if err != nil {
				t.Errorf("dial: %v", err)
				return Verdict{}, true
			}
			return Verdict{Conn: c.(*net.TCPConn)}, true
		case 3:
			return Verdict{Connect: addrPort(other)}, true
		case 5:
			return Verdict{}, true
		case 6:
			return Verdict{Continue: true, Errno: unix.ECONNREFUSED}, true
		case 7:
			return Verdict{Errno: 4096}, true
		}
		return Verdict{}, false
	}
	rec := &recorder{fn: func(r Request) Verdict {
		if port(r) == 4 {
			return Verdict{Errno: unix.EHOSTUNREACH}
		}
		return Verdict{Continue: true} // never asked: Quick answered
	}}
	list := []string{"cont=" + addrPort(direct).String()}
	for i, key := range []string{"errno", "conn", "connect", "decide", "zero", "both", "bigerrno"} {
		list = append(list, key+"="+netip.AddrPortFrom(testNet, uint16(i+1)).String())
	}
	tg := startTarget(t, "list", listEnv+"="+strings.Join(list, ","))
	if ok, release := kernelAtLeast(t, 6, 6); ok {
		// Serve sets it and ignores a refusal, which only an older
		// kernel may give.
		if err := syncWakeUp(tg.listener); err != nil {
			t.Errorf("SECCOMP_IOCTL_NOTIF_SET_FLAGS SYNC_WAKE_UP on Linux %s: %v", release, err)
		}
	}
	s := serveHandler(tg.listener, Handler{Quick: quick, Decide: rec.decide})
	got := tg.wait(t)
	s.wait(t, false)
	eacces := errnoStr(unix.EACCES)
	wantLines(t, got, map[string]string{
		"cont.connect": "0", "cont.peer": addrPort(direct).String(),
		"errno.connect": errnoStr(unix.ECONNREFUSED), "errno.peer": "none",
		"conn.connect": eacces, "conn.peer": "none",
		"connect.connect": eacces, "connect.peer": "none",
		"decide.connect": errnoStr(unix.EHOSTUNREACH),
		"zero.connect":   eacces, "both.connect": eacces, "bigerrno.connect": eacces,
	})
	if reqs := rec.requests(); len(reqs) != 1 || port(reqs[0]) != 4 {
		t.Errorf("Decide saw %+v, want only the request Quick left", reqs)
	}
	if cs := queued(t, direct); len(cs) != 1 {
		t.Errorf("the listener Quick let the target reach got %d connections, want 1", len(cs))
	}
	// The connection Quick dialed reached other and was closed unused;
	// the target's own socket never came.
	cs := queued(t, other)
	if len(cs) != 1 {
		t.Fatalf("the listener behind Quick's Conn and Connect got %d connections, want 1 (Quick's own dial)", len(cs))
	}
	if b := readAll(t, cs[0]); b != "" {
		t.Errorf("Quick's refused Conn carried %q", b)
	}
}
