//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/internal/doctor"
	"github.com/airlock-sandbox/airlock/internal/enforce/cgroup"
)

// TestDoctorThisHost runs `airlock doctor --json` in-process on this
// machine (root, Landlock, cgroup v1 memory and pids, as in CI): a default
// run is fully enforced, so the status is 0.
func TestDoctorThisHost(t *testing.T) {
	airtest.RequireRoot(t)
	airtest.RequireUserNS(t)
	airtest.RequireLandlockABI(t, 1)
	airtest.RequireCgroupV1(t, "memory")
	airtest.RequireCgroupV1(t, "pids")
	var stdout, stderr bytes.Buffer
	if code := cmdDoctor([]string{"--json"}, &stdout, &stderr); code != 0 {
		t.Errorf("airlock doctor --json: exit %d, want 0\n%s%s", code, stdout.String(), stderr.String())
	}
	var rep doctor.Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("airlock doctor --json: %v\n%s", err, stdout.String())
	}
	if !rep.Enforceable || len(rep.Checks) == 0 || len(rep.Layers) == 0 {
		t.Errorf("airlock doctor --json = %+v, want an enforceable report with checks and layers", rep)
	}
}

// TestDoctorExitStatus fakes hosts and checks the status and the text.
func TestDoctorExitStatus(t *testing.T) {
	good := func() doctor.Probes {
		return doctor.Probes{
			Kernel:             func() (string, error) { return "6.18.0", nil },
			Root:               func() bool { return true },
			UserNS:             func() error { return nil },
			UnprivilegedUserNS: func() error { return nil },
			Landlock:           func() (int, error) { return 7, nil },
			Seccomp:            func() error { return nil },
			Cgroup: func() (cgroup.Host, error) {
				return cgroup.Host{Version: cgroup.V1,
					Controllers: map[string]string{"memory": "/cg/memory", "pids": "/cg/pids"},
					Self:        map[string]string{"/cg/memory": "/cg/memory", "/cg/pids": "/cg/pids"}}, nil
			},
			CgroupWritable: func(string) error { return nil },
			Audit:          func() doctor.Audit { return doctor.Audit{Enabled: 1} },
			IDMap:          func() error { return nil },
		}
	}
	tests := []struct {
		name     string
		edit     func(*doctor.Probes)
		args     []string
		wantCode int
		wantOut  string
	}{
		{"good", func(*doctor.Probes) {}, nil, 0, "verdict: a default run is fully enforced here"},
		{"no-landlock", func(p *doctor.Probes) {
			p.Landlock = func() (int, error) { return 0, errors.New("landlock: not enabled at boot") }
		}, nil, 1, "landlock       REFUSED (exit 125), unless allow_downgrade: landlock"},
		{"no-userns-json", func(p *doctor.Probes) {
			p.UserNS = func() error { return errors.New("clone: operation not permitted") }
		}, []string{"--json"}, 1, `"enforceable": false`},
		{"stray-argument", func(*doctor.Probes) {}, []string{"now"}, 2, ""},
		// What the host says is printed escaped, text and JSON alike.
		{"hostile-host-text", func(p *doctor.Probes) {
			p.Kernel = func() (string, error) { return "6.18\x1b]0;pwned\x07\u202e", nil }
			p.Landlock = func() (int, error) { return 0, errors.New("landlock: \x1b[2K\rforged\u009b") }
		}, nil, 1, `Linux 6.18\x1b]0;pwned\x07\u202e`},
		{"hostile-host-json", func(p *doctor.Probes) {
			p.Kernel = func() (string, error) { return "6.18\x1b]0;pwned\x07\u202e\u009b", nil }
		}, []string{"--json"}, 0, `"detail": "Linux 6.18\u001b]0;pwned\u0007\u202e\u009b"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := good()
			tt.edit(&p)
			var stdout, stderr bytes.Buffer
			code := doctorWith(p, tt.args, &stdout, &stderr)
			if code != tt.wantCode {
				t.Errorf("airlock doctor %q: exit %d, want %d\n%s%s", tt.args, code, tt.wantCode, stdout.String(), stderr.String())
			}
			if !strings.Contains(stdout.String(), tt.wantOut) {
				t.Errorf("airlock doctor %q: output lacks %q:\n%s", tt.args, tt.wantOut, stdout.String())
			}
			airtest.CheckNoControls(t, stdout.String())
		})
	}
}
