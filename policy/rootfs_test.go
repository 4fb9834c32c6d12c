package policy_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/policy"
)

// TestRootfs: the environment key takes one folder, canonicalized like a
// grant (relative to the policy file's folder); / and anything that is not
// one string are refused with the line, and a flag cannot replace the
// file's environment with another. It survives a JSON round trip.
func TestRootfs(t *testing.T) {
	for _, tt := range []struct{ in, want, err string }{
		{"version: 1\nrootfs: /srv/envs/debian/\n", "/srv/envs/debian", ""},
		{"version: 1\nrootfs: envs/../envs/debian\n", "/base/envs/debian", ""},
		{"version: 1\n", "", ""},
		{"version: 1\nrootfs: /\n", "", "2:9: rootfs \"/\": / is the host's own root"},
		{"version: 1\nrootfs: /a/../..\n", "", "/ is the host's own root"},
		{"version: 1\nrootfs: [/a]\n", "", "2:9: rootfs is one string (a folder), got a list"},
		{"version: 1\nrootfs: 7\n", "", "rootfs is one string (a folder), got the number 7: quote it"},
		{"version: 1\nrootfs: ~/env\n", "", "~ is not expanded"},
	} {
		p, err := policy.Parse([]byte(tt.in), policy.ParseOptions{BaseDir: "/base"})
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("Parse(%q) = %v, want an error containing %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("Parse(%q): %v", tt.in, err)
			continue
		}
		if p.Rootfs() != tt.want {
			t.Errorf("Parse(%q).Rootfs() = %q, want %q", tt.in, p.Rootfs(), tt.want)
		}
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		back, err := policy.Parse(b, policy.ParseOptions{})
		if err != nil || !policy.Equal(back, p) {
			t.Errorf("round trip of %s: %v, equal %v", b, err, policy.Equal(back, p))
		}
	}

	p := mustParse(t, "version: 1\nrootfs: /srv/a\n")
	if _, err := p.With(policy.Overrides{Rootfs: "/srv/b"}, "/"); err == nil || !strings.Contains(err.Error(), `--rootfs "/srv/b": the policy already runs in the environment /srv/a`) {
		t.Errorf("--rootfs over another rootfs: %v", err)
	}
	if q, err := p.With(policy.Overrides{Rootfs: "/srv/a"}, "/"); err != nil || q.Rootfs() != "/srv/a" {
		t.Errorf("--rootfs naming the same: %v", err)
	}
	if q, err := policy.Default().With(policy.Overrides{Rootfs: "env"}, "/work"); err != nil || q.Rootfs() != "/work/env" {
		t.Errorf("--rootfs env from /work: %v %q", err, q.Rootfs())
	}
	if policy.Equal(p, mustParse(t, "version: 1\n")) {
		t.Errorf("policies with and without an environment are Equal")
	}
}
