package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// upstreamScript is the server the clients section measures against:
// Python's http.server (ThreadingHTTPServer), speaking argv[1]'s protocol
// version (HTTP/1.1 keeps connections alive, HTTP/1.0 closes each), over
// TLS when argv[2] and argv[3] name a certificate and key. Like every
// BaseHTTPRequestHandler it writes the head and the body in two writes
// with Nagle's algorithm on. It prints the port it listens on.
const upstreamScript = `
import http.server, ssl, sys
proto, certfile, keyfile = sys.argv[1], sys.argv[2], sys.argv[3]
body = b"x" * 64
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = proto
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
if certfile:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(certfile, keyfile)
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
print(srv.server_address[1], flush=True)
srv.serve_forever()
`

// The clients: each makes argv's n requests to url with w workers at once
// (w = 1: one after another) and prints one line per request: "s SECONDS"
// or "err WHAT".
const (
	// curlScript runs a new curl per request (each its own connection to
	// the proxy or server, as a shell loop of curl calls does); the rest
	// of argv are curl's options.
	curlScript = `url=$1 n=$2 w=$3; shift 3
per=$((n / w)); i=0
while [ $i -lt $w ]; do
  (j=0; while [ $j -lt $per ]; do curl -sS -o /dev/null -w 's %{time_total}\n' "$@" "$url" || echo "err curl exit $?"; j=$((j+1)); done) &
  i=$((i+1))
done
wait`
	// urllibScript opens every request with urllib (a new connection
	// each, Connection: close); argv[4] is the proxy ("env": the
	// environment's, "none", or a URL) and argv[5] a CA file ("" for the
	// default roots).
	urllibScript = `
import concurrent.futures, ssl, sys, time, urllib.request
url, n, w, proxy, cafile = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
hs = []
if proxy == "none":
    hs.append(urllib.request.ProxyHandler({}))
elif proxy != "env":
    hs.append(urllib.request.ProxyHandler({"http": proxy, "https": proxy}))
if url.startswith("https:"):
    hs.append(urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=cafile or None)))
op = urllib.request.build_opener(*hs)
def one(_):
    t = time.perf_counter()
    try:
        op.open(url, timeout=20).read()
        return "s %.9f" % (time.perf_counter() - t)
    except Exception as e:
        return "err %s" % str(e).replace("\n", " ")
with concurrent.futures.ThreadPoolExecutor(w) as ex:
    for line in ex.map(one, range(n)):
        print(line)
`
	// nodeScript fetches with Node's fetch (undici: connections kept
	// alive and reused), w loops at once, after one fetch that is not
	// timed (the first loads undici). Node 20's fetch ignores the proxy
	// variables, so inside airlock it goes by transparent egress.
	nodeScript = `
const [url, n, w] = [process.argv[1], +process.argv[2], +process.argv[3]];
const out = [];
async function loop(k) {
  for (let i = 0; i < k; i++) {
    const t = performance.now();
    try { const r = await fetch(url); await r.arrayBuffer(); out.push("s " + (performance.now() - t) / 1000); }
    catch (e) { out.push("err " + String(e.cause || e).replace(/\n/g, " ")); }
  }
}
fetch(url).then(r => r.arrayBuffer()).catch(() => {})
  .then(() => Promise.all(Array.from({length: w}, () => loop(Math.floor(n / w)))))
  .then(() => console.log(out.join("\n")));
`
)

// startUpstream runs upstreamScript and returns its port; stop ends it.
func startUpstream(ctx context.Context, proto, certFile, keyFile string) (port int, stop func(), err error) {
	cmd := exec.CommandContext(ctx, "/usr/bin/python3", "-c", upstreamScript, proto, certFile, keyFile)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, nil, err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return 0, nil, err
	}
	stop = func() { cmd.Process.Kill(); cmd.Wait() }
	line, err := bufio.NewReader(out).ReadString('\n')
	if err == nil {
		port, err = strconv.Atoi(strings.TrimSpace(line))
	}
	if err != nil {
		stop()
		return 0, nil, fmt.Errorf("python3 http.server (%s): %v %s", proto, err, stderr.String())
	}
	return port, stop, nil
}

// relay is the floor under the proxy: it carries bytes between a client
// and one upstream and decides nothing, dialing the upstream once per
// client connection (so it keeps exactly the connections the client
// keeps). As a proxy it reads the first request head and answers a
// CONNECT with 200 itself; as a transparent relay it splices from the
// start, as if it were the server.
type relay struct {
	ln net.Listener
	wg sync.WaitGroup
}

func startRelay(upstream string, proxy bool) (*relay, error) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &relay{ln: ln}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				defer c.Close()
				r.carry(c, upstream, proxy)
			}()
		}
	}()
	return r, nil
}

func (r *relay) addr() string { return r.ln.Addr().String() }

func (r *relay) close() { r.ln.Close(); r.wg.Wait() }

func (r *relay) carry(c net.Conn, upstream string, proxy bool) {
	br := bufio.NewReader(c)
	var first []byte
	if proxy {
		for !bytes.HasSuffix(first, []byte("\r\n\r\n")) {
			line, err := br.ReadSlice('\n')
			if err != nil || len(first) > 64<<10 {
				return
			}
			first = append(first, line...)
		}
		if bytes.HasPrefix(first, []byte("CONNECT ")) {
			first = nil
			if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
				return
			}
		}
	}
	u, err := net.Dial("tcp4", upstream)
	if err != nil {
		return
	}
	defer u.Close()
	if _, err := u.Write(first); err != nil {
		return
	}
	done := make(chan struct{})
	go func() {
		io.Copy(u, br)
		u.(*net.TCPConn).CloseWrite()
		close(done)
	}()
	io.Copy(c, u)
	c.(*net.TCPConn).CloseWrite()
	<-done
}

// writeCert writes a self-signed certificate for the name the sandbox
// reaches the host by, localhost and 127.0.0.1 to dir: cert.pem and
// key.pem.
func writeCert(dir string) (certFile, keyFile string, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: hostName},
		DNSNames:              []string{hostName, "localhost"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return "", "", err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", "", err
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

// parseClientOutput reads a client's "s SECONDS" lines as milliseconds and
// counts the rest as failures, keeping the first.
func parseClientOutput(out string) (ms []float64, failures int, first string) {
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if v, ok := strings.CutPrefix(line, "s "); ok {
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				ms = append(ms, f*1e3)
				continue
			}
		}
		failures++
		if first == "" {
			first = line
		}
	}
	return ms, failures, first
}
