package connbroker

import (
	"net"
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkServe times one connect(2) of a target whose filter hands it to
// Serve, per connect, against the same target whose filter lets connect
// through ("plain", same filter otherwise): the broker's whole cost, from
// the notification to the target's return. udp connects one datagram
// socket to 127.0.0.1 again and again (the cheapest connect there is); tcp
// connects a new socket to a listener on loopback and closes it. The
// broker lets it continue, answered by Handler.Quick ("quick") or by
// Decide ("decide"), connects it elsewhere (Verdict.Connect, to another
// listener) or installs a connection Decide dialed (Verdict.Conn), with
// raw syscalls ("rawconn") or the net package ("conn").
func BenchmarkServe(b *testing.B) {
	requireBroker(b)
	accept := func(ln *net.TCPListener) {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}
	ln, other := listenTCP(b), listenTCP(b)
	go accept(ln)
	go accept(other)
	cont := func(Request) Verdict { return Verdict{Continue: true} }
	quick := func(Request) (Verdict, bool) { return Verdict{Continue: true}, true }
	for _, c := range []struct {
		name   string
		plain  bool
		quick  func(Request) (Verdict, bool)
		decide func(Request) Verdict
	}{
		{"udp/plain", true, nil, nil},
		{"udp/quick", false, quick, nil},
		{"udp/decide", false, nil, cont},
		{"tcp/plain", true, nil, nil},
		{"tcp/quick", false, quick, nil},
		{"tcp/decide", false, nil, cont},
		{"tcp/connect", false, nil, func(Request) Verdict { return Verdict{Connect: addrPort(other)} }},
		{"tcp/rawconn", false, nil, func(Request) Verdict {
			// As the backend without namespaces dials: raw syscalls.
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return Verdict{Errno: unix.ENOBUFS}
			}
			if err := unix.Connect(fd, sockaddr(addrPort(other))); err != nil {
				unix.Close(fd)
				return Verdict{Errno: unix.ECONNREFUSED}
			}
			return Verdict{Conn: os.NewFile(uintptr(fd), "conn")}
		}},
		{"tcp/conn", false, nil, func(Request) Verdict {
			c, err := net.Dial("tcp4", other.Addr().String())
			if err != nil {
				return Verdict{Errno: unix.ECONNREFUSED}
			}
			return Verdict{Conn: c.(*net.TCPConn)}
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			kind, _, _ := strings.Cut(c.name, "/")
			env := []string{benchEnv + "=" + kind + " " + strconv.Itoa(b.N), forbiddenEnv + "=" + addrPort(ln).String()}
			if c.plain {
				env = append(env, plainEnv+"=1")
			}
			decide := c.decide
			if decide == nil {
				decide = func(r Request) Verdict {
					b.Errorf("decide called for %+v with a filter that lets connect through", r)
					return Verdict{Errno: unix.EACCES}
				}
			}
			tg := startTarget(b, "bench", env...)
			s := serveHandler(tg.listener, Handler{Quick: c.quick, Decide: decide})
			got := tg.wait(b)
			s.wait(b, false)
			ns, err := strconv.ParseFloat(got["elapsed"], 64)
			if err != nil {
				b.Fatalf("child printed no elapsed time: %v", err)
			}
			b.ReportMetric(ns/float64(b.N), "ns/connect")
		})
	}
}
