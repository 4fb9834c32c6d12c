package egress_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/policy/budget"
)

// twoServers starts the granted server and one that must never be reached,
// and a proxy granting only allowed.test and 127.0.0.1 on the first.
func twoServers(t *testing.T) (*harness, *target, *target) {
	return twoServersVia(t, viaConnect)
}

// twoServersVia is twoServers whose open goes via.
func twoServersVia(t *testing.T, via string) (*harness, *target, *target) {
	t.Helper()
	ok, evil := newTarget(t, "allowed"), newTarget(t, "evil")
	h := startProxy(t, harnessConfig{
		hosts: []string{ok.hostPort("allowed.test"), ok.hostPort("127.0.0.1")},
		resolve: map[string]string{
			"allowed.test": "127.0.0.1", "evil.test": "127.0.0.1",
			"evilallowed.test": "127.0.0.1", "allowed.test.evil.test": "127.0.0.1",
		},
		via: via,
	})
	return h, ok, evil
}

func TestHTTPAllowed(t *testing.T) {
	h, ok, _ := twoServers(t)
	c := h.client(nil)
	tests := []struct {
		name, method, url, body, want string
	}{
		{"get", "GET", "http://" + ok.hostPort("allowed.test") + "/x", "", "hello from allowed host=" + ok.hostPort("allowed.test") + " "},
		{"post-body-arrives", "POST", "http://" + ok.hostPort("allowed.test") + "/", "payload=1", "hello from allowed host=" + ok.hostPort("allowed.test") + " payload=1"},
		{"case-and-trailing-dot", "GET", "http://" + ok.hostPort("ALLOWED.TEST.") + "/", "", "hello from allowed host=" + ok.hostPort("allowed.test") + " "},
		{"listed-ip", "GET", "http://" + ok.hostPort("127.0.0.1") + "/", "", "hello from allowed host=" + ok.hostPort("127.0.0.1") + " "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, tt.url, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != 200 || string(b) != tt.want {
				t.Errorf("%s %s = %d %q, want 200 %q", tt.method, tt.url, resp.StatusCode, b, tt.want)
			}
		})
	}
	// The resolver is asked the normalized name, never the raw one.
	for _, n := range h.res.lookups() {
		if n != "allowed.test" {
			t.Errorf("resolver was asked %q, want only %q", n, "allowed.test")
		}
	}
	var allows int
	for _, e := range h.rec.Events() {
		if e.Kind == audit.Allow && e.Layer == audit.LayerNet && e.Rule == "net_hosts" && e.Op == "http" {
			allows++
		}
	}
	if allows != len(tests) {
		t.Errorf("audit has %d net allow events, want %d: %+v", allows, len(tests), h.rec.Events())
	}
}

// TestHTTPDenied sends each attack as raw bytes, so the request line and
// headers are exactly what an attacker controls, and checks that neither
// server accepted a connection.
func TestHTTPDenied(t *testing.T) {
	h, ok, evil := twoServers(t)
	okHP, evilHP := ok.hostPort("allowed.test"), evil.hostPort("evil.test")
	get := func(uri, host string) string {
		return "GET " + uri + " HTTP/1.1\r\nHost: " + host + "\r\n\r\n"
	}
	tests := []struct {
		name       string
		req        string
		wantStatus int
		wantTarget string // audit denial target; "" when refused as malformed
		wantBody   string
	}{
		{"not-granted", get("http://"+evilHP+"/", evilHP), 403, evilHP, evilHP + " denied: evil.test is not in net_hosts"},
		{"host-header-spoof", get("http://"+okHP+"/", evilHP), 403, okHP, "does not match"},
		{"host-header-spoof-reverse", get("http://"+evilHP+"/", okHP), 403, evilHP, "does not match"},
		{"host-header-other-port", get("http://"+okHP+"/", ok.hostPort("allowed.test")+"1"), 403, okHP, "does not match"},
		{"userinfo-allowed-at-evil", get("http://allowed.test@"+evilHP+"/", evilHP), 400, "", "userinfo"},
		{"userinfo-with-port", get("http://"+okHP+"@"+evilHP+"/", evilHP), 400, "", "userinfo"},
		{"userinfo-evil-at-allowed", get("http://evil.test@"+okHP+"/", okHP), 400, "", "userinfo"},
		{"suffix-confusion", get("http://"+ok.hostPort("evilallowed.test")+"/", ok.hostPort("evilallowed.test")), 403, ok.hostPort("evilallowed.test"), "not in net_hosts"},
		{"prefix-confusion", get("http://"+ok.hostPort("allowed.test.evil.test")+"/", ok.hostPort("allowed.test.evil.test")), 403, ok.hostPort("allowed.test.evil.test"), "not in net_hosts"},
		{"decimal-ipv4", get("http://"+ok.hostPort("2130706433")+"/", ok.hostPort("2130706433")), 403, ok.hostPort("2130706433"), "denied"},
		{"octal-ipv4", get("http://"+ok.hostPort("0177.0.0.1")+"/", ok.hostPort("0177.0.0.1")), 403, ok.hostPort("0177.0.0.1"), "denied"},
		{"hex-ipv4", get("http://"+ok.hostPort("0x7f.0.0.1")+"/", ok.hostPort("0x7f.0.0.1")), 403, ok.hostPort("0x7f.0.0.1"), "denied"},
		{"short-hex-ipv4", get("http://"+ok.hostPort("0x7f.1")+"/", ok.hostPort("0x7f.1")), 403, ok.hostPort("0x7f.1"), "denied"},
		{"ipv6-loopback", get("http://"+ok.hostPort("::1")+"/", ok.hostPort("::1")), 403, ok.hostPort("::1"), "listed exactly"},
		{"port-not-granted", get("http://"+evil.hostPort("allowed.test")+"/", evil.hostPort("allowed.test")), 403, evil.hostPort("allowed.test"), "not in net_hosts"},
		{"origin-form", get("/", okHP), 400, "", "absolute-URI"},
		{"https-scheme", get("https://"+okHP+"/", okHP), 400, "", "CONNECT"},
		{"cl-te-conflict", "POST http://" + okHP + "/ HTTP/1.1\r\nHost: " + okHP + "\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400, "", "both Content-Length and Transfer-Encoding"},
		{"differing-content-lengths", "POST http://" + okHP + "/ HTTP/1.1\r\nHost: " + okHP + "\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\nabcde", 400, "", "Content-Length"},
		{"two-host-headers", "GET http://" + okHP + "/ HTTP/1.1\r\nHost: " + okHP + "\r\nHost: " + evilHP + "\r\n\r\n", 400, "", "Host"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(h.rec.Denials())
			status, body := h.rawRequest(t, tt.req)
			if status != tt.wantStatus || !strings.Contains(body, tt.wantBody) {
				t.Errorf("proxy(%q) = %d %q, want %d containing %q", tt.req, status, body, tt.wantStatus, tt.wantBody)
			}
			if strings.Contains(body, "add ") || strings.Contains(body, "to allow it") {
				t.Errorf("proxy(%q) tells the sandboxed client how to widen its policy: %q", tt.req, body)
			}
			if n := ok.accepted() + evil.accepted(); n != 0 {
				t.Fatalf("servers accepted %d connections, want 0", n)
			}
			if len(h.dialer.dialed()) != 0 {
				t.Fatalf("proxy dialed %q, want nothing", h.dialer.dialed())
			}
			if tt.wantTarget == "" {
				return
			}
			var found bool
			for _, e := range h.rec.Denials()[before:] {
				if e.Layer == "net" && e.Rule == "net_hosts" && e.Op == "http" && e.Target == tt.wantTarget && e.Message != "" {
					found = true
				}
			}
			if !found {
				t.Errorf("no net_hosts denial for %s in audit: %+v", tt.wantTarget, h.rec.Denials()[before:])
			}
		})
	}
}

func TestHTTPAddressChecks(t *testing.T) {
	ok := newTarget(t, "allowed")
	tests := []struct {
		name    string
		resolve string
	}{
		{"resolves-to-unlisted-loopback", "127.0.0.1"},
		{"resolves-to-metadata", "169.254.169.254"},
		{"resolves-to-private", "10.0.0.7"},
		{"one-special-among-public", "93.184.216.34,192.168.1.1"},
		{"mapped-loopback", "::ffff:127.0.0.1"},
		{"ula", "fd00::1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := startProxy(t, harnessConfig{
				hosts:   []string{ok.hostPort("allowed.test")},
				resolve: map[string]string{"allowed.test": tt.resolve},
			})
			hp := ok.hostPort("allowed.test")
			status, body := h.rawRequest(t, "GET http://"+hp+"/ HTTP/1.1\r\nHost: "+hp+"\r\n\r\n")
			if status != 403 || !strings.Contains(body, "special address") {
				t.Errorf("GET via %s = %d %q, want 403 naming the special address", tt.resolve, status, body)
			}
			if d := h.dialer.dialed(); len(d) != 0 {
				t.Errorf("dialer called with %q, want no dial", d)
			}
			if ok.accepted() != 0 {
				t.Errorf("server accepted %d connections, want 0", ok.accepted())
			}
			if len(h.denialFor(hp)) != 1 {
				t.Errorf("audit denials for %s = %+v, want 1", hp, h.rec.Denials())
			}
		})
	}
}

// TestHTTPPipelined sends two requests in one write on one keep-alive
// connection. Each is decided on its own; the denied one reaches nobody.
func TestHTTPPipelined(t *testing.T) {
	h, ok, evil := twoServers(t)
	okHP, evilHP := ok.hostPort("allowed.test"), evil.hostPort("evil.test")
	tests := []struct {
		name        string
		second      string
		wantSecond  int
		wantAllowed int64
	}{
		{"allowed-then-denied", evilHP, 403, 1},
		{"allowed-then-allowed", okHP, 200, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := ok.requests.Load()
			c, err := net.Dial("tcp", h.httpAddr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			req := "GET http://" + okHP + "/1 HTTP/1.1\r\nHost: " + okHP + "\r\n\r\n" +
				"GET http://" + tt.second + "/2 HTTP/1.1\r\nHost: " + tt.second + "\r\n\r\n"
			if _, err := io.WriteString(c, req); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(c)
			for i, want := range []int{200, tt.wantSecond} {
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("response %d: %v", i+1, err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != want {
					t.Errorf("response %d = %d, want %d", i+1, resp.StatusCode, want)
				}
			}
			if evil.accepted() != 0 {
				t.Errorf("denied server accepted %d connections, want 0", evil.accepted())
			}
			if got := ok.requests.Load() - before; got != tt.wantAllowed {
				t.Errorf("allowed server got %d requests, want %d", got, tt.wantAllowed)
			}
		})
	}
}

// TestHTTPMaxOps: the connection and each request on it cost an op; the
// request past max_ops is refused and the meter's Done is closed.
func TestHTTPMaxOps(t *testing.T) {
	ok := newTarget(t, "allowed")
	h := startProxy(t, harnessConfig{
		hosts:   []string{ok.hostPort("allowed.test"), ok.hostPort("127.0.0.1")},
		resolve: map[string]string{"allowed.test": "127.0.0.1"},
		limits:  budget.Limits{Ops: 3}, // one keep-alive connection, two requests
	})
	c := h.client(nil)
	url := "http://" + ok.hostPort("allowed.test") + "/"
	for i, want := range []int{200, 200, 403} {
		resp, err := c.Get(url)
		if err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
		b, _ := io.ReadAll(resp.Body) // compared below only for the refusal
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("request %d = %d %q, want %d", i+1, resp.StatusCode, b, want)
		}
		if want == 403 && !strings.Contains(string(b), "max_ops") {
			t.Errorf("refusal body %q does not name max_ops", b)
		}
	}
	if got := ok.requests.Load(); got != 2 {
		t.Errorf("server got %d requests, want 2", got)
	}
	var found bool
	for _, e := range h.rec.Denials() {
		found = found || (e.Rule == "max_ops" && e.Layer == "net")
	}
	if !found {
		t.Errorf("no max_ops denial in audit: %+v", h.rec.Events())
	}
	if _, err := h.p.Decide(t.Context(), "allowed.test", ok.port); !errors.Is(err, budget.ErrExhausted) {
		t.Errorf("Decide after exhaustion = %v, want budget.ErrExhausted", err)
	}
	select {
	case <-h.meter.Done():
	default:
		t.Error("the meter refused an op but its Done is open: the supervisor would not end the run")
	}
}

// TestRefusalAdvice: the refusal the sandboxed client reads names the
// net_hosts entry that would allow the request only with AgentAdvice; the
// audit event, which is the operator's, always does.
func TestRefusalAdvice(t *testing.T) {
	for _, advice := range []bool{false, true} {
		h := startProxy(t, harnessConfig{hosts: []string{"allowed.test"}, advice: advice})
		target := "evil.test:8000"
		status, body := h.rawRequest(t, "GET http://"+target+"/ HTTP/1.1\r\nHost: "+target+"\r\n\r\n")
		want := `add "` + target + `" to net_hosts`
		if status != 403 || strings.Contains(body, want) != advice {
			t.Errorf("AgentAdvice %v: proxy answered %d %q; want 403 with the advice %v", advice, status, body, advice)
		}
		d := h.rec.Denials()
		if len(d) != 1 || d[0].Suggestion != want {
			t.Errorf("AgentAdvice %v: audit denials %+v, want one with the suggestion %s", advice, d, want)
		}
	}
}
