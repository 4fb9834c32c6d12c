package connbroker

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/airtest"
)

// These tests run real targets: the test binary re-executed as a child
// (child_linux_test.go) that filters its main thread and hands the
// listener to the test, which serves it with Serve and a decide callback.
// Nothing but loopback is ever dialed; the children aim at TEST-NET-1,
// which is never routed. The test process itself never gets a filter.

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		os.Exit(runChild(mode))
	}
	os.Exit(m.Run())
}

// childTimeout bounds one child, from start to exit.
const childTimeout = 60 * time.Second

// requireBroker skips unless the kernel can run the broker: seccomp user
// notification with ADDFD (Linux 5.9) and a parent allowed to read its
// child (Yama ptrace_scope below 3).
func requireBroker(t testing.TB) {
	t.Helper()
	if _, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0); err != nil {
		airtest.SkipOrFail(t, "kernel has no seccomp (prctl PR_GET_SECCOMP: %v)", err)
	}
	action := uint32(unix.SECCOMP_RET_USER_NOTIF)
	if _, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_GET_ACTION_AVAIL, 0, uintptr(unsafe.Pointer(&action))); errno != 0 {
		airtest.SkipOrFail(t, "kernel has no seccomp user notification (SECCOMP_GET_ACTION_AVAIL USER_NOTIF: %v); it needs Linux 5.0", errno)
	}
	if ok, release := kernelAtLeast(t, 5, 9); !ok {
		airtest.SkipOrFail(t, "kernel %s is older than 5.9, which added SECCOMP_IOCTL_NOTIF_ADDFD", release)
	}
	if b, err := os.ReadFile("/proc/sys/kernel/yama/ptrace_scope"); err == nil && strings.TrimSpace(string(b)) == "3" {
		airtest.SkipOrFail(t, "Yama ptrace_scope is 3: no process may read another's memory (process_vm_readv, pidfd_getfd)")
	}
}

// kernelAtLeast reports whether the running kernel is major.minor or
// later, and its release.
func kernelAtLeast(t testing.TB, major, minor int) (bool, string) {
	t.Helper()
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatalf("uname: %v", err)
	}
	release := unix.ByteSliceToString(u.Release[:])
	var maj, min int
	if _, err := fmt.Sscanf(release, "%d.%d", &maj, &min); err != nil {
		t.Fatalf("kernel release %q: %v", release, err)
	}
	return maj > major || maj == major && min >= minor, release
}

// target is a running child and the listener it sent.
type target struct {
	cmd      *exec.Cmd
	ctl      *net.UnixConn // the parent's end of the control socketpair
	listener int           // the child's filter listener, close-on-exec
	stdout   bytes.Buffer
	stderr   bytes.Buffer
}

// startTarget starts a child in mode with extra environment env and
// receives its listener. The child is killed when the test ends.
func startTarget(t testing.TB, mode string, env ...string) *target {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), childTimeout)
	t.Cleanup(cancel)
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("socketpair: %v", err)
	}
	mine, theirs := os.NewFile(uintptr(pair[0]), "ctl"), os.NewFile(uintptr(pair[1]), "ctl-child")
	tg := &target{listener: -1}
	tg.cmd = exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	tg.cmd.Env = append(os.Environ(), append([]string{childEnv + "=" + mode}, env...)...)
	tg.cmd.ExtraFiles = []*os.File{theirs}
	tg.cmd.Stdout, tg.cmd.Stderr = &tg.stdout, &tg.stderr
	tg.cmd.WaitDelay = 5 * time.Second
	err = tg.cmd.Start()
	theirs.Close()
	if err != nil {
		mine.Close()
		t.Fatalf("start child %s: %v", mode, err)
	}
	t.Cleanup(func() {
		if tg.cmd.ProcessState == nil {
			tg.cmd.Process.Kill()
			tg.cmd.Wait() // reaps it; the kill is the error
		}
	})
	c, err := net.FileConn(mine)
	mine.Close()
	if err != nil {
		t.Fatalf("control socket: %v", err)
	}
	tg.ctl = c.(*net.UnixConn)
	t.Cleanup(func() { tg.ctl.Close() })

	tg.ctl.SetDeadline(time.Now().Add(childTimeout))
	buf, oob := make([]byte, 1), make([]byte, unix.CmsgSpace(4))
	// ReadMsgUnix sets MSG_CMSG_CLOEXEC: the listener never leaks into
	// another test's child.
	_, oobn, _, _, err := tg.ctl.ReadMsgUnix(buf, oob)
	if err != nil {
		t.Fatalf("receive listener from child %s: %v\nstderr:\n%s", mode, err, tg.stderrText())
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		t.Fatalf("child %s sent control messages %v (%v), want one SCM_RIGHTS", mode, msgs, err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		t.Fatalf("child %s sent fds %v (%v), want one listener", mode, fds, err)
	}
	tg.listener = fds[0]
	return tg
}

// stderrText is the child's stderr so far; read it only after the child
// has exited or to report a failure.
func (tg *target) stderrText() string { return tg.stderr.String() }

// wait waits for the child to exit and returns its "key value" lines. It
// fails t unless the child exited 0 after printing "done".
func (tg *target) wait(t testing.TB) map[string]string {
	t.Helper()
	err := tg.cmd.Wait()
	out := tg.stdout.String()
	if err != nil || !strings.HasSuffix(out, "done\n") {
		t.Fatalf("child: %v\nstdout:\n%s\nstderr:\n%s", err, out, tg.stderrText())
	}
	lines := make(map[string]string)
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), " ")
		lines[k] = v
	}
	return lines
}

// served is a Serve call running in its own goroutine.
type served struct {
	stop     chan struct{}
	stopOnce sync.Once
	done     chan error
}

// serve runs Serve on listener, which it then owns.
func serve(listener int, decide func(Request) Verdict) *served {
	return serveHandler(listener, Handler{Decide: decide})
}

// serveHandler runs h.Serve on listener, which it then owns.
func serveHandler(listener int, h Handler) *served {
	s := &served{stop: make(chan struct{}), done: make(chan error, 1)}
	go func() { s.done <- h.Serve(listener, s.stop) }()
	return s
}

// wait waits for Serve to return by itself (POLLHUP) or, with stop, after
// closing stop, and fails t if it returns an error or does not return.
func (s *served) wait(t testing.TB, stop bool) {
	t.Helper()
	if stop {
		s.stopOnce.Do(func() { close(s.stop) })
	}
	select {
	case err := <-s.done:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(childTimeout):
		t.Fatalf("Serve did not return within %v (stop %v)", childTimeout, stop)
	}
}

// recorder is a decide callback that records its requests.
type recorder struct {
	mu   sync.Mutex
	reqs []Request // guarded by mu
	fn   func(Request) Verdict
}

func (r *recorder) decide(req Request) Verdict {
	r.mu.Lock()
	r.reqs = append(r.reqs, req)
	r.mu.Unlock()
	return r.fn(req)
}

func (r *recorder) requests() []Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Request(nil), r.reqs...)
}

// refuseAll refuses every connect with errno.
func refuseAll(errno syscall.Errno) func(Request) Verdict {
	return func(Request) Verdict { return Verdict{Errno: errno} }
}

// listenTCP listens on 127.0.0.1 at a free port.
func listenTCP(t testing.TB) *net.TCPListener {
	t.Helper()
	ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatalf("listen on loopback: %v", err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

func addrPort(ln net.Listener) netip.AddrPort {
	return ln.Addr().(*net.TCPAddr).AddrPort()
}

// queued takes every connection waiting in ln's accept queue, without
// waiting for more: a connection that was ever established there,
// even if closed since, is in the queue until accepted.
func queued(t *testing.T, ln syscall.Conn) []net.Conn {
	t.Helper()
	rc, err := ln.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	for {
		var nfd int
		var aerr error
		if err := rc.Control(func(fd uintptr) { nfd, _, aerr = unix.Accept4(int(fd), unix.SOCK_CLOEXEC) }); err != nil {
			t.Fatal(err)
		}
		if errors.Is(aerr, unix.EAGAIN) {
			return conns
		}
		if aerr != nil {
			t.Fatalf("accept: %v", aerr)
		}
		f := os.NewFile(uintptr(nfd), "accepted")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		conns = append(conns, c)
	}
}

// expectNone fails t if anything ever connected to ln.
func expectNone(t *testing.T, what string, ln syscall.Conn) {
	t.Helper()
	if n := len(queued(t, ln)); n != 0 {
		t.Errorf("%s accepted %d connections, want 0", what, n)
	}
}

// readAll reads c to EOF, bounded by childTimeout.
func readAll(t *testing.T, c net.Conn) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(childTimeout))
	b, err := io.ReadAll(c)
	if err != nil {
		t.Errorf("read accepted connection: %v", err)
	}
	return string(b)
}

// wantLines checks child output lines.
func wantLines(t *testing.T, got map[string]string, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got[k] != v {
			t.Errorf("child %s = %q, want %q", k, got[k], v)
		}
	}
}

func errnoStr(e syscall.Errno) string { return strconv.Itoa(int(e)) }

// TestRedirect: the target connects to TEST-NET addresses and gets the
// supervisor's connections to loopback listeners instead, at the same fd
// number, with its O_NONBLOCK and close-on-exec, stream and datagram.
func TestRedirect(t *testing.T) {
	requireBroker(t)
	t.Parallel()
	tcpLn := listenTCP(t)
	udpLn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatalf("listen udp on loopback: %v", err)
	}
	t.Cleanup(func() { udpLn.Close() })

	rec := &recorder{fn: func(r Request) Verdict {
		var network, dst string
		switch {
		case r.Family == unix.AF_INET && r.Type == unix.SOCK_STREAM && r.Addr == netip.AddrPortFrom(testNet, 80):
			network, dst = "tcp4", tcpLn.Addr().String()
		case r.Family == unix.AF_INET && r.Type == unix.SOCK_DGRAM && r.Addr == netip.AddrPortFrom(testNet, 53):
			network, dst = "udp4", udpLn.LocalAddr().String()
		default:
			return Verdict{Errno: unix.ECONNREFUSED}
		}
		c, err := net.DialTimeout(network, dst, childTimeout)
		if err != nil {
			return Verdict{Errno: unix.EHOSTUNREACH}
		}
		return Verdict{Conn: c.(Conn)}
	}}
	tg := startTarget(t, "redirect")
	s := serve(tg.listener, rec.decide)
	got := tg.wait(t)
	s.wait(t, false) // the child is reaped: POLLHUP ends Serve

	peer := addrPort(tcpLn).String()
	wantLines(t, got, map[string]string{
		"nonblock.connect": "0", "nonblock.nonblock": "true", "nonblock.cloexec": "true",
		"nonblock.type": strconv.Itoa(unix.SOCK_STREAM), "nonblock.peer": peer, "nonblock.write": "5 0",
		"blocking.connect": "0", "blocking.nonblock": "false", "blocking.cloexec": "false",
		"blocking.type": strconv.Itoa(unix.SOCK_STREAM), "blocking.peer": peer, "blocking.write": "5 0",
		"udp.connect": "0", "udp.nonblock": "false", "udp.cloexec": "true",
		"udp.type": strconv.Itoa(unix.SOCK_DGRAM), "udp.write": "5 0",
		"mapped.connect": errnoStr(unix.ECONNREFUSED),
	})

	var texts []string
	for _, c := range queued(t, tcpLn) {
		texts = append(texts, readAll(t, c))
	}
	if strings.Join(texts, ",") != "hello,world" {
		t.Errorf("loopback listener received %q, want hello then world", texts)
	}
	udpLn.SetReadDeadline(time.Now().Add(childTimeout))
	buf := make([]byte, 64)
	if n, _, err := udpLn.ReadFrom(buf); err != nil || string(buf[:n]) != "query" {
		t.Errorf("loopback UDP listener received %q, %v, want \"query\"", buf[:n], err)
	}

	reqs := rec.requests()
	if len(reqs) != 4 {
		t.Fatalf("decide saw %d requests, want 4: %+v", len(reqs), reqs)
	}
	tid, _ := strconv.Atoi(got["tid"])
	for i, key := range []string{"nonblock", "blocking", "udp"} {
		r := reqs[i]
		fd, _ := strconv.Atoi(got[key+".fd"])
		if r.Pid != tid || r.FD != fd || r.Domain != unix.AF_INET || len(r.Raw) != unix.SizeofSockaddrInet4 {
			t.Errorf("request %d (%s) = %+v, want pid %d, fd %d, domain AF_INET, 16 raw bytes", i, key, r, tid, fd)
		}
	}
	if r := reqs[3]; r.Family != unix.AF_INET6 || r.Domain != unix.AF_INET6 || r.Addr != netip.AddrPortFrom(testNet, 443) {
		t.Errorf("v4-mapped request = %+v, want family and domain AF_INET6, addr %v unmapped", r, netip.AddrPortFrom(testNet, 443))
	}
}

// TestConnectOwn: the broker connects the target's own socket where decide
// says (Connect), telling Bound the local address first (a loopback
// address of its own for each socket it binds), keeps the socket's fd,
// flags and an address the target bound itself; a socket connected there
// already (a connect restarted after a signal) answers 0 and one
// connected elsewhere EISCONN, Bound told that no connection comes;
// Continue lets the kernel connect the address the target named; a
// Verdict that asks for two things is refused with EACCES and connects
// nothing.
func TestConnectOwn(t *testing.T) {
	requireBroker(t)
	t.Parallel()
	to := listenTCP(t)
	direct := listenTCP(t)
	var mu sync.Mutex
	var bound []netip.AddrPort // guarded by mu
	var unbound int            // guarded by mu: Bound told no connection comes
	record := func(l netip.AddrPort) {
		mu.Lock()
		defer mu.Unlock()
		if !l.IsValid() {
			unbound++
			return
		}
		bound = append(bound, l)
	}
	rec := &recorder{fn: func(r Request) Verdict {
		switch {
		case r.Addr == netip.AddrPortFrom(testNet, 80):
			return Verdict{Connect: addrPort(to), Bound: record}
		case r.Addr == addrPort(direct):
			return Verdict{Continue: true}
		}
		return Verdict{Continue: true, Connect: addrPort(to), Bound: record}
	}}
	tg := startTarget(t, "own", forbiddenEnv+"="+addrPort(direct).String())
	s := serve(tg.listener, rec.decide)
	got := tg.wait(t)
	s.wait(t, false)

	peer := addrPort(to).String()
	nb := got["nonblock.connect"]
	if nb != "0" && !(nb == errnoStr(unix.EINPROGRESS) && got["nonblock.so_error"] == "0") {
		t.Errorf("non-blocking connect = %s (so_error %s), want 0 or EINPROGRESS then 0", nb, got["nonblock.so_error"])
	}
	wantLines(t, got, map[string]string{
		"blocking.connect": "0", "blocking.peer": peer, "blocking.write": "3 0", "blocking.nonblock": "false",
		"nonblock.peer": peer, "nonblock.nonblock": "true", "nonblock.write": "2 0",
		"bound.connect": "0", "bound.peer": peer, "bound.write": "5 0",
		"again.connect": "0", "again.again": "0", "again.peer": peer, "again.write": "5 0",
		"continue.connect": "0", "continue.peer": addrPort(direct).String(), "continue.write": "4 0",
		"elsewhere.connect": "0", "elsewhere.again": errnoStr(unix.EISCONN), "elsewhere.peer": addrPort(direct).String(),
		"both.connect": errnoStr(unix.EACCES), "both.peer": "none",
	})
	conns := queued(t, to)
	var texts []string
	var froms []netip.AddrPort
	for _, c := range conns {
		texts = append(texts, readAll(t, c))
		froms = append(froms, c.RemoteAddr().(*net.TCPAddr).AddrPort())
	}
	if strings.Join(texts, ",") != "own,nb,bound,again" {
		t.Errorf("the Connect listener received %q, want own, nb, bound, again", texts)
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(bound) != fmt.Sprint(froms) {
		t.Errorf("Bound was told %v, the listener saw connections from %v", bound, froms)
	}
	if unbound != 3 {
		t.Errorf("Bound was told %d times that no connection comes, want 3 (again, elsewhere, both)", unbound)
	}
	if len(bound) == 4 {
		if want := "127.0.0.1:" + got["bound.port"]; bound[2].String() != want {
			t.Errorf("an already bound socket was told %v, it had bound %s", bound[2], want)
		}
		seen := map[netip.Addr]bool{}
		for i, key := range []string{"blocking", "nonblock", "again"} {
			l := bound[[]int{0, 1, 3}[i]]
			if !l.Addr().IsLoopback() || seen[l.Addr()] || got[key+".local"] != l.String() {
				t.Errorf("%s was bound to %v (the target sees %s), want a loopback address no other took", key, l, got[key+".local"])
			}
			seen[l.Addr()] = true
		}
	}
	cs := queued(t, direct)
	var directTexts []string
	for _, c := range cs {
		directTexts = append(directTexts, readAll(t, c))
	}
	if strings.Join(directTexts, ",") != "cont," {
		t.Errorf("the Continue listener received %q, want cont and an empty one", directTexts)
	}
	for _, r := range rec.requests() {
		if r.NetNS == 0 {
			t.Errorf("request %v has no network namespace cookie", r.Addr)
		}
	}
}

// TestRefuse: a refused connect fails with decide's errno and the listener
// the target aimed at directly is never reached.
func TestRefuse(t *testing.T) {
	requireBroker(t)
	t.Parallel()
	ln := listenTCP(t)
	rec := &recorder{fn: refuseAll(unix.EACCES)}
	tg := startTarget(t, "refuse", forbiddenEnv+"="+addrPort(ln).String())
	s := serve(tg.listener, rec.decide)
	got := tg.wait(t)
	s.wait(t, false)
	wantLines(t, got, map[string]string{"connect": errnoStr(unix.EACCES)})
	expectNone(t, "the forbidden listener", ln)
	if reqs := rec.requests(); len(reqs) != 1 || reqs[0].Addr != addrPort(ln) {
		t.Errorf("decide saw %+v, want one request for %v", reqs, addrPort(ln))
	}
}

// TestTOCTOU: a second thread flips the sockaddr between an allowed
// address and a forbidden one while the target connects again and again.
// The forbidden listener must see nothing, and every connect that
// succeeded must be one decide allowed.
func TestTOCTOU(t *testing.T) {
	requireBroker(t)
	t.Parallel()
	bad, good := listenTCP(t), listenTCP(t)
	var mu sync.Mutex
	seen := map[netip.AddrPort]int{} // guarded by mu
	rec := &recorder{fn: func(r Request) Verdict {
		mu.Lock()
		seen[r.Addr]++
		mu.Unlock()
		if r.Family != unix.AF_INET || r.Addr != netip.AddrPortFrom(testNet, 80) {
			return Verdict{Errno: unix.EACCES}
		}
		c, err := net.DialTimeout("tcp4", good.Addr().String(), childTimeout)
		if err != nil {
			return Verdict{Errno: unix.EHOSTUNREACH}
		}
		return Verdict{Conn: c.(Conn)}
	}}
	tg := startTarget(t, "toctou", forbiddenEnv+"="+addrPort(bad).String())
	s := serve(tg.listener, rec.decide)
	tg.wait(t) // the lines repeat keys: counted below
	s.wait(t, false)

	expectNone(t, "the forbidden listener", bad)
	counts := map[string]int{}
	for _, line := range strings.Split(tg.stdout.String(), "\n") {
		var key, val string
		var n int
		if c, _ := fmt.Sscanf(line, "%s %s %d", &key, &val, &n); c == 3 {
			counts[key+" "+val] += n
		}
	}
	ok := counts["errno 0"]
	if total := ok + counts["errno "+errnoStr(unix.EACCES)]; total != toctouAttempts {
		t.Errorf("child connects: %v, want %d that succeeded or got EACCES", counts, toctouAttempts)
	}
	if n := counts["peer "+addrPort(good).String()]; n != ok {
		t.Errorf("%d of %d successful connects reached the allowed listener (%v)", n, ok, counts)
	}
	// A connect interrupted after decide (the Go runtime's preemption
	// signal) is restarted as a new notification: the connection made for
	// the first one is closed unused, but the listener has accepted it.
	if n := len(queued(t, good)); n < ok || n > ok+5 {
		t.Errorf("the allowed listener accepted %d connections, want %d (and a few more for restarted connects)", n, ok)
	}
	mu.Lock()
	t.Logf("decide saw %v; the child got %v", seen, counts)
	mu.Unlock()
}

// TestSwap: the target rewrites its sockaddr to the forbidden address
// after decide has read and allowed it, before the answer. The connect
// must still reach only the address decide checked.
func TestSwap(t *testing.T) {
	requireBroker(t)
	t.Parallel()
	bad, good := listenTCP(t), listenTCP(t)
	var tg *target
	rec := &recorder{fn: func(r Request) Verdict {
		if r.Family != unix.AF_INET || r.Addr != netip.AddrPortFrom(testNet, 80) {
			return Verdict{Errno: unix.EACCES}
		}
		b := []byte{'S'}
		if _, err := tg.ctl.Write(b); err != nil {
			t.Errorf("ask the child to swap its sockaddr: %v", err)
			return Verdict{Errno: unix.EIO}
		}
		if _, err := tg.ctl.Read(b); err != nil {
			t.Errorf("wait for the child to swap its sockaddr: %v", err)
			return Verdict{Errno: unix.EIO}
		}
		c, err := net.DialTimeout("tcp4", good.Addr().String(), childTimeout)
		if err != nil {
			return Verdict{Errno: unix.EHOSTUNREACH}
		}
		return Verdict{Conn: c.(Conn)}
	}}
	tg = startTarget(t, "swap", forbiddenEnv+"="+addrPort(bad).String())
	s := serve(tg.listener, rec.decide)
	got := tg.wait(t)
	s.wait(t, false)
	wantLines(t, got, map[string]string{"connect": "0", "sock.peer": addrPort(good).String(), "memory": "true"})
	expectNone(t, "the forbidden listener", bad)
	if n := len(queued(t, good)); n != 1 {
		t.Errorf("the allowed listener accepted %d connections, want 1", n)
	}
	if reqs := rec.requests(); len(reqs) != 1 {
		t.Errorf("decide saw %+v, want one request", reqs)
	}
}

// TestUnix: connects to unix sockets, by path and abstract name, are
// refused by decide and never reach the listeners; decide sees the paths.
func TestUnix(t *testing.T) {
	requireBroker(t)
	t.Parallel()
	path := t.TempDir() + "/s"
	abstract := "@airlock-connbroker-" + strconv.Itoa(os.Getpid())
	var lns []*net.UnixListener
	for _, name := range []string{path, abstract} {
		ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: name, Net: "unix"})
		if err != nil {
			t.Fatalf("listen on unix socket %s: %v", name, err)
		}
		t.Cleanup(func() { ln.Close() })
		lns = append(lns, ln)
	}
	rec := &recorder{fn: func(r Request) Verdict {
		if r.Family == unix.AF_UNIX {
			return Verdict{Errno: unix.EACCES}
		}
		return Verdict{Errno: unix.EPERM}
	}}
	tg := startTarget(t, "unix", unixEnv+"="+path, abstractEnv+"="+abstract)
	s := serve(tg.listener, rec.decide)
	got := tg.wait(t)
	s.wait(t, false)
	wantLines(t, got, map[string]string{"path.connect": errnoStr(unix.EACCES), "abstract.connect": errnoStr(unix.EACCES)})
	expectNone(t, "the unix listener", lns[0])
	expectNone(t, "the abstract unix listener", lns[1])
	reqs := rec.requests()
	if len(reqs) != 2 || reqs[0].Path != path || reqs[1].Path != abstract || reqs[0].Type != unix.SOCK_STREAM || reqs[0].Domain != unix.AF_UNIX {
		t.Errorf("decide saw %+v, want AF_UNIX stream requests for %q and %q", reqs, path, abstract)
	}
}

// TestSupervisorGone: once Serve has stopped (and closed the listener),
// the kernel fails the target's connects with ENOSYS and the forbidden
// listener is never reached.
func TestSupervisorGone(t *testing.T) {
	requireBroker(t)
	t.Parallel()
	ln := listenTCP(t)
	tg := startTarget(t, "gone", forbiddenEnv+"="+addrPort(ln).String())
	s := serve(tg.listener, refuseAll(unix.EACCES))
	b := make([]byte, 1)
	if _, err := tg.ctl.Read(b); err != nil {
		t.Fatalf("wait for the child's first connect: %v\nstderr:\n%s", err, tg.stderrText())
	}
	s.wait(t, true)
	if _, err := tg.ctl.Write([]byte{'B'}); err != nil {
		t.Fatalf("release the child: %v", err)
	}
	got := tg.wait(t)
	// Both lines have the key "connect": the second, after Serve, wins.
	wantLines(t, got, map[string]string{"connect": errnoStr(unix.ENOSYS)})
	if !strings.Contains(tg.stdout.String(), "connect "+errnoStr(unix.EACCES)+"\n") {
		t.Errorf("child's first connect, while served, did not get EACCES:\n%s", tg.stdout.String())
	}
	expectNone(t, "the forbidden listener", ln)
}

// TestPendingWhenGone: a connect that waits for an answer when the
// listener is closed fails with ENOSYS, and so does the next one.
func TestPendingWhenGone(t *testing.T) {
	requireBroker(t)
	t.Parallel()
	ln := listenTCP(t)
	tg := startTarget(t, "pending", forbiddenEnv+"="+addrPort(ln).String())
	fds := []unix.PollFd{{Fd: int32(tg.listener), Events: unix.POLLIN}}
	if n, err := unix.Poll(fds, int(childTimeout/time.Millisecond)); n != 1 || err != nil {
		t.Fatalf("poll listener for the child's connect: %d, %v\nstderr:\n%s", n, err, tg.stderrText())
	}
	if err := unix.Close(tg.listener); err != nil {
		t.Fatalf("close listener: %v", err)
	}
	tg.wait(t)
	if want := "connect 38\nconnect 38\ndone\n"; tg.stdout.String() != want {
		t.Errorf("child printed %q, want %q (ENOSYS twice)", tg.stdout.String(), want)
	}
	expectNone(t, "the forbidden listener", ln)
}

// TestBadArgs: lengths out of range get EINVAL without the broker reading
// the target's memory, a pointer that faults gets EFAULT, an fd that is
// not an open socket EBADF or ENOTSOCK, and decide is asked only about
// the one valid connect.
func TestBadArgs(t *testing.T) {
	requireBroker(t)
	t.Parallel()
	ln := listenTCP(t)
	rec := &recorder{fn: refuseAll(unix.EHOSTUNREACH)}
	tg := startTarget(t, "badargs", forbiddenEnv+"="+addrPort(ln).String())
	s := serve(tg.listener, rec.decide)
	got := tg.wait(t)
	s.wait(t, false)
	einval, efault := errnoStr(unix.EINVAL), errnoStr(unix.EFAULT)
	wantLines(t, got, map[string]string{
		"len0": einval, "len1": einval, "len4096": einval, "lenneg": einval, "len4096valid": einval,
		"badptr": efault, "short": einval,
		"notsock": errnoStr(unix.ENOTSOCK), "badfd": errnoStr(unix.EBADF), "negfd": errnoStr(unix.EBADF),
		"highbits": errnoStr(unix.EHOSTUNREACH),
	})
	if reqs := rec.requests(); len(reqs) != 1 || reqs[0].Addr != addrPort(ln) || len(reqs[0].Raw) != 16 {
		t.Errorf("decide saw %+v, want only the highbits connect to %v with 16 bytes", reqs, addrPort(ln))
	}
	expectNone(t, "the forbidden listener", ln)
}
