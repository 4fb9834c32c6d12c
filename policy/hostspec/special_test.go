package hostspec_test

import (
	"net/netip"
	"testing"

	"github.com/airlock-sandbox/airlock/policy/hostspec"
)

func TestIsSpecial(t *testing.T) {
	tests := []struct {
		name, addr string
		want       bool
	}{
		{"public4", "93.184.216.34", false},
		{"public4-dns", "8.8.8.8", false},
		{"unspecified4", "0.0.0.0", true},
		{"this-network", "0.1.2.3", true},
		{"private10", "10.1.2.3", true},
		{"cgnat", "100.64.0.1", true},
		{"cgnat-end", "100.127.255.255", true},
		{"after-cgnat", "100.128.0.1", false},
		{"loopback", "127.0.0.1", true},
		{"loopback-other", "127.255.0.9", true},
		{"link-local", "169.254.1.1", true},
		{"metadata", "169.254.169.254", true},
		{"private172", "172.16.0.1", true},
		{"private172-end", "172.31.255.255", true},
		{"after-172", "172.32.0.1", false},
		{"ietf-192-0-0", "192.0.0.8", true},
		{"test-net-1", "192.0.2.1", true},
		{"6to4-relay", "192.88.99.1", true},
		{"private192", "192.168.1.1", true},
		{"benchmark", "198.18.0.1", true},
		{"benchmark-end", "198.19.255.255", true},
		{"test-net-2", "198.51.100.1", true},
		{"test-net-3", "203.0.113.1", true},
		{"multicast4", "224.0.0.1", true},
		{"reserved240", "240.0.0.1", true},
		{"broadcast", "255.255.255.255", true},
		{"public6", "2606:4700::1111", false},
		{"unspecified6", "::", true},
		{"loopback6", "::1", true},
		{"ipv4-compatible", "::8.8.8.8", true},
		{"mapped-public", "::ffff:8.8.8.8", false},
		{"mapped-loopback", "::ffff:127.0.0.1", true},
		{"mapped-metadata", "::ffff:169.254.169.254", true},
		{"mapped-private", "::ffff:10.0.0.1", true},
		{"nat64-public", "64:ff9b::8.8.8.8", false},
		{"nat64-loopback", "64:ff9b::127.0.0.1", true},
		{"nat64-metadata", "64:ff9b::a9fe:a9fe", true},
		{"nat64-local-use", "64:ff9b:1::808:808", true},
		{"sixto4-public", "2002:808:808::1", false},
		{"sixto4-private", "2002:a00:1::1", true},
		{"sixto4-loopback", "2002:7f00:1::1", true},
		{"teredo", "2001::1", true},
		{"ietf-2001-23", "2001:1ff::1", true},
		{"after-ietf", "2001:200::1", false},
		{"documentation6", "2001:db8::1", true},
		{"documentation6-new", "3fff::1", true},
		{"discard6", "100::1", true},
		{"ula", "fd00::1", true},
		{"ula-fc", "fc00::1", true},
		{"site-local", "fec0::1", true},
		{"link-local6", "fe80::1", true},
		{"link-local6-zone", "fe80::1%eth0", true},
		{"multicast6", "ff02::1", true},
		{"multicast6-global", "ff0e::1", true},
		{"outside-2000-3", "4000::1", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := netip.MustParseAddr(tt.addr)
			if got := hostspec.IsSpecial(a); got != tt.want {
				t.Errorf("IsSpecial(%v) = %v, want %v", a, got, tt.want)
			}
		})
	}
	if !hostspec.IsSpecial(netip.Addr{}) {
		t.Error("IsSpecial(netip.Addr{}) = false, want true")
	}
}
