package egress_test

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// testCert returns a self-signed certificate for names, its PEM, and a
// pool that trusts it.
func testCert(t testing.TB, names ...string) (tls.Certificate, []byte, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: names[0]},
		DNSNames:              names,
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf},
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pool
}

// newTLSTarget starts an HTTPS server on 127.0.0.1 whose certificate names
// allowed.test.
func newTLSTarget(t testing.TB) (*target, []byte, *x509.CertPool) {
	t.Helper()
	cert, pemBytes, pool := testCert(t, "allowed.test")
	tg := &target{}
	tg.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tg.requests.Add(1)
		fmt.Fprintf(w, "hello over tls host=%s", r.Host)
	}))
	tg.ln = &countingListener{Listener: tg.srv.Listener}
	tg.srv.Listener = tg.ln
	tg.srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	tg.srv.Config.ErrorLog = log.New(io.Discard, "", 0) // handshakes the tests cut short
	tg.srv.StartTLS()
	tg.port = uint16(tg.ln.Addr().(*net.TCPAddr).Port)
	t.Cleanup(tg.srv.Close)
	return tg, pemBytes, pool
}

func tlsHarness(t *testing.T) (*harness, *target, *x509.CertPool) {
	return tlsHarnessVia(t, viaConnect)
}

// tlsHarnessVia is tlsHarness whose open goes via.
func tlsHarnessVia(t *testing.T, via string) (*harness, *target, *x509.CertPool) {
	t.Helper()
	tg, _, pool := newTLSTarget(t)
	h := startProxy(t, harnessConfig{
		hosts:   []string{tg.hostPort("allowed.test"), tg.hostPort("127.0.0.1")},
		resolve: map[string]string{"allowed.test": "127.0.0.1", "evil.test": "127.0.0.1"},
		via:     via,
	})
	return h, tg, pool
}

// eachVia runs fn once for each way a tunnel opens.
func eachVia(t *testing.T, fn func(t *testing.T, via string)) {
	for _, via := range vias {
		t.Run(via, func(t *testing.T) { fn(t, via) })
	}
}

func TestConnectTLS(t *testing.T) {
	h, tg, pool := tlsHarness(t)
	resp, err := h.client(pool).Get("https://" + tg.hostPort("allowed.test") + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body) // compared below
	if want := "hello over tls host=" + tg.hostPort("allowed.test"); resp.StatusCode != 200 || string(b) != want {
		t.Errorf("GET via CONNECT = %d %q, want 200 %q", resp.StatusCode, b, want)
	}
	if got, want := h.dialer.dialed(), []string{tg.hostPort("127.0.0.1")}; len(got) != 1 || got[0] != want[0] {
		t.Errorf("dialed %q, want %q", got, want)
	}
}

// openTunnel sends CONNECT authority and returns the connection and the
// response status.
func openTunnel(t testing.TB, proxyAddr, authority string) (net.Conn, int) {
	t.Helper()
	c, err := net.Dial("tcp", proxyAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", authority, authority)
	// The 200 has no body; read it byte-wise-safe through a one-shot reader
	// so no tunnel bytes are swallowed.
	resp, err := http.ReadResponse(bufio.NewReaderSize(&oneByte{c}, 16), &http.Request{Method: "CONNECT"})
	if err != nil {
		t.Fatalf("CONNECT %s: %v", authority, err)
	}
	return c, resp.StatusCode
}

// oneByte reads a byte at a time so a bufio.Reader over it never reads
// past the response head.
type oneByte struct{ r io.Reader }

func (o *oneByte) Read(p []byte) (int, error) { return o.r.Read(p[:1]) }

func TestConnectDenied(t *testing.T) {
	eachVia(t, func(t *testing.T, via string) {
		h, tg, pool := tlsHarnessVia(t, via)
		okHP := tg.hostPort("allowed.test")
		tests := []struct {
			name       string
			authority  string
			wantStatus int
			send       func(c net.Conn) error // runs after a 200
			wantReason string
		}{
			{"not-granted", tg.hostPort("evil.test"), 403, nil, "not in net_hosts"},
			{"ip-literal-unlisted", tg.hostPort("::1"), 403, nil, "listed exactly"},
			{"port-not-granted", "allowed.test:1", 403, nil, "not in net_hosts"},
			{"hex-ipv4", tg.hostPort("0x7f.1"), 403, nil, "0x7f.1"},
			{"sni-mismatch", okHP, 200, func(c net.Conn) error {
				return tls.Client(c, &tls.Config{ServerName: "evil.test", RootCAs: pool}).Handshake()
			}, `"evil.test" does not match`},
			{"no-sni", okHP, 200, func(c net.Conn) error {
				return tls.Client(c, &tls.Config{InsecureSkipVerify: true}).Handshake()
			}, `"" does not match`},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				c, status := h.open(t, tt.authority)
				if status != tt.wantStatus {
					t.Fatalf("CONNECT %s = %d, want %d", tt.authority, status, tt.wantStatus)
				}
				if tt.send != nil {
					if err := tt.send(c); err == nil {
						t.Errorf("tunnel carried the handshake, want it closed")
					}
				}
				if n := h.touched(tg); n != 0 {
					t.Fatalf("server was reached %d times, want 0", n)
				}
				var found bool
				for _, e := range h.rec.Denials() {
					found = found || (e.Layer == "net" && e.Op == "connect" && e.Rule == "net_hosts" && strings.Contains(e.Message, tt.wantReason))
				}
				if !found {
					t.Errorf("no denial containing %q in audit: %+v", tt.wantReason, h.rec.Denials())
				}
			})
		}
		if d := h.dialer.dialed(); via == viaConnect && len(d) != 0 {
			t.Errorf("dialed %q, want nothing", d)
		}
	})
}

func TestConnectSNIVariants(t *testing.T) {
	eachVia(t, func(t *testing.T, via string) {
		h, tg, pool := tlsHarnessVia(t, via)
		for _, sni := range []string{"allowed.test", "ALLOWED.TEST", "allowed.test."} {
			t.Run(sni, func(t *testing.T) {
				c, status := h.open(t, tg.hostPort("allowed.test"))
				if status != 200 {
					t.Fatalf("CONNECT = %d, want 200", status)
				}
				tc := tls.Client(c, &tls.Config{ServerName: sni, RootCAs: pool})
				if err := tc.Handshake(); err != nil {
					t.Errorf("handshake with SNI %q: %v", sni, err)
				}
			})
		}
	})
}

// TestCloseEndsTunnels opens a working tunnel, closes the proxy and waits
// for the tunnel to end.
func TestCloseEndsTunnels(t *testing.T) {
	eachVia(t, func(t *testing.T, via string) {
		h, tg, pool := tlsHarnessVia(t, via)
		c, status := h.open(t, tg.hostPort("allowed.test"))
		if status != 200 {
			t.Fatalf("CONNECT = %d, want 200", status)
		}
		tc := tls.Client(c, &tls.Config{ServerName: "allowed.test", RootCAs: pool})
		if err := tc.Handshake(); err != nil {
			t.Fatal(err)
		}
		if err := h.p.Close(); err != nil {
			t.Fatalf("Close() = %v", err)
		}
		// Returns only once the proxy has closed the tunnel (session tickets
		// the server sent may still be read first).
		io.Copy(io.Discard, c)
	})
}

// TestConnectPlainHTTP: a CONNECT tunnel that carries plain HTTP (npm's
// http:// registries) reaches the granted host, one checked request at a
// time; a Host header naming another host (domain fronting), an absolute
// URL, a CONNECT inside, or a request with no Host is refused and the
// evil server gets nothing.
func TestConnectPlainHTTP(t *testing.T) {
	eachVia(t, func(t *testing.T, via string) {
		h, ok, evil := twoServersVia(t, via)
		okHP := ok.hostPort("allowed.test")
		c, status := h.open(t, okHP)
		if status != 200 {
			t.Fatalf("CONNECT %s = %d", okHP, status)
		}
		br := bufio.NewReader(c)
		for i := range 2 { // keep-alive: two requests on one tunnel
			fmt.Fprintf(c, "GET /x%d HTTP/1.1\r\nHost: %s\r\n\r\n", i, okHP)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("request %d through the tunnel: %v", i, err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || !strings.HasPrefix(string(b), "hello from allowed host="+okHP) {
				t.Fatalf("request %d = %d %q", i, resp.StatusCode, b)
			}
		}
		for name, req := range map[string]string{
			"fronting-host": "GET / HTTP/1.1\r\nHost: " + evil.hostPort("evil.test") + "\r\n\r\n",
			"fronting-port": "GET / HTTP/1.1\r\nHost: allowed.test:1\r\n\r\n",
			"absolute-url":  "GET http://" + evil.hostPort("evil.test") + "/ HTTP/1.1\r\nHost: " + evil.hostPort("evil.test") + "\r\n\r\n",
			"connect":       "CONNECT " + evil.hostPort("evil.test") + " HTTP/1.1\r\nHost: " + evil.hostPort("evil.test") + "\r\n\r\n",
			"no-host":       "GET / HTTP/1.0\r\n\r\n",
			"blank-line":    "\r\nGET / HTTP/1.1\r\nHost: " + evil.hostPort("evil.test") + "\r\n\r\n",
			"lowercase":     "get / HTTP/1.1\r\nHost: " + evil.hostPort("evil.test") + "\r\n\r\n",
			"tab":           "GET\t/ HTTP/1.1\r\nHost: " + evil.hostPort("evil.test") + "\r\n\r\n",
			// Methods are tokens, not only letters: nginx and others take
			// these, and route them by Host like any request.
			"hyphen-method":     "M-SEARCH / HTTP/1.1\r\nHost: " + evil.hostPort("evil.test") + "\r\n\r\n",
			"underscore-method": "VERSION_CONTROL / HTTP/1.1\r\nHost: " + evil.hostPort("evil.test") + "\r\n\r\n",
			"digit-method":      "GET2 / HTTP/1.1\r\nHost: " + evil.hostPort("evil.test") + "\r\n\r\n",
		} {
			t.Run(name, func(t *testing.T) {
				c, status := h.open(t, okHP)
				if status != 200 {
					t.Fatalf("CONNECT = %d", status)
				}
				io.WriteString(c, req)
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil || resp.StatusCode < 400 {
					t.Fatalf("%q through the tunnel = %v %v, want a refusal", req, resp, err)
				}
			})
		}
		if n := evil.accepted(); n != 0 {
			t.Fatalf("the evil server accepted %d connections", n)
		}
	})
}

// TestConnectOtherProtocols: a tunnel that opens with neither TLS nor an
// HTTP request line (an SSH banner, Debian's with a comment after a
// space) carries its bytes to the checked address, as SOCKS5 does; one to
// a host that is not granted never opens.
func TestConnectOtherProtocols(t *testing.T) {
	eachVia(t, func(t *testing.T, via string) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		got := make(chan string, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			b := make([]byte, 64)
			n, _ := c.Read(b)
			got <- string(b[:n])
			io.WriteString(c, "SSH-2.0-server\r\n")
		}()
		port := ln.Addr().(*net.TCPAddr).Port
		h := startProxy(t, harnessConfig{hosts: []string{fmt.Sprintf("git.test:%d", port), fmt.Sprintf("127.0.0.1:%d", port)}, resolve: map[string]string{"git.test": "127.0.0.1"}, via: via})
		c, status := h.open(t, fmt.Sprintf("git.test:%d", port))
		if status != 200 {
			t.Fatalf("CONNECT = %d", status)
		}
		const banner = "SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3\r\n"
		io.WriteString(c, banner)
		select {
		case b := <-got:
			if b != banner {
				t.Fatalf("the server got %q", b)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the SSH banner did not reach the granted host")
		}
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil || line != "SSH-2.0-server\r\n" {
			t.Fatalf("the server's banner came back as %q, %v", line, err)
		}
	})
}

// TestConnectSplitRequestLine: a client that sends "G", waits past the
// deadline, then "ET / HTTP/1.1" with another Host would get a raw tunnel
// to the granted address if too little to tell were taken for "not HTTP":
// it is refused, and the server behind the granted address gets nothing.
func TestConnectSplitRequestLine(t *testing.T) {
	eachVia(t, func(t *testing.T, via string) {
		ok, evil := newTarget(t, "allowed"), newTarget(t, "evil")
		h := startProxy(t, harnessConfig{hosts: []string{ok.hostPort("allowed.test"), ok.hostPort("127.0.0.1")},
			resolve: map[string]string{"allowed.test": "127.0.0.1"}, timeout: 300 * time.Millisecond, via: via})
		for name, first := range map[string]string{"one-letter": "G", "nothing": ""} {
			t.Run(name, func(t *testing.T) {
				c, status := h.open(t, ok.hostPort("allowed.test"))
				if status != 200 {
					t.Fatalf("CONNECT = %d", status)
				}
				io.WriteString(c, first)
				time.Sleep(600 * time.Millisecond)
				full := "GET / HTTP/1.1\r\nHost: " + evil.hostPort("evil.test") + "\r\n\r\n"
				io.WriteString(c, full[len(first):])
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				if b, _ := io.ReadAll(c); strings.Contains(string(b), "hello from") {
					t.Fatalf("the split request reached a server: %q", b)
				}
			})
		}
		if n := h.touched(ok) + h.touched(evil); n != 0 {
			t.Fatalf("servers were reached %d times", n)
		}
	})
}
