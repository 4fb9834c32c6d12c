package doctor_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/internal/doctor"
	"github.com/airlock-sandbox/airlock/internal/enforce/cgroup"
)

// goodHost is a root host like the CI machine: everything present.
func goodHost() doctor.Facts {
	return doctor.Facts{
		Kernel:      "6.18.4",
		Root:        true,
		LandlockABI: 7,
		Cgroup: cgroup.Host{
			Version:     cgroup.Hybrid,
			Controllers: map[string]string{"memory": "/sys/fs/cgroup/memory", "pids": "/sys/fs/cgroup/pids"},
			Unified:     "/sys/fs/cgroup/unified",
			Self:        map[string]string{"/sys/fs/cgroup/memory": "/sys/fs/cgroup/memory", "/sys/fs/cgroup/pids": "/sys/fs/cgroup/pids"},
		},
		CgroupWritable: map[string]error{"memory": nil, "pids": nil},
		Audit:          doctor.Audit{Enabled: 1},
	}
}

func verdicts(r doctor.Report) map[string]doctor.Verdict {
	m := map[string]doctor.Verdict{}
	for _, l := range r.Layers {
		m[l.Name] = l.Verdict
	}
	return m
}

func failed(r doctor.Report) []string {
	var out []string
	for _, c := range r.Checks {
		if !c.OK {
			out = append(out, c.Name)
		}
	}
	return out
}

// TestEvaluate asserts the verdict and exit status on hosts that lack one
// feature each.
func TestEvaluate(t *testing.T) {
	errNo := errors.New("operation not permitted")
	errNoRecords := errors.New("fsaudit: landlock ABI 3: denial records need ABI 7 (Linux 6.15 with CONFIG_AUDIT)")
	tests := []struct {
		name       string
		edit       func(*doctor.Facts)
		wantExit   int
		wantFailed []string
		want       map[string]doctor.Verdict // layers to compare; others unchecked
		wantRefuse string                    // substring of some Refuses entry, "" for none at all
	}{
		{"all-present", func(*doctor.Facts) {}, 0, nil,
			map[string]doctor.Verdict{"namespaces": doctor.Enforced, "landlock": doctor.Enforced, "fs_denials": doctor.Enforced}, ""},
		{"no-landlock", func(f *doctor.Facts) {
			f.LandlockABI, f.LandlockErr = 0, errors.New("landlock: query ABI version: operation not supported")
			f.Audit.Collector = errNoRecords
		}, 1,
			[]string{"landlock", "audit"},
			map[string]doctor.Verdict{"landlock": doctor.Refused, "namespaces": doctor.Enforced, "fs_denials": doctor.Unavailable}, "allow_downgrade lists landlock"},
		// A container's default seccomp profile refuses pidfd_getfd: a
		// failed check, while a default run (the namespace backend, which
		// does not use the broker) is still fully enforced.
		{"no-broker", func(f *doctor.Facts) {
			f.ConnectBroker = errors.New("pidfd_getfd(2) is refused (operation not permitted)")
		}, 0,
			[]string{"broker"}, map[string]doctor.Verdict{"namespaces": doctor.Enforced}, ""},
		{"no-userns", func(f *doctor.Facts) { f.UserNS, f.UnprivilegedUserNS = errNo, errNo }, 1, []string{"userns"},
			map[string]doctor.Verdict{"namespaces": doctor.Refused, "landlock": doctor.Enforced}, "(unless allow_downgrade lists namespaces)"},
		{"no-userns-old-landlock", func(f *doctor.Facts) {
			f.UserNS, f.UnprivilegedUserNS, f.LandlockABI, f.Audit.Collector = errNo, errNo, 5, errNoRecords
		}, 1, []string{"userns", "audit"},
			map[string]doctor.Verdict{"namespaces": doctor.Refused}, "every run: namespaces"},
		{"no-unprivileged-userns-as-root", func(f *doctor.Facts) { f.UnprivilegedUserNS = errNo }, 0, nil,
			map[string]doctor.Verdict{"namespaces": doctor.Enforced}, ""},
		{"no-seccomp", func(f *doctor.Facts) { f.Seccomp = errNo }, 1, []string{"seccomp"},
			map[string]doctor.Verdict{"seccomp": doctor.Refused}, "every run: seccomp"},
		{"old-landlock", func(f *doctor.Facts) { f.LandlockABI, f.Audit.Collector = 3, errNoRecords }, 0, []string{"audit"},
			map[string]doctor.Verdict{"landlock": doctor.Enforced, "fs_denials": doctor.Unavailable}, ""},
		{"rootless-v1", func(f *doctor.Facts) {
			f.Root, f.IDMap, f.Audit.Collector = false, errNo, errNoRecords
			f.CgroupWritable = map[string]error{"memory": errNo, "pids": errNo}
		}, 1, []string{"cgroup", "audit"},
			map[string]doctor.Verdict{"max_memory": doctor.Refused, "max_pids": doctor.Refused, "fs_denials": doctor.Unavailable}, "allow_downgrade lists max_memory"},
		{"no-pids-controller", func(f *doctor.Facts) { delete(f.Cgroup.Controllers, "pids") }, 1, []string{"cgroup"},
			map[string]doctor.Verdict{"max_memory": doctor.Enforced, "max_pids": doctor.Refused}, "max_pids"},
		{"no-cgroup-at-all", func(f *doctor.Facts) {
			f.Cgroup, f.CgroupErr = cgroup.Host{}, errors.New("cgroup: detect: no such file")
		}, 1, []string{"cgroup"},
			map[string]doctor.Verdict{"max_memory": doctor.Refused, "max_pids": doctor.Refused}, "max_memory"},
		{"audit-off-but-collectable", func(f *doctor.Facts) { f.Audit.Enabled = 0 }, 0, nil,
			map[string]doctor.Verdict{"fs_denials": doctor.Enforced}, ""},
		{"no-fs-records", func(f *doctor.Facts) { f.Audit.Collector = errNoRecords }, 0, []string{"audit"},
			map[string]doctor.Verdict{"fs_denials": doctor.Unavailable}, ""},
		{"no-idmap", func(f *doctor.Facts) { f.IDMap = errors.New("idmap: invalid argument") }, 0, []string{"idmap"},
			map[string]doctor.Verdict{"namespaces": doctor.Enforced}, "fs_read or fs_write grants"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := goodHost()
			tt.edit(&f)
			r := doctor.Evaluate(f)
			if got := r.ExitCode(); got != tt.wantExit {
				t.Errorf("Evaluate(%s).ExitCode() = %d, want %d\nlayers: %+v", tt.name, got, tt.wantExit, r.Layers)
			}
			if got := failed(r); !slices.Equal(got, tt.wantFailed) {
				t.Errorf("Evaluate(%s) failed checks = %v, want %v", tt.name, got, tt.wantFailed)
			}
			got := verdicts(r)
			for name, want := range tt.want {
				if got[name] != want {
					t.Errorf("Evaluate(%s) layer %s = %q, want %q", tt.name, name, got[name], want)
				}
			}
			switch {
			case tt.wantRefuse == "" && len(r.Refuses) > 0:
				t.Errorf("Evaluate(%s).Refuses = %q, want none", tt.name, r.Refuses)
			case tt.wantRefuse != "" && !slices.ContainsFunc(r.Refuses, func(s string) bool { return strings.Contains(s, tt.wantRefuse) }):
				t.Errorf("Evaluate(%s).Refuses = %q, want one containing %q", tt.name, r.Refuses, tt.wantRefuse)
			}
		})
	}
}

// TestRunUsesProbes drives Run through fake probes only: no real probe may
// run, and their results must reach the report.
func TestRunUsesProbes(t *testing.T) {
	var writable []string
	p := doctor.Probes{
		Kernel:             func() (string, error) { return "5.10.0", nil },
		Root:               func() bool { return false },
		ContainerRoot:      func() bool { return false },
		Proc:               func() error { t.Error("Proc probed without user namespaces"); return nil },
		UserNS:             func() error { return errors.New("clone: operation not permitted") },
		UnprivilegedUserNS: func() error { t.Error("UnprivilegedUserNS probed for a non-root caller"); return nil },
		AppArmor:           func() doctor.AppArmor { return doctor.AppArmor{Restrict: "0"} },
		Landlock:           func() (int, error) { return 0, errors.New("landlock: not enabled at boot") },
		Seccomp:            func() error { return nil },
		Cgroup: func() (cgroup.Host, error) {
			return cgroup.Host{Version: cgroup.V2, Unified: "/sys/fs/cgroup",
				Controllers: map[string]string{"memory": "/sys/fs/cgroup", "pids": "/sys/fs/cgroup"},
				Self:        map[string]string{"/sys/fs/cgroup": "/sys/fs/cgroup/user.slice"}}, nil
		},
		CgroupWritable: func(dir string) error { writable = append(writable, dir); return nil },
		Audit:          func() doctor.Audit { return doctor.Audit{Err: errors.New("netlink: permission denied")} },
		IDMap:          func() error { t.Error("IDMap probed for a non-root caller"); return nil },
		GVisor:         func() doctor.GVisor { return doctor.GVisor{Bin: "/opt/fake/runsc", Platform: "systrap"} },
		MicroVM: func() doctor.MicroVM {
			return doctor.MicroVM{QEMU: "/opt/fake/qemu", Kernel: "6.1.0-fake", KVM: errors.New("no /dev/kvm")}
		},
	}
	r := doctor.Run(p)
	if r.ExitCode() != 1 {
		t.Errorf("Run(fake host without userns and Landlock).ExitCode() = %d, want 1", r.ExitCode())
	}
	if want := []string{"/sys/fs/cgroup/user.slice", "/sys/fs/cgroup/user.slice"}; !slices.Equal(writable, want) {
		t.Errorf("CgroupWritable called with %q, want %q", writable, want)
	}
	v := verdicts(r)
	if v["namespaces"] != doctor.Refused || v["landlock"] != doctor.Refused || v["max_memory"] != doctor.Enforced {
		t.Errorf("Run(fake host) verdicts = %v, want namespaces and landlock refused, max_memory enforced", v)
	}
	if c := r.Checks[3]; c.Name != "apparmor" || !strings.Contains(c.Detail, "is 0") {
		t.Errorf("checks[3] = %+v, want the apparmor check reporting the sysctl at 0", c)
	}
	if !slices.ContainsFunc(r.Checks, func(c doctor.Check) bool {
		return c.Name == "gvisor" && c.OK && strings.Contains(c.Detail, "/opt/fake/runsc") && strings.Contains(c.Detail, "systrap")
	}) {
		t.Errorf("doctor does not report the gvisor probe's runsc and platform: %+v", r.Checks)
	}
	if !slices.ContainsFunc(r.Checks, func(c doctor.Check) bool {
		return c.Name == "microvm" && c.OK && strings.Contains(c.Detail, "6.1.0-fake") && strings.Contains(c.Detail, "TCG") && strings.Contains(c.Detail, "KVM is not usable: no /dev/kvm")
	}) {
		t.Errorf("doctor does not report the microvm probe's kernel and KVM: %+v", r.Checks)
	}
	if r.Checks[0].Detail != "Linux 5.10.0" {
		t.Errorf("kernel check detail = %q, want %q", r.Checks[0].Detail, "Linux 5.10.0")
	}
}

// TestReportGolden pins the text and JSON forms of some fake hosts.
func TestReportGolden(t *testing.T) {
	tests := []struct {
		name string
		edit func(*doctor.Facts)
	}{
		{"good", func(*doctor.Facts) {}},
		{"rootless-no-landlock", func(f *doctor.Facts) {
			f.Root = false
			f.UnprivilegedUserNS = nil
			f.LandlockABI, f.LandlockErr = 0, errors.New("landlock: query ABI version: operation not supported")
			f.CgroupWritable["memory"] = errors.New("/sys/fs/cgroup/memory: permission denied")
			f.CgroupWritable["pids"] = errors.New("/sys/fs/cgroup/pids: permission denied")
			f.Audit = doctor.Audit{Err: errors.New("AUDIT_GET: operation not permitted"),
				Collector: errors.New("fsaudit: landlock ABI 0: denial records need ABI 7 (Linux 6.15 with CONFIG_AUDIT)")}
		}},
		// Root in a podman container: uid 0 without CAP_SYS_ADMIN on the
		// host, a /proc whose masks refuse the sandbox its own, no cgroups.
		{"container-root", func(f *doctor.Facts) {
			f.Root, f.ContainerRoot = false, true
			f.Proc = errors.New("mounts cover parts of /proc (/proc/acpi, /proc/keys, /proc/timer_list, /proc/bus, …), as a container's masks do, so the kernel refuses a new procfs in a user namespace")
			f.Cgroup, f.CgroupErr = cgroup.Host{}, errors.New("cgroup: no cgroup hierarchy is mounted")
			f.CgroupWritable = nil
			f.Audit = doctor.Audit{Err: errors.New("AUDIT_GET: operation not permitted"),
				Collector: errors.New("fsaudit: needs CAP_AUDIT_READ in the initial user namespace")}
		}},
		// Ubuntu 24.04, unprivileged, airlock from go install and no
		// profile: the namespaces are created but cannot mount.
		{"ubuntu-apparmor", func(f *doctor.Facts) {
			f.Root, f.IDMap = false, nil
			f.UnprivilegedUserNS = nil
			f.Proc = errors.New("a new procfs in a user namespace was refused: exit status 1: unshare: write failed /proc/self/uid_map: Operation not permitted")
			f.AppArmor = doctor.AppArmor{Restrict: "1", Label: "unconfined", Exe: "/home/alice/go/bin/airlock",
				Mount: errors.New("a mount in a new user namespace failed: fork/exec /usr/bin/true: operation not permitted")}
			f.Audit = doctor.Audit{Err: errors.New("AUDIT_GET: operation not permitted"),
				Collector: errors.New("fsaudit: needs CAP_AUDIT_READ in the initial user namespace")}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := goodHost()
			tt.edit(&f)
			r := doctor.Evaluate(f)
			var text bytes.Buffer
			if err := r.WriteText(&text); err != nil {
				t.Fatal(err)
			}
			airtest.Golden(t, "doctor-"+tt.name+".txt", text.Bytes())
			js, err := json.MarshalIndent(r, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			airtest.Golden(t, "doctor-"+tt.name+".json", append(js, '\n'))
		})
	}
}
