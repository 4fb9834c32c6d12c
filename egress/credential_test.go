package egress_test

import (
	"bufio"
	"compress/gzip"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/airlock-sandbox/airlock/egress"
)

const secret = "s3cret-value-the-sandbox-must-never-see"

// echoServer answers with the Authorization header it received, in a
// header and in the body (gzipped when the client asks), as a debug
// endpoint that echoes requests would: what the proxy must scrub.
type echoServer struct {
	srv  *httptest.Server
	mu   sync.Mutex
	seen []string // guarded by mu: Authorization values received
}

func newEchoServer(t *testing.T, tlsCert *tls.Certificate) *echoServer {
	e := &echoServer{}
	e.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := r.Header.Get("Authorization")
		e.mu.Lock()
		e.seen = append(e.seen, a)
		e.mu.Unlock()
		w.Header().Set("X-Echo", "got "+a)
		var out io.Writer = w
		if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			w.Header().Set("Content-Encoding", "gzip")
			gz := gzip.NewWriter(w)
			defer gz.Close()
			out = gz
		}
		// Split across writes, so the secret straddles reads.
		half := len(a) / 2
		fmt.Fprintf(out, "authorization=%s", a[:half])
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		fmt.Fprintf(out, "%s;", a[half:])
	}))
	if tlsCert != nil {
		e.srv.TLS = &tls.Config{Certificates: []tls.Certificate{*tlsCert}}
		e.srv.StartTLS()
	} else {
		e.srv.Start()
	}
	t.Cleanup(e.srv.Close)
	return e
}

func (e *echoServer) port() int { return e.srv.Listener.Addr().(*net.TCPAddr).Port }

func (e *echoServer) received() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.seen...)
}

// noSecret fails t if s carries the secret in any part.
func noSecret(t *testing.T, what, s string) {
	t.Helper()
	if strings.Contains(s, secret) || strings.Contains(s, secret[:12]) {
		t.Errorf("%s carries the secret: %q", what, s)
	}
}

// TestCredentialHTTP: the proxy sets the credential on plain HTTP requests
// to its host, replacing the client's value; the upstream's echo of it,
// in a header and in a gzipped body split across writes, reaches the
// client redacted; another granted host gets no credential.
func TestCredentialHTTP(t *testing.T) {
	api, other := newEchoServer(t, nil), newEchoServer(t, nil)
	h := startProxy(t, harnessConfig{
		hosts:   []string{fmt.Sprintf("api.test:%d", api.port()), fmt.Sprintf("127.0.0.1:%d", api.port()), fmt.Sprintf("other.test:%d", other.port()), fmt.Sprintf("127.0.0.1:%d", other.port())},
		resolve: map[string]string{"api.test": "127.0.0.1", "other.test": "127.0.0.1"},
		creds:   []egress.Credential{{Host: "api.test", Header: "Authorization", Value: "Bearer " + secret}},
	})
	for _, gz := range []bool{false, true} {
		c, err := net.Dial("tcp", h.httpAddr)
		if err != nil {
			t.Fatal(err)
		}
		enc := ""
		if gz {
			enc = "Accept-Encoding: gzip\r\n"
		}
		fmt.Fprintf(c, "GET http://api.test:%d/ HTTP/1.1\r\nHost: api.test:%d\r\nAuthorization: Bearer the-client-guess\r\n%s\r\n", api.port(), api.port(), enc)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		c.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), egress.Redacted) {
			t.Errorf("gzip %v: %d %q, want 200 and the value redacted", gz, resp.StatusCode, b)
		}
		noSecret(t, "the body", string(b))
		noSecret(t, "X-Echo", resp.Header.Get("X-Echo"))
		if resp.Header.Get("Content-Encoding") != "" {
			t.Errorf("gzip %v: the client got Content-Encoding %q, want the proxy to have decoded it", gz, resp.Header.Get("Content-Encoding"))
		}
	}
	for _, got := range api.received() {
		if got != "Bearer "+secret {
			t.Errorf("the credential's host received Authorization %q, want the credential", got)
		}
	}
	// Another granted host: the client's own header, never the credential.
	resp, err := h.client(nil).Get(fmt.Sprintf("http://other.test:%d/", other.port()))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := other.received(); len(got) != 1 || got[0] != "" {
		t.Errorf("the other host received Authorization %q, want none", got)
	}
}

// TestCredentialHTTPS: HTTPS to a host with a credential is terminated by
// the proxy with the per-run CA, whose certificate the client trusts; the
// upstream, verified against its own roots, sees the credential; the
// client sees it nowhere. Through CONNECT and the transparent path alike.
// HTTPS to another host is carried end to end: the client sees that
// server's own certificate.
func TestCredentialHTTPS(t *testing.T) {
	eachVia(t, func(t *testing.T, via string) {
		cert, _, upstreamRoots := testCert(t, "api.test", "other.test")
		api, other := newEchoServer(t, &cert), newEchoServer(t, &cert)
		ca, err := egress.NewCA([]string{"api.test"})
		if err != nil {
			t.Fatal(err)
		}
		h := startProxy(t, harnessConfig{
			hosts:   []string{fmt.Sprintf("api.test:%d", api.port()), fmt.Sprintf("127.0.0.1:%d", api.port()), fmt.Sprintf("other.test:%d", other.port()), fmt.Sprintf("127.0.0.1:%d", other.port())},
			resolve: map[string]string{"api.test": "127.0.0.1", "other.test": "127.0.0.1"},
			creds:   []egress.Credential{{Host: "api.test", Header: "Authorization", Value: "Bearer " + secret}},
			ca:      ca, roots: upstreamRoots, via: via,
		})
		caPool := x509.NewCertPool()
		blk, _ := pem.Decode(ca.CertPEM())
		caCert, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		caPool.AddCert(caCert)
		if len(caCert.PermittedDNSDomains) != 1 || caCert.PermittedDNSDomains[0] != "api.test" || !caCert.PermittedDNSDomainsCritical {
			t.Errorf("the CA is not constrained to api.test: %v", caCert.PermittedDNSDomains)
		}

		get := func(host string, port int, roots *x509.CertPool) (*tls.ConnectionState, string, http.Header) {
			c, status := h.open(t, fmt.Sprintf("%s:%d", host, port))
			if status != 200 {
				t.Fatalf("open %s = %d", host, status)
			}
			tc := tls.Client(c, &tls.Config{ServerName: host, RootCAs: roots})
			if err := tc.Handshake(); err != nil {
				t.Fatalf("TLS to %s: %v", host, err)
			}
			fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: %s:%d\r\nAuthorization: Bearer the-client-guess\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n", host, port)
			resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
			if err != nil {
				t.Fatalf("response from %s: %v", host, err)
			}
			defer resp.Body.Close()
			var r io.Reader = resp.Body
			if resp.Header.Get("Content-Encoding") == "gzip" {
				if r, err = gzip.NewReader(resp.Body); err != nil {
					t.Fatal(err)
				}
			}
			b, _ := io.ReadAll(r)
			st := tc.ConnectionState()
			return &st, string(b), resp.Header
		}
		st, body, hdr := get("api.test", api.port(), caPool)
		if iss := st.PeerCertificates[0].Issuer.CommonName; !strings.Contains(iss, "airlock") {
			t.Errorf("api.test's certificate was issued by %q, want airlock's CA", iss)
		}
		noSecret(t, "the body", body)
		noSecret(t, "X-Echo", hdr.Get("X-Echo"))
		if !strings.Contains(body, egress.Redacted) {
			t.Errorf("body %q: want the echoed credential redacted", body)
		}
		if got := api.received(); len(got) != 1 || got[0] != "Bearer "+secret {
			t.Errorf("api.test received Authorization %q, want the credential once", got)
		}
		st, body, _ = get("other.test", other.port(), upstreamRoots)
		if st.PeerCertificates[0].Subject.CommonName != "api.test" || strings.Contains(st.PeerCertificates[0].Issuer.CommonName, "airlock") {
			t.Errorf("other.test's TLS was not end to end: issuer %q", st.PeerCertificates[0].Issuer.CommonName)
		}
		if got := other.received(); len(got) != 1 || got[0] != "Bearer the-client-guess" {
			t.Errorf("other.test received Authorization %q, want the client's own", got)
		}
		_ = body
	})
}

// TestCredentialNotInCleartext: over plain HTTP the proxy adds a
// credential only when every address of the host is on this machine or a
// private network (a listed address); to a public address it would cross
// the network in the clear, where anyone on the path reads it, so it is
// not added, and the audit says why. Over TLS it is added wherever.
func TestCredentialNotInCleartext(t *testing.T) {
	api := newEchoServer(t, nil)
	h := startProxy(t, harnessConfig{
		hosts:   []string{fmt.Sprintf("api.test:%d", api.port())},
		resolve: map[string]string{"api.test": "1.1.1.1"}, // public; the test dialer never dials it (fail below)
		creds:   []egress.Credential{{Host: "api.test", Header: "Authorization", Value: "Bearer " + secret}},
	})
	// The "public" address is served by the local echo server.
	h.dialer.fail = func(addr string) (net.Conn, error) { return net.Dial("tcp", api.srv.Listener.Addr().String()) }
	resp, err := h.client(nil).Get(fmt.Sprintf("http://api.test:%d/", api.port()))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := api.received(); len(got) != 1 || got[0] != "" {
		t.Fatalf("a public address received Authorization %q over plain HTTP, want none", got)
	}
	found := false
	for _, e := range h.rec.Events() {
		found = found || e.Rule == "credentials" && strings.Contains(e.Message, "plain HTTP")
	}
	if !found {
		t.Errorf("no audit event says why the credential was not added: %+v", h.rec.Events())
	}
}
