package policy_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/policy"
)

// TestCredentials: credentials are read in both forms, normalized, and
// survive the canonical JSON; every entry that could leak the secret or
// that names nothing reachable is refused with the reason.
func TestCredentials(t *testing.T) {
	p, err := policy.Parse([]byte(`version: 1
net_hosts: [api.example.com, "*.other.test:8443"]
credentials:
  - {host: API.Example.com., header: authorization, env: EXAMPLE_TOKEN}
  - "x.other.test:x-api-key=OTHER_KEY"
`), policy.ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := []policy.Credential{{Host: "api.example.com", Header: "Authorization", Env: "EXAMPLE_TOKEN"}, {Host: "x.other.test", Header: "X-Api-Key", Env: "OTHER_KEY"}}
	if got := p.Credentials(); len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("Credentials() = %+v, want %+v", got, want)
	}
	js, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	back, err := policy.Parse(js, policy.ParseOptions{})
	if err != nil || !policy.Equal(p, back) {
		t.Fatalf("the canonical JSON does not parse back equal: %v\n%s", err, js)
	}
	if c := p.CredentialFor("api.example.com"); len(c) != 1 || c[0].Env != "EXAMPLE_TOKEN" {
		t.Errorf("CredentialFor = %+v", c)
	}

	for name, tc := range map[string]struct{ spec policy.Spec }{
		"wildcard host":      {policy.Spec{NetHosts: []string{"*.example.com"}, Credentials: []policy.Credential{{Host: "*.example.com", Header: "Authorization", Env: "T"}}}},
		"address host":       {policy.Spec{NetHosts: []string{"10.0.0.1:443"}, Credentials: []policy.Credential{{Host: "10.0.0.1", Header: "Authorization", Env: "T"}}}},
		"not granted":        {policy.Spec{NetHosts: []string{"api.example.com"}, Credentials: []policy.Credential{{Host: "evil.example", Header: "Authorization", Env: "T"}}}},
		"routing header":     {policy.Spec{NetHosts: []string{"api.example.com"}, Credentials: []policy.Credential{{Host: "api.example.com", Header: "host", Env: "T"}}}},
		"framing header":     {policy.Spec{NetHosts: []string{"api.example.com"}, Credentials: []policy.Credential{{Host: "api.example.com", Header: "Transfer-Encoding", Env: "T"}}}},
		"bad header":         {policy.Spec{NetHosts: []string{"api.example.com"}, Credentials: []policy.Credential{{Host: "api.example.com", Header: "X Key", Env: "T"}}}},
		"bad env":            {policy.Spec{NetHosts: []string{"api.example.com"}, Credentials: []policy.Credential{{Host: "api.example.com", Header: "Authorization", Env: "1T"}}}},
		"env also granted":   {policy.Spec{NetHosts: []string{"api.example.com"}, Env: []string{"T"}, Credentials: []policy.Credential{{Host: "api.example.com", Header: "Authorization", Env: "T"}}}},
		"two for one header": {policy.Spec{NetHosts: []string{"api.example.com"}, Credentials: []policy.Credential{{Host: "api.example.com", Header: "Authorization", Env: "T"}, {Host: "api.example.com", Header: "authorization", Env: "U"}}}},
		"empty":              {policy.Spec{NetHosts: []string{"api.example.com"}, Credentials: []policy.Credential{{}}}},
	} {
		if _, err := policy.New(tc.spec); err == nil {
			t.Errorf("%s: accepted", name)
		} else if !strings.Contains(err.Error(), "credentials") {
			t.Errorf("%s: the error does not name credentials: %v", name, err)
		}
	}
	// A flag may not pass the credential's variable into the sandbox.
	base, err := policy.New(policy.Spec{NetHosts: []string{"api.example.com"}, Credentials: []policy.Credential{{Host: "api.example.com", Header: "Authorization", Env: "T"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := base.With(policy.Overrides{Env: []string{"T"}}, ""); err == nil {
		t.Error("--env of a credential's variable was accepted")
	}
	if p, err := base.With(policy.Overrides{NetHosts: []string{"b.test"}, Credentials: []string{"b.test:X-Key=B"}}, ""); err != nil || len(p.Credentials()) != 2 {
		t.Errorf("--credential: %v %+v", err, p)
	}
	for _, bad := range []string{"b.test", "b.test:X-Key", "b.test=B", ":X=B"} {
		if _, err := base.With(policy.Overrides{NetHosts: []string{"b.test"}, Credentials: []string{bad}}, ""); err == nil || !strings.Contains(err.Error(), "--credential") {
			t.Errorf("--credential %q: %v", bad, err)
		}
	}
	// YAML mistakes.
	for _, in := range []string{
		"version: 1\nnet_hosts: [a.test]\ncredentials: a.test:X=Y\n",
		"version: 1\nnet_hosts: [a.test]\ncredentials: [{host: a.test, header: X}]\n",
		"version: 1\nnet_hosts: [a.test]\ncredentials: [{host: a.test, header: X, env: Y, value: secret}]\n",
		"version: 1\nnet_hosts: [a.test]\ncredentials: [[a.test]]\n",
	} {
		if _, err := policy.Parse([]byte(in), policy.ParseOptions{}); err == nil {
			t.Errorf("accepted:\n%s", in)
		}
	}
}

// TestCredentialsWithinCeiling: a tenant's policy (airlock serve, MCP) may
// use only the credentials its ceiling lists exactly. Otherwise a client
// could name any of the server's own environment variables
// (AWS_SECRET_ACCESS_KEY) as a credential for a host the ceiling lets it
// reach and read the secret off that host.
func TestCredentialsWithinCeiling(t *testing.T) {
	ceiling, err := policy.New(policy.Spec{NetHosts: []string{"*.example.com"},
		Credentials: []policy.Credential{{Host: "api.example.com", Header: "Authorization", Env: "API_TOKEN"}}})
	if err != nil {
		t.Fatal(err)
	}
	ok, err := policy.New(policy.Spec{NetHosts: []string{"api.example.com"},
		Credentials: []policy.Credential{{Host: "api.example.com", Header: "Authorization", Env: "API_TOKEN"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := ok.Within(ceiling); err != nil {
		t.Errorf("the ceiling's own credential: %v", err)
	}
	for name, c := range map[string]policy.Credential{
		"another variable": {Host: "api.example.com", Header: "Authorization", Env: "AWS_SECRET_ACCESS_KEY"},
		"another host":     {Host: "attacker.example.com", Header: "Authorization", Env: "API_TOKEN"},
		"another header":   {Host: "api.example.com", Header: "X-Leak", Env: "API_TOKEN"},
	} {
		p, err := policy.New(policy.Spec{NetHosts: []string{"*.example.com"}, Credentials: []policy.Credential{c}})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := p.Within(ceiling); err == nil || !strings.Contains(err.Error(), "credentials") {
			t.Errorf("%s: Within = %v, want credentials beyond the ceiling", name, err)
		}
	}
}
