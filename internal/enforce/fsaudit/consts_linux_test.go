package fsaudit

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestConstants checks the portable copies of the uapi values against
// golang.org/x/sys/unix.
func TestConstants(t *testing.T) {
	tests := []struct {
		name      string
		got, want int
	}{
		{"landlock-access", typeLandlockAccess, unix.AUDIT_LANDLOCK_ACCESS},
		{"landlock-domain", typeLandlockDomain, unix.AUDIT_LANDLOCK_DOMAIN},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("%s = %d, want %d", tt.name, tt.got, tt.want)
			}
		})
	}
}
