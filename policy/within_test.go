package policy_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/policy"
)

// ceilingText is an operator's ceiling used by the tests below.
const ceilingText = `version: 1
rootfs: /srv/envs/debian
fs_read: [/srv/data, /etc/ssl/certs]
fs_write: [/srv/work]
net_hosts: ["*.example.com:443", "pypi.org", 10.0.0.0/8:5432]
allowed_tools: [python3, sh, /opt/tools/run]
env: [LANG, TZ]
budget:
  max_wall: 10m
  max_output_bytes: 4MiB
  max_ops: 5000
  max_memory: 1GiB
  max_cpu: 5m
  max_pids: 128
  max_scratch: 256MiB
allow_downgrade: [fs_audit]
`

// excessNames returns "key entry" for each grant err names, failing the
// test when err is not a *CeilingError.
func excessNames(t *testing.T, err error) []string {
	t.Helper()
	if err == nil {
		return nil
	}
	var ce *policy.CeilingError
	if !errors.As(err, &ce) || !errors.Is(err, policy.ErrExceedsCeiling) {
		t.Fatalf("Within = %v, want a *CeilingError", err)
	}
	var out []string
	for _, x := range ce.Excess {
		if x.Reason == "" {
			t.Errorf("excess %s %q has no reason", x.Key, x.Entry)
		}
		out = append(out, x.Key+" "+x.Entry)
	}
	return out
}

func TestWithin(t *testing.T) {
	tests := []struct {
		name, policy string
		want         []string // "key entry" of each grant beyond the ceiling, in order
	}{
		{"empty", "version: 1\n", nil},
		{"read-inside-read", "version: 1\nfs_read: [/srv/data/q3.csv, /etc/ssl/certs]\n", nil},
		{"read-inside-write", "version: 1\nfs_read: [/srv/work/in]\n", nil},
		{"write-inside-write", "version: 1\nfs_write: [/srv/work, /srv/work/out]\n", nil},
		{"write-inside-read-only", "version: 1\nfs_write: [/srv/data]\n", []string{"fs_write /srv/data"}},
		{"read-prefix-not-child", "version: 1\nfs_read: [/srv/database]\n", []string{"fs_read /srv/database"}},
		{"read-dotdot", "version: 1\nfs_read: [/srv/data/../../etc/shadow]\n", []string{"fs_read /etc/shadow"}},
		{"read-parent", "version: 1\nfs_read: [/srv]\n", []string{"fs_read /srv"}},
		{"read-relative", "version: 1\nfs_read: [./data]\n", []string{"fs_read /base/data"}},
		{"host-inside", "version: 1\nnet_hosts: [api.example.com:443, \"*.a.example.com:443\", pypi.org:443, 10.1.2.3:5432]\n", nil},
		{"host-apex", "version: 1\nnet_hosts: [\"example.com:443\"]\n", []string{"net_hosts example.com:443"}},
		{"host-port", "version: 1\nnet_hosts: [api.example.com]\n", []string{"net_hosts api.example.com"}},
		{"host-cidr-port", "version: 1\nnet_hosts: [10.1.0.0/16]\n", []string{"net_hosts 10.1.0.0/16"}},
		{"host-case", "version: 1\nnet_hosts: [\"API.Example.COM.:443\", PyPI.org]\n", nil},
		{"tools", "version: 1\nallowed_tools: [python3, /opt/tools/run]\n", nil},
		{"tool-path-not-bare", "version: 1\nallowed_tools: [/usr/bin/python3]\n", []string{"allowed_tools /usr/bin/python3"}},
		{"tool-bare-not-path", "version: 1\nallowed_tools: [run]\n", []string{"allowed_tools run"}},
		{"env-value", "version: 1\nenv: [AWS_SECRET_ACCESS_KEY=fake, LANG]\n", nil},
		{"env-pass-through", "version: 1\nenv: [AWS_SECRET_ACCESS_KEY, TZ]\n", []string{"env AWS_SECRET_ACCESS_KEY"}},
		{"budget-at-ceiling", "version: 1\nbudget:\n  max_wall: 10m\n  max_memory: 1GiB\n", nil},
		{"budget-above", "version: 1\nbudget:\n  max_wall: 11m\n  max_pids: 129\n", []string{"budget.max_wall 11m", "budget.max_pids 129"}},
		{"downgrade", "version: 1\nallow_downgrade: [fs_audit, landlock]\n", []string{"allow_downgrade landlock"}},
		{"rootfs-the-ceilings", "version: 1\nrootfs: /srv/envs/debian\n", nil},
		{"rootfs-other", "version: 1\nrootfs: /srv/envs/../../etc\n", []string{"rootfs /etc"}},
		{"rootfs-inside-a-grant", "version: 1\nrootfs: /srv/data\n", []string{"rootfs /srv/data"}},
		{"every-key", "version: 1\nfs_read: [/root/.aws]\nfs_write: [/tmp/x]\nnet_hosts: [evil.test]\nallowed_tools: [curl]\nenv: [HOME]\nbudget:\n  max_ops: 5001\nallow_downgrade: [landlock]\n",
			[]string{"fs_read /root/.aws", "fs_write /tmp/x", "net_hosts evil.test", "allowed_tools curl", "env HOME", "budget.max_ops 5001", "allow_downgrade landlock"}},
	}
	ceiling := mustParse(t, ceilingText)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := mustParse(t, tt.policy).Within(ceiling)
			if got := excessNames(t, err); !slices.Equal(got, tt.want) {
				t.Errorf("Within = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestWithinHidesCeiling checks that reasons never quote the ceiling's
// own paths, hosts or tools: a tenant learns only about its own grants.
func TestWithinHidesCeiling(t *testing.T) {
	p := mustParse(t, "version: 1\nfs_read: [/root/.aws]\nfs_write: [/srv/data]\nnet_hosts: [evil.test]\nallowed_tools: [curl]\nenv: [HOME]\n")
	err := p.Within(mustParse(t, ceilingText))
	if err == nil {
		t.Fatal("Within = nil, want a *CeilingError")
	}
	for _, secret := range []string{"/srv/work", "example.com", "pypi", "/opt/tools", "python3", "LANG"} {
		if strings.Contains(err.Error(), secret) {
			t.Errorf("Within = %q, shows the ceiling's %q", err, secret)
		}
	}
}

// TestWithinEveryExtraGrant is the property: a policy is within itself,
// and one extra grant of any kind makes it exceed the old policy, naming
// exactly that grant.
func TestWithinEveryExtraGrant(t *testing.T) {
	base := mustParse(t, ceilingText)
	if err := base.Within(base); err != nil {
		t.Fatalf("a policy is not within itself: %v", err)
	}
	for _, tt := range []struct {
		name string
		o    policy.Overrides
		want string
	}{
		{"fs_read", policy.Overrides{FSRead: []string{"/srv/other"}}, "fs_read /srv/other"},
		{"fs_write", policy.Overrides{FSWrite: []string{"/srv/data/out"}}, "fs_write /srv/data/out"},
		{"net_hosts", policy.Overrides{NetHosts: []string{"example.com:443"}}, "net_hosts example.com:443"},
		{"allowed_tools", policy.Overrides{AllowedTools: []string{"/usr/bin/sh"}}, "allowed_tools /usr/bin/sh"},
		{"env", policy.Overrides{Env: []string{"HOME"}}, "env HOME"},
		{"allow_downgrade", policy.Overrides{AllowDowngrade: []string{"landlock"}}, "allow_downgrade landlock"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			wider, err := base.With(tt.o, "/")
			if err != nil {
				t.Fatal(err)
			}
			if got := excessNames(t, wider.Within(base)); !slices.Equal(got, []string{tt.want}) {
				t.Errorf("Within = %q, want [%q]", got, tt.want)
			}
			if err := base.Within(wider); err != nil {
				t.Errorf("the narrower policy is not within the wider one: %v", err)
			}
		})
	}
}

func TestWithinNil(t *testing.T) {
	var nilPolicy *policy.Policy
	if err := nilPolicy.Within(nil); err != nil {
		t.Errorf("nil.Within(nil) = %v, want nil (both are Default)", err)
	}
	got := excessNames(t, mustParse(t, "version: 1\nfs_read: [/srv]\n").Within(nil))
	if !slices.Equal(got, []string{"fs_read /srv"}) {
		t.Errorf("Within(nil) = %q, want the fs_read grant", got)
	}
}

// TestLowerDefaults checks that budgets a policy does not set fit a lower
// ceiling, and budgets it sets are still judged.
func TestLowerDefaults(t *testing.T) {
	ceiling := mustParse(t, "version: 1\nbudget:\n  max_wall: 10s\n  max_memory: 128MiB\n  max_pids: 1000\n")
	p := mustParse(t, "version: 1\nbudget:\n  max_memory: 256MiB\n")
	if got := excessNames(t, p.Within(ceiling)); !slices.Equal(got, []string{"budget.max_wall 30s", "budget.max_memory 256MiB", "budget.max_write 128MiB"}) {
		t.Errorf("Within before LowerDefaults = %q", got)
	}
	low := p.LowerDefaults(ceiling)
	if got := excessNames(t, low.Within(ceiling)); !slices.Equal(got, []string{"budget.max_memory 256MiB"}) {
		t.Errorf("Within after LowerDefaults = %q, want only the explicit max_memory", got)
	}
	if b := low.Budget(); b.Wall.String() != "10s" || b.Pids != 64 || b.Memory != 256<<20 {
		t.Errorf("LowerDefaults budget = %+v, want max_wall 10s, max_pids 64 kept, max_memory 256MiB kept", b)
	}
	if p.Budget().Wall.String() != "30s" {
		t.Errorf("LowerDefaults changed its receiver: %+v", p.Budget())
	}
}

func TestCeilingErrorMessage(t *testing.T) {
	p := mustParse(t, "version: 1\nfs_read: [/a, /b, /c, /d, /e, /f, /g]\n")
	err := p.Within(nil)
	msg := err.Error()
	if !strings.HasPrefix(msg, `policy: 7 grants exceed the ceiling: fs_read "/a": `) || !strings.HasSuffix(msg, "; and 2 more") {
		t.Errorf("Error() = %q", msg)
	}
	if got := excessNames(t, err); len(got) != 7 {
		t.Errorf("Excess = %q, want all 7", got)
	}
}

// FuzzWithin checks on any valid policy that it is within itself, that
// LowerDefaults against itself changes nothing, and that the policy of no
// grants fits it once its defaults are lowered.
func FuzzWithin(f *testing.F) {
	f.Add([]byte(ceilingText))
	f.Add([]byte(fullPolicy))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := policy.Parse(data, policy.ParseOptions{BaseDir: "/base"})
		if err != nil {
			return
		}
		if err := p.Within(p); err != nil {
			t.Fatalf("policy not within itself: %v\n%s", err, data)
		}
		if !policy.Equal(p.LowerDefaults(p), p) {
			t.Fatalf("LowerDefaults(p) changed p: %s", p.Summary())
		}
		// A policy of no grants, its defaults lowered, fits any ceiling.
		if err := policy.Default().LowerDefaults(p).Within(p); err != nil {
			t.Fatalf("Default().LowerDefaults(p) not within p: %v", err)
		}
	})
}

func TestWithinNarrowing(t *testing.T) {
	ceiling := mustParse(t, "version: 1\nfs_write: [/srv]\nfs_deny: [/srv/secrets]\nfs_protect: [/srv/app/deploy.sh]\nfs_unprotect: [/srv/.vscode]\n")
	tests := []struct {
		name, policy string
		want         []string
	}{
		{"inside", "version: 1\nfs_write: [/srv/app]\n", nil},
		{"grant-inside-ceiling-deny", "version: 1\nfs_read: [/srv/secrets/k]\n", []string{"fs_read/fs_write /srv/secrets/k"}},
		{"unprotect-allowed", "version: 1\nfs_write: [/srv]\nfs_unprotect: [/srv/.vscode]\n", nil},
		{"unprotect-not-allowed", "version: 1\nfs_write: [/srv]\nfs_unprotect: [/srv/.git/hooks]\n", []string{"fs_unprotect /srv/.git/hooks"}},
		{"own-deny-always-allowed", "version: 1\nfs_write: [/srv]\nfs_deny: [/srv/app]\n", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := excessNames(t, mustParse(t, tt.policy).Within(ceiling)); !slices.Equal(got, tt.want) {
				t.Errorf("Within = %q, want %q", got, tt.want)
			}
		})
	}
	// What the ceiling hides and protects inside the tenant's grants stays so.
	n := mustParse(t, "version: 1\nfs_write: [/srv]\n").Narrowed(ceiling)
	if !slices.Equal(n.FSDeny(), []string{"/srv/secrets"}) || !slices.Equal(n.FSProtect(), []string{"/srv/app/deploy.sh"}) {
		t.Errorf("Narrowed: fs_deny %q, fs_protect %q; want the ceiling's", n.FSDeny(), n.FSProtect())
	}
	if n := mustParse(t, "version: 1\nfs_read: [/srv/app]\n").Narrowed(ceiling); len(n.FSDeny()) != 0 || len(n.FSProtect()) != 0 {
		t.Errorf("Narrowed added entries outside the grants: %q %q", n.FSDeny(), n.FSProtect())
	}
}
