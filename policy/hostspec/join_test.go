package hostspec

import "testing"

func TestJoin(t *testing.T) {
	for _, tt := range []struct {
		host string
		port uint16
		want string
	}{
		{"example.com", 443, "example.com:443"},
		{"192.0.2.7", 80, "192.0.2.7:80"},
		{"2001:db8::7", 443, "[2001:db8::7]:443"},
		{"[2001:db8::7]", 443, "[2001:db8::7]:443"}, // never bracketed twice
		{"::1", 0, "[::1]:0"},
	} {
		if got := Join(tt.host, tt.port); got != tt.want {
			t.Errorf("Join(%q, %d) = %q, want %q", tt.host, tt.port, got, tt.want)
		}
	}
}
