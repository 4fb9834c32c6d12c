package egress_test

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/egress"
)

// nagleServer is an upstream that answers as Python's http.server does
// with protocol_version HTTP/1.1: Nagle's algorithm on, keep-alive, and
// the head and the body of each response in writes of their own, so the
// body leaves only once the head is acknowledged. Before it writes a
// head it calls seen with the connection it reads from, the proxy's
// upstream connection seen from the other end.
func nagleServer(t *testing.T, cert *tls.Certificate, seen func(raw net.Conn)) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.(*net.TCPConn).SetNoDelay(false)
				c.SetDeadline(time.Now().Add(30 * time.Second))
				var rw net.Conn = c
				if cert != nil {
					rw = tls.Server(c, &tls.Config{Certificates: []tls.Certificate{*cert}})
				}
				br := bufio.NewReader(rw)
				for {
					req := readRequest(br)
					if req == nil {
						return
					}
					seen(c)
					head := "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n"
					if req.Close {
						head += "Connection: close\r\n"
					}
					if _, err := io.WriteString(rw, head+"\r\n"); err != nil {
						return
					}
					if _, err := io.WriteString(rw, "hello\n"); err != nil || req.Close {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

// pureAcks counts the segments without data that c has sent: its ACKs
// that rode on no data (TCP_INFO, tcp(7); Linux 4.6).
func pureAcks(t *testing.T, c net.Conn) uint32 {
	t.Helper()
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var info *unix.TCPInfo
	var gerr error
	if err := rc.Control(func(fd uintptr) { info, gerr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) }); err != nil || gerr != nil {
		t.Fatalf("TCP_INFO: %v %v", err, gerr)
	}
	return info.Segs_out - info.Data_segs_out
}

// TestUpstreamAcksPromptly: on every egress path, the proxy acknowledges
// what an upstream sends as it reads it, before it passes it on. An
// upstream with Nagle's algorithm on (Python's http.server, many small
// servers) holds the second write of a response until the first is
// acknowledged; on a connection that carries request after request, the
// kernel delays the ACK of a reply (up to 40 ms) in the hope of sending it
// with the next request, so without this each request past the first
// waited 40 ms for a timer. The pooled path made it worse than the
// client's own choice: a client that opens a connection per request
// reached a reused upstream connection. The check is on the mechanism, not
// on time: when the client has the response head, the proxy's upstream
// socket has sent an ACK since the upstream read the request.
func TestUpstreamAcksPromptly(t *testing.T) {
	const requests = 5
	cert, _, roots := testCert(t, "up.test")
	for _, path := range []string{"pooled", "keepalive", "connect-http", "transparent-http", "socks", "connect-tls", "transparent-tls", "credential-tls"} {
		t.Run(path, func(t *testing.T) {
			type snapshot struct {
				conn net.Conn
				acks uint32
			}
			snaps := make(chan snapshot, requests)
			var h *harness
			var upCert *tls.Certificate
			if strings.HasSuffix(path, "-tls") {
				upCert = &cert
			}
			port := nagleServer(t, upCert, func(raw net.Conn) {
				pc := h.dialer.connFrom(raw.RemoteAddr())
				if pc == nil {
					t.Errorf("the upstream's client %s is no connection the proxy dialed", raw.RemoteAddr())
					snaps <- snapshot{}
					return
				}
				snaps <- snapshot{pc, pureAcks(t, pc)}
			})
			authority := net.JoinHostPort("up.test", strconv.Itoa(port))
			hc := harnessConfig{
				hosts:   []string{authority, net.JoinHostPort("127.0.0.1", strconv.Itoa(port))},
				resolve: map[string]string{"up.test": "127.0.0.1"},
				roots:   roots,
			}
			if strings.HasPrefix(path, "transparent") {
				hc.via = viaTransparent
			}
			clientRoots := roots
			if path == "credential-tls" {
				ca, err := egress.NewCA([]string{"up.test"})
				if err != nil {
					t.Fatal(err)
				}
				hc.creds = []egress.Credential{{Host: "up.test", Header: "Authorization", Value: "Bearer " + secret}}
				hc.ca = ca
				blk, _ := pem.Decode(ca.CertPEM())
				caCert, err := x509.ParseCertificate(blk.Bytes)
				if err != nil {
					t.Fatal(err)
				}
				clientRoots = x509.NewCertPool()
				clientRoots.AddCert(caCert)
			}
			h = startProxy(t, hc)

			// open returns a client connection as the path makes one.
			target, extra := "/", ""
			open := func() net.Conn {
				var c net.Conn
				switch path {
				case "pooled", "keepalive":
					var err error
					if c, err = net.Dial("tcp", h.httpAddr); err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { c.Close() })
					target = "http://" + authority + "/"
				case "socks":
					var rep byte
					if c, rep = socksConnect(t, h.socksAddr, 1, 3, []byte("up.test"), uint16(port)); rep != 0 {
						t.Fatalf("SOCKS5 connect to %s: reply %d", authority, rep)
					}
				default:
					var status int
					if c, status = h.open(t, authority); status != http.StatusOK {
						t.Fatalf("open %s = %d", authority, status)
					}
				}
				if upCert != nil {
					tc := tls.Client(c, &tls.Config{ServerName: "up.test", RootCAs: clientRoots})
					if err := tc.Handshake(); err != nil {
						t.Fatalf("TLS to %s through the proxy: %v", authority, err)
					}
					c = tc
				}
				c.SetDeadline(time.Now().Add(30 * time.Second))
				return c
			}
			if path == "pooled" {
				extra = "Connection: close\r\n" // as urllib sends it: one connection per request
			}
			var c net.Conn
			var br *bufio.Reader
			for i := 1; i <= requests; i++ {
				if c == nil || path == "pooled" {
					c = open()
					br = bufio.NewReader(c)
				}
				fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\n%s\r\n", target, authority, extra)
				// ReadResponse returns once it has the head; the body may
				// still wait for the upstream's Nagle.
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("request %d: read the response head: %v", i, err)
				}
				s := <-snaps
				if s.conn == nil {
					t.FailNow()
				}
				if now := pureAcks(t, s.conn); now == s.acks {
					t.Errorf("request %d: the proxy passed the response head to the client before it acknowledged it to the upstream "+
						"(pure ACKs on its upstream socket: %d when the upstream read the request, %d now); the upstream holds the rest of its response "+
						"for that ACK, which the kernel delays by up to 40 ms on a connection that carries request after request", i, s.acks, now)
				}
				body, err := io.ReadAll(resp.Body)
				if err != nil || string(body) != "hello\n" {
					t.Fatalf("request %d: body %q, %v; want %q", i, body, err, "hello\n")
				}
			}
		})
	}
}
