package doctor_test

import (
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/internal/doctor"
	"github.com/airlock-sandbox/airlock/internal/enforce/cgroup"
)

// TestRealHost probes this machine (root, Landlock ABI 7 or later, cgroup
// v1 or hybrid, as in CI) and checks that a default run is fully enforced.
func TestRealHost(t *testing.T) {
	airtest.RequireRoot(t)
	airtest.RequireUserNS(t)
	airtest.RequireLandlockABI(t, 7)
	airtest.RequireCgroupV1(t, "memory")
	airtest.RequireCgroupV1(t, "pids")

	f := doctor.Gather(doctor.Probes{})
	if !f.Root || f.UserNS != nil || f.LandlockABI < 7 || f.Seccomp != nil || f.CgroupErr != nil {
		t.Errorf("Gather() = root %v, userns %v, landlock %d, seccomp %v, cgroup %v; want root, userns, Landlock >= 7, seccomp, cgroup",
			f.Root, f.UserNS, f.LandlockABI, f.Seccomp, f.CgroupErr)
	}
	if v := f.Cgroup.Version; v != cgroup.V1 && v != cgroup.Hybrid {
		t.Errorf("Gather().Cgroup.Version = %q, want v1 or hybrid", v)
	}
	if f.IDMap != nil {
		t.Errorf("Gather().IDMap = %v, want nil (root on Linux 6.18 idmaps tmpfs and ext4)", f.IDMap)
	}
	if f.Audit.Err != nil || f.Audit.Collector != nil {
		t.Errorf("Gather().Audit: status error %v, collector %v; want both nil as root on Landlock ABI 7", f.Audit.Err, f.Audit.Collector)
	}
	t.Logf("kernel audit enabled=%d, daemon pid %d", f.Audit.Enabled, f.Audit.DaemonPID)

	r := doctor.Evaluate(f)
	if r.ExitCode() != 0 {
		t.Errorf("Evaluate(this host).ExitCode() = 1, want 0; refuses %q", r.Refuses)
	}
	for _, l := range r.Layers {
		if l.Verdict != doctor.Enforced {
			t.Errorf("layer %s = %s (%s), want enforced", l.Name, l.Verdict, l.Detail)
		}
	}
	for _, c := range r.Checks {
		if !c.OK {
			t.Errorf("check %s failed: %s", c.Name, c.Detail)
		}
		if c.Name == "landlock" && !strings.HasPrefix(c.Detail, "ABI ") {
			t.Errorf("landlock check detail = %q, want it to start with ABI", c.Detail)
		}
	}
}

// TestNamespaceMount runs the AppArmor probe's mount on this host, where
// AppArmor restricts nothing: it must not fail where namespaces work.
func TestNamespaceMount(t *testing.T) {
	airtest.RequireUserNS(t)
	if err := doctor.ProbeNamespaceMount(); err != nil {
		t.Errorf("ProbeNamespaceMount() = %v, want nil", err)
	}
}
