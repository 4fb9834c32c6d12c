package egress_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
)

// TestTunnelServerFirst: through the transparent path a protocol whose
// server speaks first (SMTP, MySQL) is carried, since no TLS or HTTP
// server ever does; through CONNECT, which dials only after the client's
// first bytes, the same client waits and is refused at the deadline.
func TestTunnelServerFirst(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.WriteString(c, "220 smtp.test ESMTP\r\n")
				line, _ := bufio.NewReader(c).ReadString('\n')
				io.WriteString(c, "250 got "+line)
			}()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	h := startProxy(t, harnessConfig{hosts: []string{fmt.Sprintf("smtp.test:%d", port), fmt.Sprintf("127.0.0.1:%d", port)}, resolve: map[string]string{"smtp.test": "127.0.0.1"},
		via: viaTransparent, timeout: 2 * time.Second})
	c, status := h.open(t, fmt.Sprintf("smtp.test:%d", port))
	if status != 200 {
		t.Fatalf("open = %d", status)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	if l, err := br.ReadString('\n'); err != nil || l != "220 smtp.test ESMTP\r\n" {
		t.Fatalf("the server's greeting came back as %q, %v", l, err)
	}
	io.WriteString(c, "EHLO me\r\n")
	if l, err := br.ReadString('\n'); err != nil || l != "250 got EHLO me\r\n" {
		t.Fatalf("the reply came back as %q, %v", l, err)
	}
}

// TestTunnelUnclaimed: a connection to the transparent listener that no
// Tunnel was registered for (the sandbox connecting to it by its port) is
// closed without a byte and audited.
func TestTunnelUnclaimed(t *testing.T) {
	h := startProxy(t, harnessConfig{hosts: []string{"allowed.test"}, via: viaTransparent})
	c, err := net.Dial("tcp", h.tunnelAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	// Closed with the request unread: EOF or a reset, never an answer.
	if b, err := io.ReadAll(c); len(b) != 0 || err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("an unclaimed connection got %q, %v; want it closed", b, err)
	}
	waitFor(t, "the denial", func() bool {
		for _, e := range h.rec.Denials() {
			if e.Op == "tunnel" && strings.Contains(e.Message, "did not redirect") {
				return true
			}
		}
		return false
	})
	if d := h.dialer.dialed(); len(d) != 0 {
		t.Errorf("dialed %q", d)
	}
}

// TestOpenTunnelErrors: a denied destination is never dialed and is a
// DenyError; a granted name that does not resolve matches ErrUnresolved; a
// refused dial keeps its errno.
func TestOpenTunnelErrors(t *testing.T) {
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := closed.Addr().(*net.TCPAddr).Port
	closed.Close()
	h := startProxy(t, harnessConfig{hosts: []string{fmt.Sprintf("down.test:%d", port), fmt.Sprintf("127.0.0.1:%d", port), "nowhere.test"}, resolve: map[string]string{"down.test": "127.0.0.1"}})
	if _, err := h.p.OpenTunnel(context.Background(), "evil.test", 443); !isDeny(err) {
		t.Errorf("evil.test: %v, want a denial", err)
	}
	if _, err := h.p.OpenTunnel(context.Background(), "nowhere.test", 443); !errors.Is(err, egress.ErrUnresolved) {
		t.Errorf("nowhere.test: %v, want ErrUnresolved", err)
	}
	if _, err := h.p.OpenTunnel(context.Background(), "down.test", uint16(port)); err == nil || isDeny(err) || !strings.Contains(err.Error(), "refused") {
		t.Errorf("down.test: %v, want the refused dial", err)
	}
	if got := h.res.lookups(); strings.Contains(strings.Join(got, ","), "evil.test") {
		t.Errorf("a denied name was resolved: %q", got)
	}
}

func isDeny(err error) bool {
	var de *policy.DenyError
	return errors.As(err, &de)
}

// dnsQuery sends one query for name and type to the DNS server at addr
// and parses the answer.
func dnsQuery(t *testing.T, addr net.Addr, name string, typ dnsmessage.Type) (dnsmessage.Header, []netip.Addr) {
	t.Helper()
	c, err := net.Dial("udp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 77, RecursionDesired: true})
	b.StartQuestions()
	b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: typ, Class: dnsmessage.ClassINET})
	q, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	c.Write(q)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 1500)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("query %s: %v", name, err)
	}
	var m dnsmessage.Message
	if err := m.Unpack(buf[:n]); err != nil {
		t.Fatalf("answer to %s: %v", name, err)
	}
	var addrs []netip.Addr
	for _, a := range m.Answers {
		if r, ok := a.Body.(*dnsmessage.AResource); ok {
			addrs = append(addrs, netip.AddrFrom4(r.A))
		}
	}
	if m.Header.ID != 77 || !m.Header.Response {
		t.Errorf("answer header %+v, want the query's ID and the response bit", m.Header)
	}
	return m.Header, addrs
}

// serveDNS runs ServeDNS on a loopback UDP socket.
func serveDNS(t *testing.T, h *harness, names *egress.Names) net.PacketConn {
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- h.p.ServeDNS(pc, names) }()
	t.Cleanup(func() {
		h.p.Close()
		if err := <-done; err != nil {
			t.Errorf("ServeDNS: %v", err)
		}
	})
	return pc
}

// TestDNS: granted names (exact and wildcard, any port) resolve to one
// synthetic address each, stable for the run and mapped back by Names;
// other types get an empty answer; names not granted get NXDOMAIN and a
// denial; nothing is ever resolved on the host.
func TestDNS(t *testing.T) {
	h := startProxy(t, harnessConfig{hosts: []string{"api.test:8443", "*.cdn.test", "10.0.0.1:80"}})
	names := egress.NewNames(0)
	pc := serveDNS(t, h, names)

	hd, a1 := dnsQuery(t, pc.LocalAddr(), "API.test.", dnsmessage.TypeA)
	if hd.RCode != dnsmessage.RCodeSuccess || len(a1) != 1 || !egress.SyntheticPrefix.Contains(a1[0]) {
		t.Fatalf("A api.test = %v %v, want one address in %v", hd.RCode, a1, egress.SyntheticPrefix)
	}
	if n, ok := names.Lookup(a1[0]); !ok || n != "api.test" {
		t.Errorf("Lookup(%v) = %q %v, want api.test", a1[0], n, ok)
	}
	_, again := dnsQuery(t, pc.LocalAddr(), "api.test.", dnsmessage.TypeA)
	_, other := dnsQuery(t, pc.LocalAddr(), "x.cdn.test.", dnsmessage.TypeA)
	if len(again) != 1 || again[0] != a1[0] || len(other) != 1 || other[0] == a1[0] {
		t.Errorf("api.test again = %v, x.cdn.test = %v; want %v and another address", again, other, a1[0])
	}
	if hd, aaaa := dnsQuery(t, pc.LocalAddr(), "api.test.", dnsmessage.TypeAAAA); hd.RCode != dnsmessage.RCodeSuccess || len(aaaa) != 0 {
		t.Errorf("AAAA api.test = %v %v, want an empty success", hd.RCode, aaaa)
	}
	for _, name := range []string{"evil.test.", "cdn.test.", "api.test.evil.test.", "10.0.0.1.", "localhost."} {
		if hd, a := dnsQuery(t, pc.LocalAddr(), name, dnsmessage.TypeA); hd.RCode != dnsmessage.RCodeNameError || len(a) != 0 {
			t.Errorf("A %s = %v %v, want NXDOMAIN", name, hd.RCode, a)
		}
	}
	if len(h.denialFor("evil.test")) != 1 {
		t.Errorf("no single denial for evil.test: %+v", h.rec.Denials())
	}
	if l := h.res.lookups(); len(l) != 0 {
		t.Errorf("the host resolved %q, want nothing", l)
	}
	// Garbage gets no answer and does not stop the server.
	c, _ := net.Dial("udp", pc.LocalAddr().String())
	c.Write([]byte{1, 2, 3})
	c.Close()
	if hd, _ := dnsQuery(t, pc.LocalAddr(), "api.test.", dnsmessage.TypeA); hd.RCode != dnsmessage.RCodeSuccess {
		t.Errorf("after garbage: %v", hd.RCode)
	}
}

// TestDNSCostsOps: every query spends an op, so a flood of queries ends at
// max_ops, refused.
func TestDNSCostsOps(t *testing.T) {
	h := startProxy(t, harnessConfig{hosts: []string{"api.test"}, limits: budget.Limits{Ops: 3}})
	pc := serveDNS(t, h, egress.NewNames(0))
	for i := range 3 {
		if hd, _ := dnsQuery(t, pc.LocalAddr(), "api.test.", dnsmessage.TypeA); hd.RCode != dnsmessage.RCodeSuccess {
			t.Fatalf("query %d = %v", i, hd.RCode)
		}
	}
	if hd, a := dnsQuery(t, pc.LocalAddr(), "api.test.", dnsmessage.TypeA); hd.RCode != dnsmessage.RCodeRefused || len(a) != 0 {
		t.Errorf("query past max_ops = %v %v, want REFUSED", hd.RCode, a)
	}
}

// TestNamesBound: Names holds at most its bound; the next name is refused.
func TestNamesBound(t *testing.T) {
	h := startProxy(t, harnessConfig{hosts: []string{"*.many.test"}})
	pc := serveDNS(t, h, egress.NewNames(2))
	for i, want := range []dnsmessage.RCode{dnsmessage.RCodeSuccess, dnsmessage.RCodeSuccess, dnsmessage.RCodeServerFailure} {
		if hd, _ := dnsQuery(t, pc.LocalAddr(), fmt.Sprintf("n%d.many.test.", i), dnsmessage.TypeA); hd.RCode != want {
			t.Errorf("name %d = %v, want %v", i, hd.RCode, want)
		}
	}
}

// TestOpenTunnelAddressGuard: the transparent path asks the same question
// as every front end: a granted name that resolves to a private, loopback
// or metadata address is refused before any dial (SSRF), and an address
// literal is reachable only when listed exactly.
func TestOpenTunnelAddressGuard(t *testing.T) {
	h := startProxy(t, harnessConfig{hosts: []string{"meta.test", "private.test", "*.wild.test"},
		resolve: map[string]string{"meta.test": "169.254.169.254", "private.test": "10.0.0.7", "x.wild.test": "127.0.0.1"}})
	for _, tc := range []struct {
		host string
		port uint16
	}{{"meta.test", 80}, {"private.test", 443}, {"x.wild.test", 443}, {"169.254.169.254", 80}, {"10.0.0.7", 443}, {"127.0.0.1", 443}} {
		if _, err := h.p.OpenTunnel(context.Background(), tc.host, tc.port); !isDeny(err) {
			t.Errorf("OpenTunnel(%s:%d) = %v, want a denial", tc.host, tc.port, err)
		}
	}
	if d := h.dialer.dialed(); len(d) != 0 {
		t.Errorf("dialed %q, want nothing", d)
	}
}
