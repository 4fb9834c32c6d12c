package fsaudit

import (
	"errors"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/airtest"
)

// TestAuditSetting checks Start's effect on the kernel's audit switch
// against the real kernel: NoEnable refuses to turn it on, Start turns it
// on, and Close turns it off again when nothing else reads the log.
func TestAuditSetting(t *testing.T) {
	airtest.RequireRoot(t)
	if err := Available(); err != nil {
		airtest.SkipOrFail(t, "landlock audit records cannot be read here: %v", err)
	}
	st, err := getStatus()
	if err != nil {
		t.Fatal(err)
	}
	if st.Enabled != 0 {
		t.Skipf("kernel audit is already enabled (%d): Start changes nothing to check", st.Enabled)
	}
	if n, err := otherReaders(); err != nil || n > 0 {
		t.Skipf("another audit log reader is active (%d, %v): Close would rightly leave audit on", n, err)
	}
	if c, err := Start(Options{NoEnable: true}); !errors.Is(err, ErrAuditDisabled) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("Start(NoEnable) = %v, want ErrAuditDisabled", err)
	}
	enabled := func() uint32 {
		t.Helper()
		st, err := getStatus()
		if err != nil {
			t.Fatal(err)
		}
		return st.Enabled
	}
	if got := enabled(); got != 0 {
		t.Fatalf("after Start(NoEnable) audit enabled = %d, want 0", got)
	}
	c, err := Start(Options{})
	if err != nil {
		t.Fatalf("Start() = %v", err)
	}
	if got := enabled(); got != 1 {
		c.Close()
		t.Fatalf("after Start() audit enabled = %d, want 1", got)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close() = %v, want nil", err)
	}
	if got := enabled(); got != 0 {
		t.Errorf("after Close() audit enabled = %d, want 0 (restored)", got)
	}
}

// TestAvailableRootless checks that an unprivileged caller learns why
// denials cannot be reported (CI runs it under setpriv).
func TestAvailableRootless(t *testing.T) {
	airtest.RequireNonRoot(t)
	err := Available()
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Available() = %v, want an error wrapping ErrUnavailable", err)
	}
	t.Logf("Available() = %v", err)
	if c, err := Start(Options{}); !errors.Is(err, ErrUnavailable) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("Start() = %v, want an error wrapping ErrUnavailable", err)
	}
}
