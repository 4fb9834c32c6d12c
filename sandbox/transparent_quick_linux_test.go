package sandbox

import (
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/internal/enforce/connbroker"
)

// TestTransparentQuick: the broker's quick answer lets a connect continue
// exactly where decide would, and only for a socket in the sandbox's
// network namespace; everything that could leave the namespace, be
// tunnelled or be denied (with its audit event) is left to decide.
func TestTransparentQuick(t *testing.T) {
	const sandboxNS, otherNS = 4096, 8192
	tp := &transparent{netns: sandboxNS}
	ap := netip.MustParseAddrPort
	tests := []struct {
		name   string
		r      connbroker.Request
		answer bool // quick answers (Continue); false: left to decide
	}{
		{"loopback-tcp", connbroker.Request{NetNS: sandboxNS, Family: unix.AF_INET, Type: unix.SOCK_STREAM, Addr: ap("127.0.0.1:3128")}, true},
		{"loopback-other-127", connbroker.Request{NetNS: sandboxNS, Family: unix.AF_INET, Type: unix.SOCK_STREAM, Addr: ap("127.9.9.9:80")}, true},
		{"loopback-v6", connbroker.Request{NetNS: sandboxNS, Family: unix.AF_INET6, Type: unix.SOCK_STREAM, Addr: ap("[::1]:80")}, true},
		{"unspecified", connbroker.Request{NetNS: sandboxNS, Family: unix.AF_INET, Type: unix.SOCK_STREAM, Addr: ap("0.0.0.0:80")}, true},
		{"udp-anywhere", connbroker.Request{NetNS: sandboxNS, Family: unix.AF_INET, Type: unix.SOCK_DGRAM, Addr: ap("192.0.2.1:53")}, true},
		{"unix", connbroker.Request{NetNS: sandboxNS, Family: unix.AF_UNIX, Type: unix.SOCK_STREAM, Path: "@db"}, true},
		{"unspec-family", connbroker.Request{NetNS: sandboxNS, Family: unix.AF_UNSPEC, Type: unix.SOCK_STREAM}, true},
		{"outside-tcp", connbroker.Request{NetNS: sandboxNS, Family: unix.AF_INET, Type: unix.SOCK_STREAM, Addr: ap("192.0.2.1:80")}, false},
		{"synthetic", connbroker.Request{NetNS: sandboxNS, Family: unix.AF_INET, Type: unix.SOCK_STREAM, Addr: ap("198.18.0.1:443")}, false},
		{"mapped-outside", connbroker.Request{NetNS: sandboxNS, Family: unix.AF_INET6, Type: unix.SOCK_STREAM, Addr: ap("192.0.2.1:80")}, false},
		{"foreign-ns-loopback", connbroker.Request{NetNS: otherNS, Family: unix.AF_INET, Type: unix.SOCK_STREAM, Addr: ap("127.0.0.1:80")}, false},
		{"foreign-ns-unix", connbroker.Request{NetNS: otherNS, Family: unix.AF_UNIX, Type: unix.SOCK_STREAM, Path: "@db"}, false},
		{"foreign-ns-udp", connbroker.Request{NetNS: otherNS, Family: unix.AF_INET, Type: unix.SOCK_DGRAM, Addr: ap("127.0.0.1:53")}, false},
		{"unknown-ns", connbroker.Request{NetNS: 0, Family: unix.AF_UNIX, Type: unix.SOCK_STREAM, Path: "@db"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, ok := tp.quick(tt.r)
			if ok != tt.answer {
				t.Fatalf("quick(%+v) answered %v, want %v", tt.r, ok, tt.answer)
			}
			if !ok {
				return
			}
			if want := (connbroker.Verdict{Continue: true}); v.Continue != want.Continue || v.Errno != 0 || v.Conn != nil || v.Connect.IsValid() {
				t.Errorf("quick(%+v) = %+v, want only Continue", tt.r, v)
			}
			// decide, asked the same, must agree: quick is a shortcut,
			// never a second policy.
			if d := tp.decide(tt.r); !d.Continue || d.Errno != 0 || d.Conn != nil || d.Connect.IsValid() {
				t.Errorf("decide(%+v) = %+v, quick let it continue", tt.r, d)
			}
		})
	}
}

// TestTransparentClaim: a tunnel is claimed only by a connection from the
// exact loopback address and port the broker bound, once; the broker's
// word that no connection comes (the zero address) keeps nothing.
func TestTransparentClaim(t *testing.T) {
	tp := &transparent{pending: map[netip.AddrPort]pendingTunnel{}}
	from := netip.MustParseAddrPort("127.0.4.2:40000")
	tun := &egress.Tunnel{}
	tp.register(netip.AddrPort{}, &egress.Tunnel{})
	if len(tp.pending) != 0 {
		t.Fatalf("register(zero) kept %d tunnels, want none", len(tp.pending))
	}
	tp.register(from, tun)
	for _, other := range []string{"127.0.4.3:40000", "127.0.0.1:40000", "127.0.4.2:40001", "192.0.2.1:40000"} {
		if got := tp.claim(netip.MustParseAddrPort(other)); got != nil {
			t.Errorf("claim(%s) took the tunnel registered for %v", other, from)
		}
	}
	if got := tp.claim(from); got != tun {
		t.Errorf("claim(%v) = %p, want the tunnel registered for it (%p)", from, got, tun)
	}
	if got := tp.claim(from); got != nil {
		t.Errorf("claim(%v) a second time = %p, want nil", from, got)
	}
}
