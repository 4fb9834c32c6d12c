package egress_test

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/policy/hostspec"
)

// headsRig is a proxy on loopback granting one server (allowed.test and
// its address, on its port) and resolving evil.test to the same machine,
// where another server listens that nothing grants.
type headsRig struct {
	h     *harness
	ok    *target
	evil  *target
	mu    sync.Mutex
	hosts []string // guarded by mu: Host headers the granted server received
}

func newHeadsRig(f *testing.F) *headsRig {
	r := &headsRig{evil: newTarget(f, "evil")}
	r.ok = &target{}
	r.ok.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.hosts = append(r.hosts, req.Host)
		r.mu.Unlock()
		io.WriteString(w, "ok")
	}))
	r.ok.ln = &countingListener{Listener: r.ok.srv.Listener}
	r.ok.srv.Listener = r.ok.ln
	r.ok.srv.Start()
	r.ok.port = uint16(r.ok.ln.Addr().(*net.TCPAddr).Port)
	f.Cleanup(r.ok.srv.Close)
	r.h = startProxy(f, harnessConfig{
		hosts:   []string{r.ok.hostPort("allowed.test"), r.ok.hostPort("127.0.0.1")},
		resolve: map[string]string{"allowed.test": "127.0.0.1", "evil.test": "127.0.0.1"},
		limits:  benchLimits, timeout: time.Second, idle: time.Second,
	})
	return r
}

// exchange sends in to addr, closes its side, and returns what comes back
// before the proxy closes, failing t if the proxy holds the connection.
func (r *headsRig) exchange(t *testing.T, addr string, in []byte) []byte {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	c.Write(in)
	c.(*net.TCPConn).CloseWrite()
	out, err := io.ReadAll(io.LimitReader(c, 1<<20))
	if isTimeout(err) {
		t.Fatalf("the proxy held the connection 20 s after the client sent %q and closed its side", in)
	}
	return out
}

// check fails t if anything but the granted address (in any form) was
// dialed or the
// other server was reached; withHost also if the granted server was sent
// a request for another host. What it looks at holds over every input
// so far.
func (r *headsRig) check(t *testing.T, in []byte, withHost bool) {
	if n := r.evil.accepted(); n != 0 {
		t.Fatalf("after %q the server nothing grants accepted %d connections", in, n)
	}
	for _, a := range r.h.dialer.dialed() {
		ap, err := netip.ParseAddrPort(a)
		if err != nil || netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()).String() != r.ok.hostPort("127.0.0.1") {
			t.Fatalf("after %q the proxy dialed %s, want only %s", in, a, r.ok.hostPort("127.0.0.1"))
		}
	}
	if !withHost {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, host := range r.hosts {
		if host != r.ok.hostPort("allowed.test") && host != r.ok.hostPort("127.0.0.1") {
			t.Fatalf("after %q the granted server was sent a request for %q", in, host)
		}
	}
}

// FuzzHTTPHead: whatever a client sends the HTTP proxy (request heads,
// pipelined requests, CONNECT and what its tunnel carries), the proxy
// dials only the granted address, never reaches the server nothing
// grants, sends the granted server requests for the granted host only,
// and lets go of the connection once the client is done. {A} and {E} in
// the input stand for the granted and the other authority.
func FuzzHTTPHead(f *testing.F) {
	for _, s := range []string{
		"GET http://{A}/ HTTP/1.1\r\nHost: {A}\r\n\r\n",
		"GET http://{E}/ HTTP/1.1\r\nHost: {E}\r\n\r\n",
		"GET http://{A}/ HTTP/1.1\r\nHost: {E}\r\n\r\n",
		"GET http://{A}/ HTTP/1.1\r\nHost: {A}\r\n\r\nGET http://{E}/ HTTP/1.1\r\nHost: {E}\r\n\r\n",
		"POST http://{A}/ HTTP/1.1\r\nHost: {A}\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET http://{E}/ HTTP/1.1\r\n\r\n",
		"CONNECT {A} HTTP/1.1\r\nHost: {A}\r\n\r\nGET / HTTP/1.1\r\nHost: {E}\r\n\r\n",
		"CONNECT {A} HTTP/1.1\r\nHost: {A}\r\n\r\nM-SEARCH / HTTP/1.1\r\nHost: {E}\r\n\r\n",
		"CONNECT {A} HTTP/1.1\r\n\r\nSSH-2.0-x y\r\nGET / HTTP/1.1\r\nHost: {E}\r\n\r\n",
		"CONNECT {E} HTTP/1.1\r\n\r\n",
		"GET http://user@{A}/ HTTP/1.1\r\n\r\n",
		"GET http://{A}@{E}/ HTTP/1.1\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: {A}\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	r := newHeadsRig(f)
	sub := strings.NewReplacer("{A}", r.ok.hostPort("allowed.test"), "{E}", r.evil.hostPort("evil.test"))
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) > 8<<10 {
			return
		}
		in = []byte(sub.Replace(string(in)))
		r.exchange(t, r.h.httpAddr, in)
		r.check(t, in, true)
	})
}

// FuzzSOCKSHead: whatever a client sends the SOCKS5 proxy, it dials only
// the granted address and never reaches the server nothing grants. SOCKS5
// carries bytes, so what reaches the granted address is not looked at.
// The bytes AA AA and EE EE in the input stand for the granted and the
// other server's port.
func FuzzSOCKSHead(f *testing.F) {
	domain := func(name string, port byte) []byte {
		b := append([]byte{5, 1, 0, 5, 1, 0, 3, byte(len(name))}, name...)
		return append(b, port, port)
	}
	f.Add(domain("allowed.test", 0xAA))
	f.Add(domain("evil.test", 0xEE))
	f.Add(domain("allowed.test", 0xEE))
	f.Add(append(domain("allowed.test", 0xAA), "GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n"...))
	f.Add([]byte{5, 1, 0, 5, 1, 0, 1, 127, 0, 0, 1, 0xAA, 0xAA})
	f.Add([]byte{5, 1, 0, 5, 1, 0, 1, 127, 0, 0, 1, 0xEE, 0xEE})
	f.Add([]byte{5, 1, 0, 5, 1, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1, 0xAA, 0xAA})
	f.Add([]byte{5, 2, 0, 2, 5, 2, 0, 3, 9, 'l', 'o', 'c', 'a', 'l', 'h', 'o', 's', 't', 0xAA, 0xAA})
	r := newHeadsRig(f)
	var okPort, evilPort [2]byte
	binary.BigEndian.PutUint16(okPort[:], r.ok.port)
	binary.BigEndian.PutUint16(evilPort[:], r.evil.port)
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) > 4<<10 {
			return
		}
		in = bytes.ReplaceAll(bytes.ReplaceAll(in, []byte{0xAA, 0xAA}, okPort[:]), []byte{0xEE, 0xEE}, evilPort[:])
		r.exchange(t, r.h.socksAddr, in)
		r.check(t, in, false)
	})
}

// FuzzDNS: whatever packet the sandbox sends airlock's DNS, any answer is
// a response to it (its ID, the response bit, at most 512 bytes), carries
// at most one record, an A record in SyntheticPrefix that Names maps to a
// name net_hosts grants, for that name; a name not granted never gets an
// address; nothing is ever asked of the host's resolver; and the server
// goes on answering.
func FuzzDNS(f *testing.F) {
	query := func(id uint16, name string, typ dnsmessage.Type) []byte {
		b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: id, RecursionDesired: true})
		b.StartQuestions()
		b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: typ, Class: dnsmessage.ClassINET})
		q, _ := b.Finish()
		return q
	}
	f.Add(query(1, "api.test.", dnsmessage.TypeA))
	f.Add(query(2, "API.TEST.", dnsmessage.TypeAAAA))
	f.Add(query(3, "x.cdn.test.", dnsmessage.TypeA))
	f.Add(query(4, "evil.test.", dnsmessage.TypeA))
	f.Add(query(5, "cdn.test.", dnsmessage.TypeA))
	f.Add(query(6, "10.0.0.1.", dnsmessage.TypeA))
	f.Add(query(7, "api.test.evil.", dnsmessage.TypeA))
	f.Add([]byte{0, 1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{1, 2, 3})
	h := startProxy(f, harnessConfig{hosts: []string{"api.test:443", "*.cdn.test", "10.0.0.1:80"}, limits: benchLimits})
	names := egress.NewNames(64)
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	go h.p.ServeDNS(pc, names) // ends when the harness closes the proxy
	granted := func(name string) bool {
		return name == "api.test" || strings.HasSuffix(name, ".cdn.test")
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) > 2000 {
			return
		}
		// The fuzzed packet, then a probe with another ID: the server
		// reads one packet at a time, so what comes back before the
		// probe's answer is the packet's.
		c, err := net.Dial("udp4", pc.LocalAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		probe := query(0xA1A1, "api.test.", dnsmessage.TypeA)
		if len(in) >= 2 {
			binary.BigEndian.PutUint16(probe, binary.BigEndian.Uint16(in)^0x5A5A)
		}
		c.Write(in)
		c.Write(probe)
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		var answers [][]byte
		for {
			buf := make([]byte, 2048)
			n, err := c.Read(buf)
			if err != nil {
				t.Fatalf("after %x the DNS server answered no probe: %v", in, err)
			}
			if n >= 2 && bytes.Equal(buf[:2], probe[:2]) {
				break
			}
			answers = append(answers, buf[:n])
		}
		if len(answers) > 1 {
			t.Fatalf("%x got %d answers, want at most one", in, len(answers))
		}
		for _, a := range answers {
			checkDNSAnswer(t, in, a, names, granted)
		}
		if l := h.res.lookups(); len(l) != 0 {
			t.Fatalf("after %x the host's resolver was asked %q", in, l)
		}
	})
}

func checkDNSAnswer(t *testing.T, in, a []byte, names *egress.Names, granted func(string) bool) {
	var m dnsmessage.Message
	if err := m.Unpack(a); err != nil {
		t.Fatalf("the answer to %x does not parse: %v (%x)", in, err, a)
	}
	switch {
	case len(a) > 512:
		t.Fatalf("the answer to %x is %d bytes, more than 512", in, len(a))
	case !m.Header.Response || len(in) >= 2 && m.Header.ID != binary.BigEndian.Uint16(in):
		t.Fatalf("the answer to %x has header %+v, want the query's ID and the response bit", in, m.Header)
	case len(m.Answers) > 1 || len(m.Authorities) > 0 || len(m.Additionals) > 0:
		t.Fatalf("the answer to %x has %d answers, %d authorities, %d additionals", in, len(m.Answers), len(m.Authorities), len(m.Additionals))
	}
	for _, rr := range m.Answers {
		ar, ok := rr.Body.(*dnsmessage.AResource)
		if !ok {
			t.Fatalf("the answer to %x holds a %v record", in, rr.Header.Type)
		}
		addr := netip.AddrFrom4(ar.A)
		name, mapped := names.Lookup(addr)
		owner, err := hostspec.NormalizeHost(strings.TrimSuffix(rr.Header.Name.String(), "."))
		if !egress.SyntheticPrefix.Contains(addr) || !mapped || !granted(name) || err != nil || owner != name {
			t.Fatalf("the answer to %x gives %s %v, which Names maps to %q (%v); want a granted name's synthetic address", in, rr.Header.Name, addr, name, mapped)
		}
	}
	if len(m.Answers) == 0 || len(m.Questions) != 1 {
		return
	}
	q, err := hostspec.NormalizeHost(strings.TrimSuffix(m.Questions[0].Name.String(), "."))
	if err != nil || !granted(q) {
		t.Fatalf("the answer to %x gives an address for %q, which nothing grants", in, m.Questions[0].Name)
	}
}
