package sandbox_test

import (
	"context"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/sandbox"
)

const credSecret = "sk-live-4f9c2e7a1b8d3f60-never-inside"

// authEcho records the Authorization it receives and echoes it in a
// header and the body.
type authEcho struct {
	mu   sync.Mutex
	seen []string
}

func (a *authEcho) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	v := r.Header.Get("Authorization")
	a.mu.Lock()
	a.seen = append(a.seen, v)
	a.mu.Unlock()
	w.Header().Set("X-Echo", v)
	fmt.Fprintf(w, "you sent [%s]", v)
}

func (a *authEcho) got() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.seen...)
}

// TestCredentialsKeptOutside: the proxy adds the credential on HTTPS
// requests to its host, through the proxy variables and transparently,
// terminating TLS with the run's CA that the sandbox's clients trust; the
// upstream sees the real value; the sandbox finds it nowhere: not in its
// environment, /proc/self/environ, the files it can read, nor the
// responses (the server echoes it back, redacted on the way); a request to
// another granted host carries none, even when the client sends one.
func TestCredentialsKeptOutside(t *testing.T) {
	requireSandbox(t)
	api := &authEcho{}
	srv := httptest.NewTLSServer(api) // its certificate names example.com
	t.Cleanup(srv.Close)
	port := portOf(srv.Listener.Addr().String())
	other := &authEcho{}
	osrv := httptest.NewServer(other)
	t.Cleanup(osrv.Close)
	oport := portOf(osrv.Listener.Addr().String())
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())

	p, err := policy.New(policy.Spec{
		NetHosts:    []string{"example.com:" + port, "127.0.0.1:" + port, "host.airlock.internal:" + oport},
		Credentials: []policy.Credential{{Host: "example.com", Header: "Authorization", Env: "AIRLOCK_TEST_TOKEN"}},
		Budget:      spec20s(), AllowDowngrade: rootlessDowngrades(),
	})
	if err != nil {
		t.Fatal(err)
	}
	code := fmt.Sprintf(`
import os, urllib.request
secret = %[1]q[::-1]  # reversed, so this script's own text (/proc/self/cmdline) does not hold it
port, oport = %[2]s, %[3]s
print("env-clean", not any(secret in v for v in os.environ.values()))
print("proc-environ-clean", secret.encode() not in open("/proc/self/environ", "rb").read())
leaks = []
paths = ["/proc/self/" + f for f in ("environ", "cmdline", "auxv", "status", "maps", "mountinfo")]
for top in ("/etc", "/tmp"):
    for d, _, files in os.walk(top):
        paths += [os.path.join(d, f) for f in files]
for p in paths:
    try:
        if os.path.isfile(p) and secret.encode()[:16] in open(p, "rb").read(1 << 22): leaks.append(p)
    except OSError: pass
print("files-clean", leaks == [], leaks[:3])
print("ca-bundle", os.environ.get("SSL_CERT_FILE"))
req = urllib.request.Request("https://example.com:%%d/" %% port, headers={"Authorization": "Bearer the-agents-guess"})
r = urllib.request.urlopen(req, timeout=10)
print("proxy:", r.read().decode(), "echo:", r.headers.get("X-Echo"))
for k in list(os.environ):
    if k.lower().endswith("_proxy"): del os.environ[k]
r = urllib.request.urlopen("https://example.com:%%d/" %% port, timeout=10)
print("transparent:", r.read().decode())
req = urllib.request.Request("http://host.airlock.internal:%%d/" %% oport, headers={"Authorization": "Bearer mine"})
print("other:", urllib.request.urlopen(req, timeout=10).read().decode())
`, reverse(credSecret), port, oport)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rep, err := (&sandbox.Cmd{Config: sandbox.Config{Policy: p, Resolver: fakeResolver{netip.MustParseAddr("127.0.0.1")}, UpstreamRoots: roots,
		LookupEnv: func(n string) (string, bool) { return "Bearer " + credSecret, n == "AIRLOCK_TEST_TOKEN" }},
		Args: []string{"/usr/bin/python3", "-c", code}, CommandIsGranted: true}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantExit(t, rep, 0)
	for _, w := range []string{"env-clean True", "proc-environ-clean True", "files-clean True", "ca-bundle /etc/airlock/ca-certificates.pem",
		"proxy: you sent [" + egress.Redacted + "] echo: " + egress.Redacted, "transparent: you sent [" + egress.Redacted + "]", "other: you sent [Bearer mine]"} {
		if !strings.Contains(rep.Stdout, w) {
			t.Errorf("stdout lacks %q:\n%s\nstderr:\n%s", w, rep.Stdout, rep.Stderr)
		}
	}
	if strings.Contains(rep.Stdout+rep.Stderr, credSecret) {
		t.Errorf("the secret reached the sandbox's output")
	}
	if got := api.got(); len(got) != 2 || got[0] != "Bearer "+credSecret || got[1] != "Bearer "+credSecret {
		t.Errorf("the credential's host received %q, want the credential twice", got)
	}
	if got := other.got(); len(got) != 1 || got[0] != "Bearer mine" {
		t.Errorf("the other host received %q", got)
	}
}

// TestCredentialUnset: a credential whose variable is not set where
// airlock runs refuses the run before anything starts, naming it.
func TestCredentialUnset(t *testing.T) {
	requireSandbox(t)
	p, err := policy.New(policy.Spec{NetHosts: []string{"example.com"},
		Credentials: []policy.Credential{{Host: "example.com", Header: "Authorization", Env: "AIRLOCK_TEST_UNSET_TOKEN"}}, AllowDowngrade: rootlessDowngrades()})
	if err != nil {
		t.Fatal(err)
	}
	os.Unsetenv("AIRLOCK_TEST_UNSET_TOKEN")
	rep, err := (&sandbox.Cmd{Config: sandbox.Config{Policy: p}, Args: []string{"/bin/true"}, CommandIsGranted: true}).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.ExitCode != 125 || !strings.Contains(rep.Error, "AIRLOCK_TEST_UNSET_TOKEN") {
		t.Fatalf("exit %d, error %q; want 125 naming the variable", rep.ExitCode, rep.Error)
	}
}

func reverse(s string) string {
	b := []byte(s)
	for i, j := 0, len(b)-1; i < j; i, j = i+1, j-1 {
		b[i], b[j] = b[j], b[i]
	}
	return string(b)
}

// rootlessDowngrades accepts what a rootless test host cannot enforce.
func rootlessDowngrades() []string { return airtest.RootlessDowngrades() }
