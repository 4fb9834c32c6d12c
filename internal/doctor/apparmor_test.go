package doctor_test

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/doctor"
)

// fakeProc writes a procfs tree under a temporary directory: files maps a
// path below /proc to its contents; exe, when set, is /proc/self/exe's
// target.
func fakeProc(t *testing.T, files map[string]string, exe string) string {
	t.Helper()
	dir := t.TempDir()
	for name, text := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if exe != "" {
		if err := os.MkdirAll(filepath.Join(dir, "self"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(exe, filepath.Join(dir, "self/exe")); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const (
	sysctlFile = "sys/kernel/apparmor_restrict_unprivileged_userns"
	labelFile  = "self/attr/apparmor/current"
)

func TestReadAppArmor(t *testing.T) {
	tests := []struct {
		name      string
		files     map[string]string
		exe       string
		want      doctor.AppArmor // Err compared by presence
		wantError bool
	}{
		{"no-sysctl", map[string]string{labelFile: "unconfined\n"}, "", doctor.AppArmor{}, false},
		// The label is not read where nothing is restricted.
		{"sysctl-0", map[string]string{sysctlFile: "0\n", labelFile: "unconfined\n"}, "/usr/bin/airlock",
			doctor.AppArmor{Restrict: "0"}, false},
		{"restricted-unconfined", map[string]string{sysctlFile: "1\n", labelFile: "unconfined\n"}, "/home/alice/go/bin/airlock",
			doctor.AppArmor{Restrict: "1", Label: "unconfined", Exe: "/home/alice/go/bin/airlock"}, false},
		{"restricted-airlock-profile", map[string]string{sysctlFile: "1\n", labelFile: "airlock (unconfined)\n"}, "/usr/local/bin/airlock",
			doctor.AppArmor{Restrict: "1", Label: "airlock", Exe: "/usr/local/bin/airlock"}, false},
		// Before Linux 5.8 the label is only in attr/current.
		{"old-attr-interface", map[string]string{sysctlFile: "1\n", "self/attr/current": "airlock (enforce)\x00\n"}, "",
			doctor.AppArmor{Restrict: "1", Label: "airlock"}, false},
		{"label-unreadable", map[string]string{sysctlFile: "1\n"}, "/usr/bin/airlock",
			doctor.AppArmor{Restrict: "1", Exe: "/usr/bin/airlock"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := doctor.ReadAppArmor(fakeProc(t, tt.files, tt.exe))
			if (got.Err != nil) != tt.wantError {
				t.Errorf("ReadAppArmor(%s).Err = %v, want error: %v", tt.name, got.Err, tt.wantError)
			}
			got.Err = nil
			if got != tt.want {
				t.Errorf("ReadAppArmor(%s) = %+v, want %+v", tt.name, got, tt.want)
			}
		})
	}
}

func apparmorCheck(t *testing.T, r doctor.Report) doctor.Check {
	t.Helper()
	for _, c := range r.Checks {
		if c.Name == "apparmor" {
			return c
		}
	}
	t.Fatalf("no apparmor check in %+v", r.Checks)
	return doctor.Check{}
}

// TestEvaluateAppArmor reads fake procfs trees and checks what doctor says
// about an unprivileged caller on each.
func TestEvaluateAppArmor(t *testing.T) {
	errUserNS := errors.New("clone user, mount, pid, net, ipc, uts and cgroup namespaces: fork/exec /usr/bin/cat: operation not permitted")
	errMount := errors.New("a mount in a new user namespace failed: fork/exec /usr/bin/true: operation not permitted")
	fixes := []string{
		"sudo cp packaging/apparmor/airlock /etc/apparmor.d/airlock",
		"sudo apparmor_parser -r /etc/apparmor.d/airlock",
		"sudo sysctl kernel.apparmor_restrict_unprivileged_userns=0",
		"allow_downgrade: [namespaces]",
		"landlock backend",
	}
	tests := []struct {
		name      string
		files     map[string]string
		exe       string
		root      bool
		userns    error // the userns probe's result
		mount     error // the mount probe's result (probed only when restricted)
		wantOK    bool
		wantExit  int
		wantInfo  []string // substrings of the check's detail and consequence
		wantNoFix bool     // the consequence names no fix
	}{
		{name: "no-sysctl", wantOK: true, wantExit: 0, wantInfo: []string{"absent"}, wantNoFix: true},
		{name: "sysctl-0", files: map[string]string{sysctlFile: "0\n"}, wantOK: true, wantExit: 0,
			wantInfo: []string{"is 0"}, wantNoFix: true},
		{name: "restricted-unconfined-userns-fails", files: map[string]string{sysctlFile: "1\n", labelFile: "unconfined\n"},
			exe: "/usr/local/bin/airlock", userns: errUserNS, mount: errMount, wantOK: false, wantExit: 1,
			wantInfo: append([]string{"without an AppArmor profile", "/usr/local/bin/airlock"}, fixes...)},
		// Ubuntu creates the namespaces and withholds their capabilities:
		// the userns probe passes and only the mount probe fails.
		{name: "restricted-unconfined-mount-fails", files: map[string]string{sysctlFile: "1\n", labelFile: "unconfined\n"},
			exe: "/home/alice/go/bin/airlock", mount: errMount, wantOK: false, wantExit: 1,
			wantInfo: append([]string{"this binary is /home/alice/go/bin/airlock, so first edit its attachment", "so the sandbox's namespaces cannot be built"}, fixes...)},
		{name: "restricted-airlock-profile", files: map[string]string{sysctlFile: "1\n", labelFile: "airlock (unconfined)\n"},
			exe: "/usr/bin/airlock", wantOK: true, wantExit: 0,
			wantInfo: []string{`profile "airlock"`, "can mount"}, wantNoFix: true},
		{name: "restricted-other-profile-fails", files: map[string]string{sysctlFile: "1\n", labelFile: "snap.foo (enforce)\n"},
			userns: errUserNS, mount: errMount, wantOK: false, wantExit: 1,
			wantInfo: append([]string{`profile "snap.foo"`, "may lack the userns rule"}, fixes...)},
		{name: "restricted-root", files: map[string]string{sysctlFile: "1\n", labelFile: "unconfined\n"}, root: true,
			wantOK: true, wantExit: 0, wantInfo: []string{"root is exempt", "packaging/apparmor/README.md"}, wantNoFix: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := goodHost()
			f.Root, f.IDMap = tt.root, nil
			f.UserNS, f.UnprivilegedUserNS = tt.userns, tt.userns
			f.AppArmor = doctor.ReadAppArmor(fakeProc(t, tt.files, tt.exe))
			if f.AppArmor.Restrict == "1" {
				f.AppArmor.Mount = tt.mount
			}
			r := doctor.Evaluate(f)
			c := apparmorCheck(t, r)
			if c.OK != tt.wantOK {
				t.Errorf("Evaluate(%s) apparmor check OK = %v, want %v: %+v", tt.name, c.OK, tt.wantOK, c)
			}
			if got := r.ExitCode(); got != tt.wantExit {
				t.Errorf("Evaluate(%s).ExitCode() = %d, want %d; refuses %q", tt.name, got, tt.wantExit, r.Refuses)
			}
			text := c.Detail + "\n" + c.Consequence
			for _, s := range tt.wantInfo {
				if !strings.Contains(text, s) {
					t.Errorf("Evaluate(%s) apparmor check = %q, want it to contain %q", tt.name, text, s)
				}
			}
			if tt.wantNoFix && strings.Contains(c.Consequence, "sudo") {
				t.Errorf("Evaluate(%s) apparmor consequence = %q, want no fix", tt.name, c.Consequence)
			}
			v := verdicts(r)
			if tt.wantExit == 1 && v["namespaces"] != doctor.Refused {
				t.Errorf("Evaluate(%s) namespaces = %q, want refused", tt.name, v["namespaces"])
			}
			// Where AppArmor blocks, the proc probe (unshare(1)) meant nothing.
			if _, ok := v["proc"]; ok == (tt.wantExit == 1) {
				t.Errorf("Evaluate(%s) proc layer present = %v, want %v", tt.name, ok, tt.wantExit == 0)
			}
		})
	}
}

// TestAppArmorPathsMatchProfile checks that the paths doctor names are the
// ones the shipped profile attaches to.
func TestAppArmorPathsMatchProfile(t *testing.T) {
	b, err := os.ReadFile("../../packaging/apparmor/airlock")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^profile airlock (/\S*) flags=\(unconfined\) \{$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("packaging/apparmor/airlock: no line `profile airlock PATH flags=(unconfined) {`")
	}
	attach := string(m[1])
	var got []string
	if pre, rest, ok := strings.Cut(attach, "{"); ok {
		alts, post, _ := strings.Cut(rest, "}")
		for alt := range strings.SplitSeq(alts, ",") {
			got = append(got, pre+alt+post)
		}
	} else {
		got = []string{attach}
	}
	slices.Sort(got)
	want := slices.Sorted(slices.Values(doctor.AppArmorPaths))
	if !slices.Equal(got, want) {
		t.Errorf("profile attaches to %q (%s), doctor names %q", got, attach, want)
	}
}
