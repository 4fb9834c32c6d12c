package egress

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/hostspec"
)

// Credential is a header the proxy sets on every HTTP request to Host,
// replacing what the client sent, with a value the sandbox never sees
// (policy.Credential, its value read on the host).
type Credential struct {
	Host   string // normalized host name
	Header string // canonical header name
	Value  string
}

// Redacted replaces a credential's value wherever it appears in what the
// upstream sends back (status line, headers and body; see scrubResponse),
// so a server that echoes the request (TRACE, a debug endpoint) cannot
// hand the secret to the sandbox.
const Redacted = "[airlock: credential removed]"

// CA is a certificate authority made for one run: the proxy terminates TLS
// for the hosts that have credentials with leaf certificates it signs, and
// the sandbox trusts it (its PEM is added to the bundle airlock points
// SSL_CERT_FILE and the like at). Its key never leaves the supervisor, and
// its name constraints limit it to those hosts, so even inside the sandbox
// it vouches for nothing else.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte

	mu     sync.Mutex
	leaves map[string]*tls.Certificate // guarded by mu
}

// NewCA makes a CA valid for a day whose certificates may name only hosts
// (and names below them).
func NewCA(hosts []string) (*CA, error) {
	if len(hosts) == 0 {
		return nil, errors.New("egress: a CA for no host would vouch for nothing")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("egress: CA key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:                serial,
		Subject:                     pkix.Name{CommonName: "airlock per-run CA for credentials", Organization: []string{"airlock"}},
		NotBefore:                   now.Add(-time.Hour),
		NotAfter:                    now.Add(24 * time.Hour),
		IsCA:                        true,
		BasicConstraintsValid:       true,
		MaxPathLenZero:              true,
		KeyUsage:                    x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		PermittedDNSDomainsCritical: true,
		PermittedDNSDomains:         hosts,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("egress: CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), leaves: map[string]*tls.Certificate{}}, nil
}

// CertPEM returns the CA's certificate in PEM, for the sandbox's trust
// bundle.
func (ca *CA) CertPEM() []byte { return bytes.Clone(ca.pem) }

// leaf returns the certificate the proxy presents for host, made once.
func (ca *CA) leaf(host string) (*tls.Certificate, error) {
	ca.mu.Lock()
	defer ca.mu.Unlock()
	if c, ok := ca.leaves[host]; ok {
		return c, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: host},
		DNSNames:     []string{host},
		NotBefore:    ca.cert.NotBefore,
		NotAfter:     ca.cert.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, err
	}
	c := &tls.Certificate{Certificate: [][]byte{der, ca.cert.Raw}, PrivateKey: key}
	ca.leaves[host] = c
	return c, nil
}

// credentialsFor returns the credentials for host (normalized).
func (p *Proxy) credentialsFor(host string) []Credential { return p.creds[host] }

// terminate serves a TLS tunnel to d, whose host has credentials: it
// completes the client's handshake (hello is the ClientHello already read,
// br what follows) with the CA's certificate for d's host, then reads the
// client's requests in the clear and forwards each, checked as any request
// to d's authority is, over TLS to d's address, verified for d's host,
// with the credentials set and their values removed from the responses.
func (p *Proxy) terminate(c net.Conn, br io.Reader, hello []byte, d *decision) {
	leaf, err := p.ca.leaf(d.host)
	if err != nil {
		p.log.Error("egress: leaf certificate", "host", d.host, "err", err)
		return
	}
	tc := tls.Server(&prefixConn{Conn: c, r: io.MultiReader(bytes.NewReader(hello), br)}, &tls.Config{
		Certificates: []tls.Certificate{*leaf},
		NextProtos:   []string{"http/1.1"}, // requests are read as HTTP/1.1
		MinVersion:   tls.VersionTLS12,
	})
	c.SetDeadline(time.Now().Add(p.handshake))
	if err := tc.Handshake(); err != nil {
		p.emit(audit.Event{Kind: audit.Info, Op: opConnect, Target: d.target,
			Message: "TLS to " + d.host + " is terminated by airlock to add its credential, and the client's handshake failed: " + err.Error() +
				" (the client must trust airlock's per-run CA: SSL_CERT_FILE, REQUESTS_CA_BUNDLE, NODE_EXTRA_CA_CERTS, PIP_CERT, GIT_SSL_CAINFO and CURL_CA_BUNDLE name it inside)"})
		return
	}
	c.SetDeadline(time.Time{})
	p.serveRequests(tc, &headReader{r: tc}, nil, time.Now().Add(p.handshake), d.target, nil, true)
}

// prefixConn reads r (bytes already read from the connection, then the
// rest of it) and writes to the connection.
type prefixConn struct {
	net.Conn
	r io.Reader
}

func (c *prefixConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// addCredentials sets the credentials for the request's host on h,
// replacing whatever the client sent under those names, and makes the
// proxy the one that negotiates the response's representation, so the
// response can be searched whole for the values: the upstream request
// asks for gzip (which the proxy decodes) and no range of it (a slice
// could cut a value where the search cannot see it). It audits each one
// added, never its value.
//
// Over plain HTTP (secure false) it adds them only when every address of
// the host is on this machine or a private network (listed exactly in
// net_hosts, as the decision checked): to a public address the secret
// would cross the network in the clear for anyone on the path to read,
// and the sandbox chose the scheme.
func (p *Proxy) addCredentials(h http.Header, d *decision, secure bool) []Credential {
	cs := p.credentialsFor(d.host)
	if len(cs) == 0 {
		return nil
	}
	public := slices.ContainsFunc(d.addrs, func(ap netip.AddrPort) bool { return !hostspec.IsSpecial(ap.Addr()) })
	if !secure && public {
		p.emit(audit.Event{Kind: audit.Info, Op: opHTTP, Target: d.target, Rule: "credentials",
			Message: "the credential for " + d.host + " was not added: the request is plain HTTP to a public address, where it would cross the network in the clear; use https://"})
		return nil
	}
	h.Del("Accept-Encoding")
	if h.Get("Range") != "" {
		p.emit(audit.Event{Kind: audit.Info, Op: opHTTP, Target: d.target, Rule: "credentials",
			Message: "removed the request's Range header: the response to a request with a credential is read whole, to remove the credential wherever it is echoed"})
	}
	h.Del("Range")
	h.Del("If-Range")
	for _, c := range cs {
		h[c.Header] = []string{c.Value}
		p.emit(audit.Event{Kind: audit.Info, Op: opHTTP, Target: d.target, Rule: "credentials",
			Message: "added the credential header " + c.Header + " (its value is the supervisor's; the sandbox never sees it)"})
	}
	return cs
}

// checkCredentials checks Config.Credentials against the policy: each for
// a host and header the policy lists, with a value.
func checkCredentials(pol *policy.Policy, cs []Credential) error {
	for _, c := range cs {
		ok := false
		for _, pc := range pol.CredentialFor(c.Host) {
			ok = ok || pc.Header == c.Header
		}
		switch {
		case !ok:
			return fmt.Errorf("egress: config: credential %s for %s is not in the policy's credentials", c.Header, c.Host)
		case c.Value == "":
			return fmt.Errorf("egress: config: credential %s for %s has no value", c.Header, c.Host)
		}
	}
	return nil
}
