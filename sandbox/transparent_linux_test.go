package sandbox_test

import (
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// TestTransparentEgress: programs that know nothing of proxies reach a
// granted name:port by name, through airlock's DNS and connect broker: a
// raw Python socket, curl told to use no proxy, Node's fetch (which
// ignores HTTP_PROXY) and a Go net/http client with a transport of its
// own. Each is denied for a name that is not granted (NXDOMAIN, no packet
// leaves), for the granted name on another port (EACCES), for a synthetic
// address DNS never handed out (ENETUNREACH); the host's loopback by
// address is the sandbox's own. The server that is not granted receives
// nothing.
func TestTransparentEgress(t *testing.T) {
	requireSandbox(t)
	var okHits, evilHits atomic.Int32
	ok := serve(t, &okHits, "hello from granted")
	evil := serve(t, &evilHits, "you should not see this")
	spec := policy.Spec{NetHosts: []string{ok}, AllowedTools: []string{"curl", "node"}}
	rep := py(t, spec, fmt.Sprintf(`
import errno, os, shutil, socket, subprocess
ok, okport, evilport = %[1]q, %[2]s, %[3]s
for k in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
    os.environ.pop(k, None)   # nothing below may use the proxy
s = socket.create_connection(("host.airlock.internal", okport), timeout=10)
s.sendall(b"GET / HTTP/1.1\r\nHost: " + ok.encode() + b"\r\nConnection: close\r\n\r\n")
print("raw:", b"".join(iter(lambda: s.recv(4096), b"")).decode().split("\r\n\r\n", 1)[1])
def refused(what, addr):
    try:
        socket.create_connection(addr, timeout=5)
        print(what, "CONNECTED")
    except socket.gaierror as e:
        print(what, "gaierror")
    except OSError as e:
        print(what, errno.errorcode.get(e.errno, e.errno))
refused("evil-name", ("evil.example", 80))
refused("other-port", ("host.airlock.internal", evilport))
refused("host-loopback", ("127.0.0.1", evilport))
refused("unknown-synthetic", ("198.18.200.1", 443))
if shutil.which("curl"):
    r = subprocess.run(["curl", "-sS", "--noproxy", "*", "http://" + ok + "/"], capture_output=True, text=True)
    print("curl:", r.stdout, r.stderr.strip())
if shutil.which("node"):
    js = "fetch(process.argv[1]).then(r=>r.text()).then(t=>console.log('node:', t)).catch(e=>console.log('node error', e.cause||e));" \
         "fetch('http://evil.example/').then(()=>console.log('node-evil CONNECTED')).catch(e=>console.log('node-evil', (e.cause||e).code))"
    r = subprocess.run(["node", "-e", js, "http://" + ok + "/"], capture_output=True, text=True, env={k: v for k, v in os.environ.items() if k != "NODE_USE_ENV_PROXY"})
    print(r.stdout, r.stderr.strip())
`, ok, portOf(ok), portOf(evil)))
	wantExit(t, rep, 0)
	want := []string{"raw: hello from granted", "evil-name gaierror", "other-port EACCES", "host-loopback ECONNREFUSED", "unknown-synthetic ENETUNREACH"}
	if _, err := exec.LookPath("curl"); err == nil {
		want = append(want, "curl: hello from granted")
	}
	if _, err := exec.LookPath("node"); err == nil {
		want = append(want, "node: hello from granted", "node-evil ENOTFOUND")
	}
	for _, w := range want {
		if !strings.Contains(rep.Stdout, w) {
			t.Errorf("stdout lacks %q:\n%s\nstderr:\n%s", w, rep.Stdout, rep.Stderr)
		}
	}
	if evilHits.Load() != 0 {
		t.Errorf("the server that is not granted received %d connections", evilHits.Load())
	}
	if rep.Enforcement.Egress != sandbox.EgressTransparent {
		t.Errorf("enforcement.egress = %q, want %q", rep.Enforcement.Egress, sandbox.EgressTransparent)
	}
	wantDenial(t, rep, "resolve", "evil.example")
	wantDenial(t, rep, "connect", "host.airlock.internal:"+portOf(evil))
}

// wantDenial fails t unless the report has a net denial of op whose
// target contains target.
func wantDenial(t *testing.T, rep *sandbox.Report, op, target string) {
	t.Helper()
	for _, d := range rep.Denials {
		if d.Layer == "net" && d.Op == op && strings.Contains(d.Target, target) {
			return
		}
	}
	t.Errorf("no net %s denial for %s in the report: %+v", op, target, rep.Denials)
}

// TestTransparentGoClient: a static Go program whose http.Client has a
// transport of its own (Proxy nil, so HTTP_PROXY means nothing to it)
// reaches the granted name through the pure-Go resolver and a connect.
func TestTransparentGoClient(t *testing.T) {
	requireSandbox(t)
	goBin, err := exec.LookPath("go")
	if err != nil {
		airtest.SkipOrFail(t, "no go toolchain to build the client: %v", err)
	}
	dir := t.TempDir()
	src := `package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
)

func main() {
	c := &http.Client{Transport: &http.Transport{Proxy: nil}}
	for _, u := range os.Args[1:] {
		resp, err := c.Get(u)
		if err != nil {
			fmt.Println("error:", err)
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		fmt.Println("got:", string(b))
	}
}
`
	for name, data := range map[string]string{"main.go": src, "go.mod": "module gohttp\n\ngo 1.22\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	build := exec.Command(goBin, "build", "-o", "gohttp", ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var okHits, evilHits atomic.Int32
	ok := serve(t, &okHits, "hello from granted")
	evil := serve(t, &evilHits, "you should not see this")
	rep := run(t, policy.Spec{NetHosts: []string{ok}}, filepath.Join(dir, "gohttp"), "http://"+ok+"/", "http://evil.example/", "http://host.airlock.internal:"+portOf(evil)+"/")
	wantExit(t, rep, 0)
	if !strings.Contains(rep.Stdout, "got: hello from granted") || strings.Count(rep.Stdout, "error:") != 2 {
		t.Fatalf("stdout:\n%s\nstderr:\n%s", rep.Stdout, rep.Stderr)
	}
	if evilHits.Load() != 0 {
		t.Errorf("the server that is not granted received %d connections", evilHits.Load())
	}
}

// TestTransparentAttacks: what the proxy refuses through CONNECT it
// refuses on the transparent path too, with the granted server receiving
// no request: TLS whose SNI names another host, plain HTTP whose Host
// header names another host (domain fronting), and a connect whose
// sockaddr a second thread flips between a loopback address (which the
// broker lets the kernel connect) and other destinations, hoping the
// kernel reads the flipped one: in a network namespace with only lo there
// is nothing else to reach.
func TestTransparentAttacks(t *testing.T) {
	requireSandbox(t)
	var tlsReqs atomic.Int32
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tlsReqs.Add(1)
		w.Write([]byte("tls hello"))
	}))
	ts.TLS = &tls.Config{}
	ts.Config.ErrorLog = log.New(io.Discard, "", 0) // the flips cut handshakes short
	ts.StartTLS()
	t.Cleanup(ts.Close)
	tlsPort := portOf(ts.Listener.Addr().String())
	var plainHits, victimHits atomic.Int32
	plain := serve(t, &plainHits, "plain hello")
	victim := serve(t, &victimHits, "victim")
	spec := policy.Spec{NetHosts: []string{"host.airlock.internal:" + tlsPort, plain}}
	rep := py(t, spec, fmt.Sprintf(`
import ctypes, socket, ssl, struct, threading
tlsport, plain, victimport = %[1]s, %[2]q, %[3]s
ctx = ssl._create_unverified_context()
def tls(sni):
    try:
        s = ctx.wrap_socket(socket.create_connection(("host.airlock.internal", tlsport), timeout=10), server_hostname=sni)
        s.sendall(b"GET / HTTP/1.1\r\nHost: host.airlock.internal\r\nConnection: close\r\n\r\n")
        return s.recv(4096).decode(errors="replace").split("\r\n")[0]
    except (OSError, ssl.SSLError) as e:
        return "refused"
print("tls-good:", tls("host.airlock.internal"))
print("tls-evil:", tls("evil.example"))
s = socket.create_connection(("host.airlock.internal", int(plain.split(":")[1])), timeout=10)
s.sendall(b"GET / HTTP/1.1\r\nHost: host.airlock.internal:%[3]s\r\n\r\n")
print("fronting:", s.recv(4096).decode(errors="replace").split("\r\n")[0])

libc = ctypes.CDLL(None, use_errno=True)
def sa(ip, port):  # struct sockaddr_in: family (native), port (network), address, zeros
    return struct.pack("=H", socket.AF_INET) + struct.pack("!H", port) + socket.inet_aton(ip) + bytes(8)
buf = ctypes.create_string_buffer(sa("127.0.0.1", victimport), 16)
targets = [sa("127.0.0.1", victimport), sa("192.0.2.1", victimport), sa("198.18.0.1", tlsport), sa("127.0.0.1", 3127)]
stop = False
def flip():
    i = 0
    while not stop:
        ctypes.memmove(buf, targets[i %% len(targets)], 16); i += 1
threading.Thread(target=flip, daemon=True).start()
ok = 0
errs = {}
for _ in range(300):
    fd = socket.socket(); fd.settimeout(2)
    rc = libc.connect(fd.fileno(), buf, 16)
    e = ctypes.get_errno() if rc else 0
    errs[e] = errs.get(e, 0) + 1
    if rc == 0:
        try:
            fd.sendall(b"GET / HTTP/1.0\r\n\r\n")
            if b"victim" in fd.recv(100): ok += 1
        except OSError: pass
    fd.close()
stop = True
print("flip reached the victim", ok, "times; connect results by errno:", errs)
`, tlsPort, plain, portOf(victim)))
	wantExit(t, rep, 0)
	for _, w := range []string{"tls-good: HTTP/1.1 200 OK", "tls-evil: refused", "fronting: HTTP/1.1 403", "flip reached the victim 0 times"} {
		if !strings.Contains(rep.Stdout, w) {
			t.Errorf("stdout lacks %q:\n%s\nstderr:\n%s", w, rep.Stdout, rep.Stderr)
		}
	}
	if n := tlsReqs.Load(); n != 1 {
		t.Errorf("the TLS server answered %d requests, want 1 (the good SNI's)", n)
	}
	if n := victimHits.Load(); n != 0 {
		t.Errorf("the host's victim server received %d connections", n)
	}
	t.Logf("inside:\n%s", rep.Stdout)
}

// connectBenchScript makes argv[2] connects of the kind argv[1] from one
// thread and prints the nanoseconds they took, measured inside the
// sandbox so that the sandbox's start and exit do not count:
//   - tcp: a TCP connect to a listener on the sandbox's 127.0.0.1, then
//     accept and close both ends (a test suite talking to a local server);
//   - udp: connect of one UDP socket to 127.0.0.1, again and again (the
//     smallest connect there is, which shows the broker's share best);
//   - unix: a stream connect to an abstract unix socket, accept, close;
//   - tunnel: a TCP connect to argv[3]:argv[4], a granted host outside,
//     resolved once (transparent egress: the broker's tunnel path).
const connectBenchScript = `
import socket, sys, time
kind, n = sys.argv[1], int(sys.argv[2])
if kind == "tcp":
    l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(128); dst = l.getsockname()
    def one():
        c = socket.socket(); c.connect(dst); l.accept()[0].close(); c.close()
elif kind == "udp":
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    def one():
        u.connect(("127.0.0.1", 9))
elif kind == "unix":
    l = socket.socket(socket.AF_UNIX); l.bind("\0airlock-bench"); l.listen(128)
    def one():
        c = socket.socket(socket.AF_UNIX); c.connect("\0airlock-bench"); l.accept()[0].close(); c.close()
elif kind == "tunnel":
    dst = (socket.gethostbyname(sys.argv[3]), int(sys.argv[4]))
    def one():
        c = socket.create_connection(dst, timeout=10); c.close()
one()
t = time.perf_counter_ns()
for _ in range(n):
    one()
print("elapsed", time.perf_counter_ns() - t)
`

// BenchmarkConnect times connect(2) inside a sandbox of the namespace
// backend, per connect: "netns" without net_hosts (connect is the
// kernel's alone: the baseline) and "transparent" with net_hosts (every
// connect goes through the supervisor's connect broker, loopback and
// unix sockets answered with CONTINUE, a granted host outside through
// the proxy's tunnel). One sandbox runs all b.N connects of a case; the
// ns/connect metric is what the program measured around its loop.
func BenchmarkConnect(b *testing.B) {
	airtest.RequireUserNS(b)
	airtest.RequireLandlockABI(b, 4)
	airtest.RequireBinary(b, "/usr/bin/python3")
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go func() { // the granted host outside: accepts and closes
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := portOf(ln.Addr().String())
	for _, mode := range []struct {
		name string
		spec policy.Spec
	}{
		{"netns", policy.Spec{}},
		{"transparent", policy.Spec{NetHosts: []string{"host.airlock.internal:" + port}}},
	} {
		for _, kind := range []string{"tcp", "udp", "unix", "tunnel"} {
			if kind == "tunnel" && len(mode.spec.NetHosts) == 0 {
				continue
			}
			b.Run(mode.name+"/"+kind, func(b *testing.B) {
				spec := mode.spec
				spec.Budget.Wall = 10 * time.Minute
				spec.Budget.Ops = 1_000_000_000
				p, err := policy.New(spec)
				if err != nil {
					b.Fatalf("policy.New: %v", err)
				}
				cmd := &sandbox.Cmd{Config: sandbox.Config{Policy: p}, CommandIsGranted: true,
					Args: []string{"/usr/bin/python3", "-c", connectBenchScript, kind, strconv.Itoa(b.N), "host.airlock.internal", port}}
				rep, err := cmd.Run(b.Context())
				if err != nil {
					b.Fatalf("Run: %v", err)
				}
				var ns float64
				if rep.ExitCode != 0 || !strings.HasPrefix(rep.Stdout, "elapsed ") {
					b.Fatalf("exit %d, stdout %q, stderr:\n%s", rep.ExitCode, rep.Stdout, rep.Stderr)
				}
				if ns, err = strconv.ParseFloat(strings.TrimSpace(strings.TrimPrefix(rep.Stdout, "elapsed ")), 64); err != nil {
					b.Fatalf("elapsed: %v", err)
				}
				b.ReportMetric(ns/float64(b.N), "ns/connect")
			})
		}
	}
}
