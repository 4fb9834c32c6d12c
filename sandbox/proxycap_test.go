package sandbox

import "testing"

func TestProxyConnCap(t *testing.T) {
	tests := []struct {
		name     string
		pids     int64
		override int
		want     int
	}{
		{"default-max-pids", 64, 0, 256},
		{"floor", 1, 0, 64},
		{"ceiling", 100000, 0, 1024},
		{"server-share-lowers", 64, 160, 160},
		{"server-share-never-raises", 64, 5000, 256},
		{"negative-override-ignored", 64, -1, 256},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := proxyConnCap(tt.pids, tt.override); got != tt.want {
				t.Errorf("proxyConnCap(%d, %d) = %d, want %d", tt.pids, tt.override, got, tt.want)
			}
		})
	}
}
