package egress_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/airtest"
)

// run runs a real client with an environment free of proxy variables and
// returns its stdout.
func run(t *testing.T, name string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir()}
	out, err := cmd.Output()
	if ee, ok := err.(*exec.ExitError); ok {
		t.Logf("%s stderr: %s", name, ee.Stderr)
	}
	return string(out), err
}

func TestCurl(t *testing.T) {
	airtest.RequireBinary(t, "/usr/bin/curl")
	h, ok, evil := twoServers(t)
	tg, pemBytes, _ := newTLSTarget(t)
	// A second proxy for the TLS target, whose port differs.
	th := startProxy(t, harnessConfig{
		hosts:   []string{tg.hostPort("allowed.test"), tg.hostPort("127.0.0.1")},
		resolve: map[string]string{"allowed.test": "127.0.0.1"},
	})
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pemBytes, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want string
		fail bool // curl exits non-zero (a refused CONNECT is exit 56)
	}{
		{"http", []string{"-x", "http://" + h.httpAddr, "http://" + ok.hostPort("allowed.test") + "/"}, "hello from allowed", false},
		{"post", []string{"-x", "http://" + h.httpAddr, "--data", "k=v", "http://" + ok.hostPort("allowed.test") + "/"}, "k=v", false},
		{"https-connect", []string{"-x", "http://" + th.httpAddr, "--cacert", ca, "https://" + tg.hostPort("allowed.test") + "/"}, "hello over tls", false},
		{"socks5h", []string{"--proxy", "socks5h://" + h.socksAddr, "http://" + ok.hostPort("allowed.test") + "/"}, "hello from allowed", false},
		// --proxytunnel: plain http:// through CONNECT, as npm sends it.
		{"http-in-connect", []string{"-p", "-x", "http://" + h.httpAddr, "http://" + ok.hostPort("allowed.test") + "/"}, "hello from allowed", false},
		{"http-in-connect-denied", []string{"-p", "-x", "http://" + h.httpAddr, "-w", "%{http_connect}", "http://" + evil.hostPort("evil.test") + "/"}, "403", true},
		{"denied", []string{"-x", "http://" + h.httpAddr, "-w", "%{http_code}", "http://" + evil.hostPort("evil.test") + "/"}, evil.hostPort("evil.test") + " denied: evil.test is not in net_hosts\n403", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := run(t, "/usr/bin/curl", append([]string{"-sS", "--max-time", "20"}, tt.args...)...)
			if (err != nil) != tt.fail || !strings.Contains(out, tt.want) {
				t.Errorf("curl %q = %q, %v; want output containing %q (and failure %v)", tt.args, out, err, tt.want, tt.fail)
			}
		})
	}
	if evil.accepted() != 0 {
		t.Errorf("denied server accepted %d connections", evil.accepted())
	}
}

func TestPythonUrllib(t *testing.T) {
	airtest.RequireBinary(t, "/usr/bin/python3")
	h, ok, evil := twoServers(t)
	const script = `
import sys, urllib.request, urllib.error
opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": sys.argv[1]}))
try:
    print(opener.open(sys.argv[2], timeout=20).read().decode())
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode())
`
	tests := []struct{ name, url, want string }{
		{"allowed", "http://" + ok.hostPort("allowed.test") + "/", "hello from allowed"},
		{"denied", "http://" + evil.hostPort("evil.test") + "/", "403 airlock: " + evil.hostPort("evil.test") + " denied"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := run(t, "/usr/bin/python3", "-c", script, "http://"+h.httpAddr, tt.url)
			if err != nil || !strings.Contains(out, tt.want) {
				t.Errorf("python3 urllib %s = %q, %v; want output containing %q", tt.url, out, err, tt.want)
			}
		})
	}
	if evil.accepted() != 0 {
		t.Errorf("denied server accepted %d connections", evil.accepted())
	}
}
