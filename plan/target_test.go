package plan

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/policy"
)

// TestCompileTarget: the plan compiled for each backend is the namespaces
// backend's plan with that backend's steps, made by Compile: transparent
// egress off for oci, gvisor and microvm; writes in place for gvisor and
// microvm; the landlock plan (withoutNamespaces) with its scratch; and a
// trust bundle, last, for a policy with credentials when the target has
// one. An unknown backend is refused.
func TestCompileTarget(t *testing.T) {
	p := mustPolicyIn(t, policy.Spec{FSRead: []string{"/data"}, FSWrite: []string{"/data/out"}, NetHosts: []string{"example.com"},
		AllowDowngrade: []string{"staged_writes"}})
	compile := func(t *testing.T, p *policy.Policy, tg Target) *Plan {
		t.Helper()
		pl, err := Compile(p, Request{Argv: []string{"sh"}, CommandIsGranted: true, Target: tg}, hostStub{})
		if err != nil {
			t.Fatalf("Compile for %+v: %v", tg, err)
		}
		return pl
	}
	base := compile(t, p, Target{})
	if !base.Transparent || WritesFoldersInPlace(base) {
		t.Fatalf("the namespaces plan: transparent %v, writes in place %v", base.Transparent, WritesFoldersInPlace(base))
	}
	if got := compile(t, p, Target{Backend: BackendNamespaces}); !reflect.DeepEqual(got, base) {
		t.Errorf("Target{Backend: namespaces} differs from the zero Target")
	}
	for _, tt := range []struct {
		be   Backend
		edit func(*Plan)
	}{
		{BackendOCI, WithoutTransparentEgress},
		{BackendGVisor, func(pl *Plan) { WithoutTransparentEgress(pl); writesInPlace(pl) }},
		{BackendMicroVM, func(pl *Plan) { WithoutTransparentEgress(pl); writesInPlace(pl) }},
		{BackendLandlock, func(pl *Plan) {
			if err := withoutNamespaces(pl, p, "/tmp/airlock-scratch-1"); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(string(tt.be), func(t *testing.T) {
			want := compile(t, p, Target{})
			tt.edit(want)
			got := compile(t, p, Target{Backend: tt.be, Scratch: "/tmp/airlock-scratch-1"})
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Compile for %s:\n%s\nwant\n%s", tt.be, got, want)
			}
			if got.Transparent {
				t.Errorf("%s: transparent egress left on", tt.be)
			}
			if tt.be != BackendOCI && !WritesFoldersInPlace(got) {
				t.Errorf("%s: the fs_write folder is not written in place", tt.be)
			}
		})
	}

	withCreds := mustPolicyIn(t, policy.Spec{NetHosts: []string{"example.com"}, Env: []string{"SSL_CERT_FILE=/etc/my-roots.pem"},
		Credentials: []policy.Credential{{Host: "example.com", Header: "Authorization", Env: "TOKEN"}}})
	var asked []string
	bundle := func(env []string) ([]byte, error) {
		asked = slices.Clone(env)
		return []byte("ROOTS\nCA\n"), nil
	}
	for _, be := range []Backend{BackendNamespaces, BackendOCI, BackendGVisor, BackendMicroVM} {
		asked = nil
		pl := compile(t, withCreds, Target{Backend: be, CABundle: bundle})
		if !slices.Contains(asked, "SSL_CERT_FILE=/etc/my-roots.pem") {
			t.Errorf("%s: the bundle was asked for with env %q, want the policy's SSL_CERT_FILE in it", be, asked)
		}
		last := pl.Mounts[len(pl.Mounts)-1]
		if last.Kind != KindFile || last.Target != CABundlePath || last.Data != "ROOTS\nCA\n" {
			t.Errorf("%s: last mount = %+v, want the trust bundle at %s", be, last, CABundlePath)
		}
		for _, v := range CAVars {
			if !slices.Contains(pl.Env, v+"="+CABundlePath) {
				t.Errorf("%s: env lacks %s=%s: %q", be, v, CABundlePath, pl.Env)
			}
		}
		if slices.Contains(pl.Env, "SSL_CERT_FILE=/etc/my-roots.pem") {
			t.Errorf("%s: the policy's SSL_CERT_FILE is left beside the bundle", be)
		}
	}
	if pl := compile(t, withCreds, Target{}); slices.ContainsFunc(pl.Mounts, func(m Mount) bool { return m.Target == CABundlePath }) {
		t.Error("a target without CABundle got a trust bundle")
	}
	if pl := compile(t, p, Target{CABundle: bundle}); slices.ContainsFunc(pl.Mounts, func(m Mount) bool { return m.Target == CABundlePath }) {
		t.Error("a policy without credentials got a trust bundle")
	}

	if _, err := Compile(p, Request{Argv: []string{"sh"}, CommandIsGranted: true, Target: Target{Backend: "firecracker"}}, hostStub{}); err == nil || !strings.Contains(err.Error(), "firecracker") {
		t.Errorf("Compile for an unknown backend: %v, want a refusal naming it", err)
	}
	if _, err := Compile(p, Request{Argv: []string{"sh"}, CommandIsGranted: true, Target: Target{Backend: BackendLandlock, Scratch: "tmp/x"}}, hostStub{}); err == nil {
		t.Error("Compile for landlock with a relative scratch folder = nil error")
	}
}
