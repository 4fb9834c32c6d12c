package sandbox_test

import (
	"context"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// TestAttackToolAllowList tries every way to execute something that is not
// an allowed tool. Only python3 (the command) is allowed.
func TestAttackToolAllowList(t *testing.T) {
	requireSandbox(t)
	tr := newTree(t)
	spec := policy.Spec{FSWrite: []string{tr.out}}
	rep := py(t, spec, fmt.Sprintf(`
import ctypes, os, shutil, subprocess, sys
out = %q
bad = []
def attempt(name, argv):
    try:
        r = subprocess.run(argv, capture_output=True, timeout=10)
        if r.returncode == 0:
            bad.append(name)
    except OSError:
        pass
# 1. a tool that is not listed is not even there
attempt("ls", ["/usr/bin/ls", "/"])
attempt("sh", ["/bin/sh", "-c", "true"])
# 2. the dynamic loader running a binary directly
for ld in ["/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1"]:
    attempt("ld.so " + ld, [ld, "/usr/bin/ls"])
    attempt("ld.so python copy", [ld, out + "/py"])
# 3. a copy of an allowed binary written into fs_write and /tmp
for d in [out, "/tmp"]:
    try:
        shutil.copy("/usr/bin/python3", d + "/py"); os.chmod(d + "/py", 0o755)
        attempt("copy in " + d, [d + "/py", "-c", "pass"])
    except OSError:
        pass
# 4. memfd_create + execveat
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.memfd_create(b"x", 0)
if fd >= 0:
    bad.append("memfd_create succeeded")
if libc.syscall(322, -1, b"", None, None, 0x1000) == 0:
    bad.append("execveat succeeded")
# 5. a script whose shebang names a tool that is not allowed
for d in [out, "/tmp"]:
    try:
        open(d + "/s.sh", "w").write("#!/bin/sh\necho pwned\n"); os.chmod(d + "/s.sh", 0o755)
        attempt("shebang in " + d, [d + "/s.sh"])
    except OSError:
        pass
print(bad); sys.exit(1 if bad else 0)`, tr.out))
	wantExit(t, rep, 0)
}

// TestAllowedToolRuns: a listed tool can be executed by the command.
func TestAllowedToolRuns(t *testing.T) {
	requireSandbox(t)
	rep := py(t, policy.Spec{AllowedTools: []string{"sh", "echo"}}, `
import subprocess
print(subprocess.run(["/bin/sh", "-c", "echo from-sh"], capture_output=True, text=True).stdout)`)
	wantExit(t, rep, 0)
	if !strings.Contains(rep.Stdout, "from-sh") {
		t.Fatalf("stdout = %q", rep.Stdout)
	}
}

// TestEgressThroughSandbox drives the real proxy from inside airlock run:
// the granted host answers, a host that is not granted receives nothing.
func TestEgressThroughSandbox(t *testing.T) {
	requireSandbox(t)
	var allowedHits, deniedHits atomic.Int32
	allowed := serve(t, &allowedHits, "hello from allowed")
	denied := serve(t, &deniedHits, "you should not see this")
	spec := policy.Spec{NetHosts: []string{allowed, "127.0.0.1:" + portOf(allowed)}}
	rep := py(t, spec, fmt.Sprintf(`
import urllib.request, sys
print(urllib.request.urlopen("http://%s/", timeout=10).read().decode())
try:
    urllib.request.urlopen("http://%s/", timeout=10).read()
    print("DENIED HOST REACHED")
except Exception as e:
    print("denied:", e)
try:
    import socket
    socket.create_connection(("127.0.0.1", %s), timeout=3)
    print("RAW CONNECT WORKED")
except OSError as e:
    print("raw connect refused")`, allowed, denied, portOf(denied)))
	wantExit(t, rep, 0)
	if !strings.Contains(rep.Stdout, "hello from allowed") || strings.Contains(rep.Stdout, "REACHED") || strings.Contains(rep.Stdout, "WORKED") {
		t.Fatalf("stdout:\n%s\nstderr:\n%s", rep.Stdout, rep.Stderr)
	}
	if deniedHits.Load() != 0 {
		t.Fatalf("the denied server received %d connections", deniedHits.Load())
	}
	if allowedHits.Load() == 0 {
		t.Fatal("the allowed server received nothing")
	}
	found := false
	for _, d := range rep.Denials {
		if d.Layer == "net" && d.Rule == "net_hosts" && strings.Contains(d.Target, portOf(denied)) {
			found = true
		}
	}
	if !found {
		t.Fatalf("no net denial in the report: %+v", rep.Denials)
	}
	if rep.Usage.Ops == 0 {
		t.Error("egress requests did not charge max_ops")
	}
}

// serve starts an HTTP server on the host's 127.0.0.1 that counts accepted
// connections, and returns how the sandbox names it through the proxy:
// host.airlock.internal:PORT (127.0.0.1 inside is the sandbox's own
// loopback, reached directly).
func serve(t *testing.T, hits *atomic.Int32, body string) string {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(body))
	}), ConnState: func(c net.Conn, s http.ConnState) {
		if s == http.StateNew {
			hits.Add(1)
		}
	}}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Close() })
	return "host.airlock.internal:" + portOf(l.Addr().String())
}

func portOf(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

// TestLocalServerInsideSandbox: the sandbox's own loopback works (a test
// suite or a dev server talking to itself), while the host's stays out of
// reach (TestAttackNetwork).
func TestLocalServerInsideSandbox(t *testing.T) {
	requireSandbox(t)
	rep := py(t, policy.Spec{}, `
import socket, threading
srv = socket.socket(); srv.bind(("127.0.0.1", 8000)); srv.listen(1)
def serve():
    c, _ = srv.accept(); c.sendall(b"pong"); c.close()
threading.Thread(target=serve).start()
c = socket.create_connection(("127.0.0.1", 8000), timeout=5)
print(c.recv(4).decode())`)
	wantExit(t, rep, 0)
	if !strings.Contains(rep.Stdout, "pong") {
		t.Fatalf("stdout = %q, stderr = %q", rep.Stdout, rep.Stderr)
	}
}

// TestEgressCurlAndSOCKSThroughSandbox: curl inside airlock run reaches a
// granted host through the HTTP proxy and through SOCKS5 (the proxy
// variables airlock sets), and a host that is not granted gets nothing,
// through either or directly (--noproxy: the transparent path).
func TestEgressCurlAndSOCKSThroughSandbox(t *testing.T) {
	requireSandbox(t)
	airtest.RequireBinary(t, "/usr/bin/curl")
	var allowedHits, deniedHits atomic.Int32
	allowed := serve(t, &allowedHits, "hello via curl")
	denied := serve(t, &deniedHits, "nope")
	spec := policy.Spec{NetHosts: []string{allowed}, AllowedTools: []string{"curl"}}
	script := fmt.Sprintf(`set -u
curl -sS --max-time 10 http://%[1]s/ && echo
curl -sS --max-time 10 --proxy "$ALL_PROXY" http://%[1]s/ && echo " (socks)"
if curl -sS --max-time 10 -o /dev/null -w '%%{http_code}\n' http://%[2]s/; then :; fi
if curl -sS --max-time 10 --proxy "$ALL_PROXY" http://%[2]s/; then echo "SOCKS DENIED HOST REACHED"; fi
if curl -sS --max-time 5 --noproxy '*' http://%[2]s/; then echo "DIRECT DENIED HOST REACHED"; fi
exit 0`, allowed, denied)
	rep := run(t, spec, "/bin/sh", "-c", script)
	wantExit(t, rep, 0)
	for _, want := range []string{"hello via curl\n", "hello via curl (socks)", "403"} {
		if !strings.Contains(rep.Stdout, want) {
			t.Fatalf("stdout lacks %q:\n%s\nstderr:\n%s", want, rep.Stdout, rep.Stderr)
		}
	}
	if strings.Contains(rep.Stdout, "REACHED") {
		t.Fatalf("stdout:\n%s", rep.Stdout)
	}
	if deniedHits.Load() != 0 {
		t.Fatalf("the denied server received %d connections", deniedHits.Load())
	}
}

// fakeResolver maps every name to one address.
type fakeResolver struct{ addr netip.Addr }

func (f fakeResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	return []netip.Addr{f.addr}, nil
}

// TestEgressTLSThroughSandbox: HTTPS from inside airlock run goes through
// CONNECT with the SNI check; the granted name works end to end with TLS,
// a name that is not granted is refused before any connection.
func TestEgressTLSThroughSandbox(t *testing.T) {
	requireSandbox(t)
	var hits atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("hello over tls")) }))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			hits.Add(1)
		}
	}
	srv.StartTLS()
	defer srv.Close()
	port := portOf(srv.Listener.Addr().String())
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	// httptest's certificate is for example.com; the fake resolver points it here.
	p, err := policy.New(policy.Spec{FSRead: []string{dir}, NetHosts: []string{"example.com:" + port, "127.0.0.1:" + port},
		Env: []string{"SSL_CERT_FILE=" + ca}, Budget: spec20s(), AllowDowngrade: airtest.RootlessDowngrades()})
	if err != nil {
		t.Fatal(err)
	}
	code := fmt.Sprintf(`
import urllib.request
print(urllib.request.urlopen("https://example.com:%[1]s/", timeout=10).read().decode())
try:
    urllib.request.urlopen("https://example.org:%[1]s/", timeout=10).read()
    print("DENIED NAME REACHED")
except Exception as e:
    print("denied:", e)`, port)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rep, err := (&sandbox.Cmd{Config: sandbox.Config{Policy: p, Resolver: fakeResolver{netip.MustParseAddr("127.0.0.1")}},
		Args: []string{"/usr/bin/python3", "-c", code}, CommandIsGranted: true}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantExit(t, rep, 0)
	if !strings.Contains(rep.Stdout, "hello over tls") || strings.Contains(rep.Stdout, "REACHED") {
		t.Fatalf("stdout:\n%s\nstderr:\n%s", rep.Stdout, rep.Stderr)
	}
	if hits.Load() != 1 {
		t.Fatalf("the TLS server saw %d connections, want exactly 1 (the granted request)", hits.Load())
	}
}

// TestLocalServerWithNetHosts: with net_hosts set (so the proxy variables
// are too), an HTTP client inside reaches a dev server on the sandbox's own
// 127.0.0.1 directly (NO_PROXY), never the host's service on the same
// port; the host's loopback is reached only by its explicit name,
// host.airlock.internal, when that is granted. Before, NO_PROXY was empty
// and the proxy answered the sandbox's own 127.0.0.1 with 403.
func TestLocalServerWithNetHosts(t *testing.T) {
	requireSandbox(t)
	var hostHits atomic.Int32
	hostSvc := serve(t, &hostHits, "the host's service")
	port := portOf(hostSvc)
	rep := py(t, policy.Spec{NetHosts: []string{hostSvc}, Env: []string{"NO_PROXY=internal.example"}}, fmt.Sprintf(`
import http.server, os, threading, urllib.request
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"the sandbox's own dev server")
    def log_message(self, *a): pass
srv = http.server.HTTPServer(("127.0.0.1", %[1]s), H)
threading.Thread(target=srv.serve_forever, daemon=True).start()
print("no_proxy", os.environ["NO_PROXY"])
print("own", urllib.request.urlopen("http://127.0.0.1:%[1]s/", timeout=10).read().decode())
print("localhost", urllib.request.urlopen("http://localhost:%[1]s/", timeout=10).read().decode())
print("host", urllib.request.urlopen("http://host.airlock.internal:%[1]s/", timeout=10).read().decode())`, port))
	wantExit(t, rep, 0)
	for _, want := range []string{"no_proxy localhost,127.0.0.1,::1,internal.example", "own the sandbox's own dev server", "localhost the sandbox's own dev server", "host the host's service"} {
		if !strings.Contains(rep.Stdout, want) {
			t.Fatalf("stdout lacks %q:\n%s\nstderr:\n%s", want, rep.Stdout, rep.Stderr)
		}
	}
	if hostHits.Load() != 1 {
		t.Fatalf("the host's service got %d connections, want 1 (by its explicit name only)", hostHits.Load())
	}
}
