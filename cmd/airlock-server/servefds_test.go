package main

import "testing"

func TestServeFDQuota(t *testing.T) {
	tests := []struct {
		name        string
		nofile      uint64
		sessions    int
		wantReserve uint64
		wantConns   int
		wantErr     bool
	}{
		{"this-host", 20000, 8, 5000, 905, false},
		{"nofile-4096", 4096, 8, 1024, 160, false},
		{"one-session", 4096, 1, 1024, 1504, false},
		{"small-limit-floor-reserve", 1024, 2, 256, 160, false},
		{"too-many-sessions", 4096, 64, 1024, 0, true},
		{"limit-below-reserve", 200, 1, 256, 0, true},
		{"nonsense-sessions", 4096, 0, 1024, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, err := serveFDQuota(tt.nofile, tt.sessions)
			if (err != nil) != tt.wantErr {
				t.Fatalf("serveFDQuota(%d, %d) error = %v, want error %v", tt.nofile, tt.sessions, err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if q.reserve != tt.wantReserve || q.conns != tt.wantConns {
				t.Errorf("serveFDQuota(%d, %d) = reserve %d, conns %d; want %d, %d", tt.nofile, tt.sessions, q.reserve, q.conns, tt.wantReserve, tt.wantConns)
			}
			// Every session at its cap, tunnelling, still leaves the reserve.
			if used := uint64(tt.sessions) * uint64(2*q.conns+serveSessionFixedFDs); used+q.reserve > tt.nofile {
				t.Errorf("sessions at their caps use %d fds; with the reserve of %d that passes RLIMIT_NOFILE %d", used, q.reserve, tt.nofile)
			}
		})
	}
}
