package egress_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
)

func TestDecide(t *testing.T) {
	h := startProxy(t, harnessConfig{
		hosts: []string{"allowed.test:8080", "*.wild.test:443", "10.1.2.3:80", "inner.test:80", "bücher.test:80"},
		resolve: map[string]string{
			"allowed.test":       "93.184.216.34",
			"a.wild.test":        "93.184.216.34,2606:2800:220:1::1",
			"wild.test":          "93.184.216.34",
			"inner.test":         "10.1.2.3",
			"xn--bcher-kva.test": "93.184.216.34",
		},
	})
	tests := []struct {
		name     string
		host     string
		port     uint16
		want     string // AddrPort; "" when an error is expected
		wantDeny bool   // the error is a *policy.DenyError
	}{
		{"name", "allowed.test", 8080, "93.184.216.34:8080", false},
		{"upper-case-trailing-dot", "ALLOWED.test.", 8080, "93.184.216.34:8080", false},
		{"wildcard-subdomain", "a.wild.test", 443, "93.184.216.34:443", false},
		{"idna", "bücher.TEST.", 80, "93.184.216.34:80", false},
		{"listed-private-ip", "10.1.2.3", 80, "10.1.2.3:80", false},
		{"name-resolving-to-listed-private-ip", "inner.test", 80, "10.1.2.3:80", false},
		{"wildcard-apex", "wild.test", 443, "", true},
		{"other-port", "allowed.test", 80, "", true},
		{"port-zero", "allowed.test", 0, "", true},
		{"unlisted-ip", "10.1.2.4", 80, "", true},
		{"listed-ip-other-port", "10.1.2.3", 443, "", true},
		{"empty", "", 80, "", true},
		{"host-with-port", "allowed.test:8080", 8080, "", true},
		{"host-with-path", "allowed.test/x", 8080, "", true},
		{"userinfo", "x@allowed.test", 8080, "", true},
		{"hex-ipv4", "0xa.1.2.3", 80, "", true},
		{"decimal-ipv4", "167838211", 80, "", true},
		{"zone", "fe80::1%eth0", 80, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := h.p.Decide(t.Context(), tt.host, tt.port)
			if tt.want != "" {
				if err != nil || got != netip.MustParseAddrPort(tt.want) {
					t.Errorf("Decide(%q, %d) = %v, %v; want %s", tt.host, tt.port, got, err, tt.want)
				}
				return
			}
			var de *policy.DenyError
			if err == nil || errors.As(err, &de) != tt.wantDeny {
				t.Fatalf("Decide(%q, %d) = %v, %v; want a denial", tt.host, tt.port, got, err)
			}
			if de.Cap != policy.NetHosts || !errors.Is(err, policy.ErrDenied) || de.Reason == "" {
				t.Errorf("Decide(%q, %d) denial = %+v, want net_hosts with a reason", tt.host, tt.port, de)
			}
		})
	}
	if _, err := h.p.Decide(t.Context(), "unknown.wild.test", 443); err == nil || errors.Is(err, policy.ErrDenied) {
		t.Errorf("Decide(unresolvable) = %v, want a resolution error that is not a denial", err)
	}
	for _, e := range h.rec.Events() {
		if e.Layer != audit.LayerNet || e.Target == "" {
			t.Errorf("audit event %+v lacks layer net or a target", e)
		}
	}
}

// TestDecideResolvesOnce checks that a name is resolved once per decision
// and the dial goes to the address that was checked, even when DNS would
// answer differently the second time (rebinding to loopback).
func TestDecideResolvesOnce(t *testing.T) {
	const port = 8443
	public := netip.MustParseAddr("93.184.216.34")
	tests := []struct {
		name string
		run  func(t *testing.T, h *harness)
	}{
		{"http", func(t *testing.T, h *harness) {
			hp := "allowed.test:" + strconv.Itoa(port)
			status, _ := h.rawRequest(t, "GET http://"+hp+"/ HTTP/1.1\r\nHost: "+hp+"\r\n\r\n")
			if status != 502 {
				t.Errorf("status = %d, want 502 from the refusing test dialer", status)
			}
		}},
		{"connect-skip-sni", func(t *testing.T, h *harness) {
			c, status := openTunnel(t, h.httpAddr, "allowed.test:"+strconv.Itoa(port))
			if status != 200 {
				t.Fatalf("CONNECT = %d, want 200", status)
			}
			io.Copy(io.Discard, c) // ends when the proxy gives up on the dial
		}},
		{"socks", func(t *testing.T, h *harness) {
			_, rep := socksConnect(t, h.socksAddr, 1, 3, []byte("allowed.test"), port)
			if rep != 5 {
				t.Errorf("SOCKS reply = %d, want 5 (refused by the test dialer)", rep)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := startProxy(t, harnessConfig{
				hosts:   []string{"allowed.test:" + strconv.Itoa(port)},
				skipSNI: true,
			})
			h.res.seq["allowed.test"] = [][]netip.Addr{{public}, {loopback4}}
			tt.run(t, h)
			want := []string{netip.AddrPortFrom(public, port).String()}
			if got := h.dialer.dialed(); !slices.Equal(got, want) {
				t.Errorf("dialed %q, want exactly %q", got, want)
			}
			if got := h.res.lookups(); !slices.Equal(got, []string{"allowed.test"}) {
				t.Errorf("lookups = %q, want one lookup of allowed.test", got)
			}
		})
	}
}

func TestNewRequiresPolicyAndMeter(t *testing.T) {
	pol, err := policy.New(policy.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		cfg  egress.Config
	}{
		{"no-policy", egress.Config{Meter: budget.NewMeter(budget.Limits{}, nil)}},
		{"no-meter", egress.Config{Policy: pol}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if p, err := egress.New(tt.cfg); err == nil {
				p.Close()
				t.Errorf("New(%s) = nil error, want one", tt.name)
			}
		})
	}
}

// TestServeAfterClose checks that a listener handed over after Close is
// closed and not served.
func TestServeAfterClose(t *testing.T) {
	h := startProxy(t, harnessConfig{})
	h.p.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.p.ServeHTTPProxy(l); err != nil {
		t.Errorf("ServeHTTPProxy after Close = %v, want nil", err)
	}
	if _, err := l.Accept(); err == nil {
		t.Errorf("listener still accepts after ServeHTTPProxy on a closed proxy")
	}
}

// TestHostLoopback: host.airlock.internal:PORT, listed exactly, reaches the
// host's 127.0.0.1:PORT without a lookup; a wildcard that covers the name,
// or another port, does not; and nothing is dialed for a refusal.
func TestHostLoopback(t *testing.T) {
	ok := newTarget(t, "host-service")
	port := ok.port
	exact := startProxy(t, harnessConfig{hosts: []string{fmt.Sprintf("host.airlock.internal:%d", port)}})
	status, body := exact.rawRequest(t, fmt.Sprintf("GET http://host.airlock.internal:%d/ HTTP/1.1\r\nHost: host.airlock.internal:%d\r\n\r\n", port, port))
	if status != 200 || !strings.Contains(body, "hello from host-service") {
		t.Fatalf("granted host loopback = %d %q", status, body)
	}
	if got := exact.res.lookups(); len(got) != 0 {
		t.Errorf("host.airlock.internal was looked up: %q", got)
	}
	for name, hosts := range map[string][]string{
		"wildcard":   {fmt.Sprintf("*.airlock.internal:%d", port)},
		"other-port": {"host.airlock.internal:1"},
		"none":       {"example.com"},
	} {
		t.Run(name, func(t *testing.T) {
			h := startProxy(t, harnessConfig{hosts: hosts})
			status, _ := h.rawRequest(t, fmt.Sprintf("GET http://host.airlock.internal:%d/ HTTP/1.1\r\nHost: host.airlock.internal:%d\r\n\r\n", port, port))
			if status != 403 {
				t.Fatalf("host loopback under %v = %d, want 403", hosts, status)
			}
			if d := h.dialer.dialed(); len(d) != 0 {
				t.Fatalf("dialed %q for a refusal", d)
			}
		})
	}
	if n := ok.requests.Load(); n != 1 {
		t.Fatalf("the host service got %d requests, want 1", n)
	}
}
