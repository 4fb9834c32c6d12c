package plan_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/plan"
	"github.com/airlock-sandbox/airlock/policy"
)

// fakeHost is a Debian-like merged-/usr host.
type fakeHost struct{ env map[string]string }

func (fakeHost) Lstat(p string) (bool, bool, string, error) {
	links := map[string]string{"/bin": "usr/bin", "/sbin": "usr/sbin", "/lib": "usr/lib", "/lib64": "usr/lib64", "/etc/localtime": "/usr/share/zoneinfo/Etc/UTC"}
	if l, ok := links[p]; ok {
		return true, false, l, nil
	}
	switch p {
	case "/usr/lib", "/usr/lib64", "/usr/local/lib", "/usr/share/zoneinfo", "/usr/share/ca-certificates", "/etc/ssl":
		return true, true, "", nil
	case "/etc/ld.so.cache":
		return true, false, "", nil
	}
	return false, false, "", nil
}

func (fakeHost) LookTool(name string) (string, string, error) {
	switch name {
	case "python3", "/usr/bin/python3":
		return "/usr/bin/python3", "/usr/bin/python3.11", nil
	case "sh":
		return "/usr/bin/sh", "/usr/bin/dash", nil
	}
	return "", "", errors.New("not found")
}

func (fakeHost) Loader() []string { return []string{"/lib64/ld-linux-x86-64.so.2"} }

func (h fakeHost) Env(n string) (string, bool) { v, ok := h.env[n]; return v, ok }

func mustPolicy(t *testing.T, s policy.Spec) *policy.Policy {
	t.Helper()
	p, err := policy.New(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCompileGolden(t *testing.T) {
	p := mustPolicy(t, policy.Spec{
		FSRead: []string{"/data"}, FSWrite: []string{"/data/out"}, NetHosts: []string{"pypi.org", "*.pythonhosted.org:443"},
		AllowedTools: []string{"python3"}, Env: []string{"LANG", "MPLBACKEND=Agg", "SECRET_NOT_SET"},
	})
	pl, err := plan.Compile(p, plan.Request{Argv: []string{"sh", "-c", "python3 job.py"}, CommandIsGranted: true}, fakeHost{env: map[string]string{"LANG": "C.UTF-8", "AWS_SECRET": "x"}})
	if err != nil {
		t.Fatal(err)
	}
	js, err := json.MarshalIndent(pl, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	airtest.Golden(t, "plan.json", js)
	airtest.Golden(t, "explain.txt", []byte(pl.String()))
	if strings.Contains(string(js), "AWS_SECRET") {
		t.Error("a host variable that was not granted reached the plan")
	}
}

func TestCompileRefusals(t *testing.T) {
	p := mustPolicy(t, policy.Spec{FSWrite: []string{"/work"}})
	tests := []struct {
		name string
		req  plan.Request
	}{
		{"no-command", plan.Request{}},
		{"command-not-allowed", plan.Request{Argv: []string{"python3"}}},
		{"tool-not-found", plan.Request{Argv: []string{"nosuchtool"}, CommandIsGranted: true}},
		{"cwd-outside-grants", plan.Request{Argv: []string{"sh"}, CommandIsGranted: true, Cwd: "/root"}},
		{"cwd-workshop", plan.Request{Argv: []string{"sh"}, CommandIsGranted: true, Cwd: "/workshop"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if pl, err := plan.Compile(p, tt.req, fakeHost{}); err == nil {
				t.Fatalf("Compile(%+v) = %+v, want an error", tt.req, pl)
			}
		})
	}
}

func TestCompileNoNetworkNoProxy(t *testing.T) {
	pl, err := plan.Compile(policy.Default(), plan.Request{Argv: []string{"sh"}, CommandIsGranted: true}, fakeHost{})
	if err != nil {
		t.Fatal(err)
	}
	if pl.Proxy {
		t.Fatalf("default policy: proxy=%v, want no way out", pl.Proxy)
	}
	for _, e := range pl.Env {
		if strings.HasPrefix(strings.ToUpper(e), "HTTP_PROXY=") {
			t.Fatalf("proxy variables set without net_hosts: %s", e)
		}
	}
	for _, m := range pl.Mounts {
		if m.Target == "/usr/bin" || strings.HasPrefix(m.Source, "/root") || strings.HasPrefix(m.Source, "/home") {
			t.Fatalf("the base mounts %+v", m)
		}
		if m.Writable && m.Kind == plan.KindBind && !strings.HasPrefix(m.Target, "/dev/") {
			t.Fatalf("a writable bind without fs_write: %+v", m)
		}
	}
}
