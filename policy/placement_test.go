package policy_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/policy"
)

// TestPlacement: HOST:INSIDE places a grant inside the sandbox: the host
// path is granted as a plain entry would be (and checked against a
// ceiling as one), the place is canonical, and the view the sandbox gets
// has every grant and every path inside one at its place.
func TestPlacement(t *testing.T) {
	p := mustParse(t, "version: 1\nfs_read: [./data:/data]\nfs_write: [./proj:/workspace/, /srv/out]\nfs_protect: [./proj/deploy.sh]\nfs_deny: [./proj/.env]\n")
	if got := p.FSWrite(); len(got) != 2 || got[0] != "/base/proj" {
		t.Errorf("FSWrite = %q, want the host paths", got)
	}
	if p.Inside("/base/proj/src/a.go") != "/workspace/src/a.go" || p.Inside("/srv/out/x") != "/srv/out/x" {
		t.Errorf("Inside = %q, %q", p.Inside("/base/proj/src/a.go"), p.Inside("/srv/out/x"))
	}
	if h, ok := p.HostOf("/workspace/src"); !ok || h != "/base/proj/src" {
		t.Errorf("HostOf(/workspace/src) = %q %v", h, ok)
	}
	if _, ok := p.HostOf("/workspaces"); ok {
		t.Errorf("HostOf(/workspaces) found a host path: a place is a folder, not a prefix")
	}
	v := p.View()
	if !v.CanWrite("/workspace/x") || v.CanWrite("/base/proj/x") || v.CanRead("/base/data/x") || !v.CanRead("/data/x") {
		t.Errorf("the view's grants: write /workspace %v, /base/proj %v; read /base/data %v, /data %v",
			v.CanWrite("/workspace/x"), v.CanWrite("/base/proj/x"), v.CanRead("/base/data/x"), v.CanRead("/data/x"))
	}
	if v.CanWrite("/workspace/deploy.sh") || v.CanRead("/workspace/.env") {
		t.Errorf("fs_protect and fs_deny did not follow the grant to its place")
	}
	if err := p.Within(mustParse(t, "version: 1\nfs_write: [/base/proj, /srv/out]\nfs_read: [/base/data]\n")); err != nil {
		t.Errorf("a ceiling of the host paths: %v", err)
	}
	if err := p.Within(mustParse(t, "version: 1\nfs_write: [/workspace, /srv/out]\nfs_read: [/data]\n")); err == nil {
		t.Errorf("a ceiling of the places admitted the host paths")
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	back, err := policy.Parse(b, policy.ParseOptions{})
	if err != nil || !policy.Equal(back, p) {
		t.Errorf("round trip of %s: %v", b, err)
	}
	if policy.Equal(p, mustParse(t, "version: 1\nfs_read: [./data]\nfs_write: [./proj, /srv/out]\nfs_protect: [./proj/deploy.sh]\nfs_deny: [./proj/.env]\n")) {
		t.Errorf("placed and plain grants are Equal")
	}

	for _, tt := range []struct{ in, want string }{
		{"fs_write: [./p:/]", "cannot be placed at /"},
		{"fs_write: [./p:/tmp]", "cannot be placed at /tmp"},
		{"fs_write: [./p:/usr/local/x]", "inside /usr"},
		{"fs_write: [./p:/etc]", "inside /etc"},
		{"fs_write: [./p:/proc/1]", "inside /proc"},
		{"fs_write: [./p:/lib64]", "inside /lib64"},
		{"fs_write: [./p:/work/../etc]", `".." segment`},
		{"fs_write: [./p:/w, ./q:/w]", "overlap inside the sandbox"},
		{"fs_write: [./p:/w, ./q:/w/sub]", "overlap inside the sandbox"},
		{"fs_write: [./p:/w/sub, ./q:/w]", "overlap inside the sandbox"},
		{"fs_write: [./p:/home/x]\nfs_read: [/home/x/y]", "overlap inside the sandbox"},
		{"fs_write: [./p:/w]\nfs_read: [./p:/v]", "is already placed at"},
		{"fs_write: [/proc:/w]", "/proc"},
	} {
		_, err := policy.Parse([]byte("version: 1\n"+tt.in+"\n"), policy.ParseOptions{BaseDir: "/base"})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: %v, want an error containing %q", tt.in, err, tt.want)
		}
	}
	// Nested as on the host: a plain grant below a placed one appears
	// below its place.
	n := mustParse(t, "version: 1\nfs_read: [./p:/w]\nfs_write: [./p/out]\n")
	if got := n.View().FSWrite(); len(got) != 1 || got[0] != "/w/out" {
		t.Errorf("nested grant's view = %q, want /w/out", got)
	}
	if c := mustParse(t, "version: 1\nfs_read: [\"/srv/a:/b:/data\"]\n"); c.FSRead()[0] != "/srv/a:/b" || c.Inside("/srv/a:/b") != "/data" {
		t.Errorf("a host path with :/ placed: %q at %q", c.FSRead(), c.Inside("/srv/a:/b"))
	}
	if q, err := policy.Default().With(policy.Overrides{FSWrite: []string{"proj:/workspace"}}, "/home/u"); err != nil || q.Inside("/home/u/proj") != "/workspace" {
		t.Errorf("--fs-write proj:/workspace: %v", err)
	}
}
