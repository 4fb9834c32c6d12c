package policy

import (
	"fmt"
	"net/netip"
	"net/textproto"
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock/policy/hostspec"
)

// Credential is a secret the egress proxy adds to requests for one host,
// so the sandbox never holds it: on every HTTP request to Host (plain, or
// HTTPS that the proxy then terminates with a per-run CA trusted inside),
// header Header is set to the value of the host-side environment variable
// Env, replacing whatever the client sent; no other host ever gets it.
// The written form is HOST:HEADER=ENV (the --credential flag).
type Credential struct {
	Host   string `json:"host"`   // an exact host name, normalized; granted by net_hosts
	Header string `json:"header"` // canonical header name (textproto.CanonicalMIMEHeaderKey)
	Env    string `json:"env"`    // the supervisor's environment variable holding the value
}

// String returns the written form, HOST:HEADER=ENV.
func (c Credential) String() string { return c.Host + ":" + c.Header + "=" + c.Env }

// Credentials returns the credentials the proxy adds.
func (p *Policy) Credentials() []Credential { return slices.Clone(p.credentials) }

// CredentialFor returns the credentials for host (normalized).
func (p *Policy) CredentialFor(host string) []Credential {
	var out []Credential
	for _, c := range p.credentials {
		if c.Host == host {
			out = append(out, c)
		}
	}
	return out
}

// credentialHeaders are headers a credential may never set: they frame
// the message or route it, so setting them would let a secret change
// where or how a request goes, not only who it is from.
var credentialHeaders = []string{"Host", "Content-Length", "Transfer-Encoding", "Connection", "Keep-Alive", "Te", "Trailer", "Upgrade",
	"Proxy-Connection", "Proxy-Authorization", "Proxy-Authenticate", "Expect", "Content-Encoding", "Accept-Encoding"}

// parseCredential parses HOST:HEADER=ENV and checks each part on its own.
func parseCredential(s string) (Credential, error) {
	host, rest, ok := strings.Cut(s, ":")
	header, env, ok2 := strings.Cut(rest, "=")
	if !ok || !ok2 || host == "" || header == "" || env == "" {
		return Credential{}, fmt.Errorf("want HOST:HEADER=ENV, such as api.example.com:Authorization=EXAMPLE_TOKEN")
	}
	n, err := hostspec.NormalizeHost(host)
	if err != nil {
		return Credential{}, fmt.Errorf("host %q: %v", host, err)
	}
	if _, err := netip.ParseAddr(n); err == nil || strings.Contains(n, "*") {
		return Credential{}, fmt.Errorf("host %q: a credential names one host exactly, not an address or a wildcard", host)
	}
	for _, c := range []byte(header) {
		if !isTokenChar(c) {
			return Credential{}, fmt.Errorf("header %q is not a header name (letters, digits and !#$%%&'*+-.^_`|~)", header)
		}
	}
	canon := textproto.CanonicalMIMEHeaderKey(header)
	if slices.Contains(credentialHeaders, canon) {
		return Credential{}, fmt.Errorf("header %s frames or routes the request and cannot carry a credential: use the header the API reads, such as Authorization or X-Api-Key", canon)
	}
	if !envName(env) {
		return Credential{}, fmt.Errorf("%q is not a variable name: letters, digits and _, not starting with a digit", env)
	}
	return Credential{Host: n, Header: canon, Env: env}, nil
}

// isTokenChar reports whether c may appear in a header name (RFC 9110
// token).
func isTokenChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// credentials checks the credential entries against the policy's other
// grants: the host must be reachable by net_hosts (by name, on some port),
// the variable must not also be passed into the sandbox, and one host gets
// one value per header.
func (v *validator) credentials(p *Policy, items []item) {
	for _, c := range p.credentials { // the base policy's, against env added since
		if slices.ContainsFunc(p.env, func(e EnvVar) bool { return e.Name == c.Env }) {
			v.errorf(0, 0, "env %s holds the credential for %s, which must never reach the sandbox's environment: do not grant it in env", c.Env, c.Host)
		}
	}
	for _, it := range items {
		if !v.str(it) {
			continue
		}
		c, err := parseCredential(it.val)
		if err != nil {
			v.itemf(it, "%v", err)
			continue
		}
		granted := false
		for _, h := range p.netHosts {
			granted = granted || h.MatchName(c.Host)
		}
		if !granted {
			v.itemf(it, "%s is not granted by net_hosts, so no request to it could carry the credential: add %q to net_hosts", c.Host, c.Host)
			continue
		}
		if slices.ContainsFunc(p.env, func(e EnvVar) bool { return e.Name == c.Env }) {
			v.itemf(it, "%s is also in env, which would put the secret in the sandbox's environment: remove it from env (the proxy reads it on the host)", c.Env)
			continue
		}
		if slices.ContainsFunc(p.credentials, func(o Credential) bool { return o.Host == c.Host && o.Header == c.Header }) {
			v.itemf(it, "%s already has a credential for %s: keep one", c.Host, c.Header)
			continue
		}
		p.credentials = append(p.credentials, c)
	}
}
