package sandbox

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/airlock-sandbox/airlock/egress"
)

// systemBundles are where hosts keep their trusted roots (Debian and its
// kin, then Fedora and its kin); the first that exists is the base of the
// sandbox's bundle when the proxy terminates TLS.
var systemBundles = []string{"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem"}

// maxBundle bounds the trust bundle read from the host.
const maxBundle = 8 << 20

// credentials reads the policy's credentials on the supervisor's side and
// makes the run's CA, before anything starts: a credential that cannot be
// read refuses the run. It returns nil, nil for a policy without
// credentials.
func (cfg Config) credentials() ([]egress.Credential, *egress.CA, error) {
	pcs := cfg.Policy.Credentials()
	if len(pcs) == 0 {
		return nil, nil, nil
	}
	lookup := cfg.LookupEnv
	if lookup == nil {
		lookup = os.LookupEnv
	}
	var creds []egress.Credential
	var hosts []string
	for _, c := range pcs {
		v, ok := lookup(c.Env)
		if !ok || v == "" {
			return nil, nil, fmt.Errorf("credentials: %s for %s comes from the environment variable %s, which is not set where airlock runs (or is empty): export it for airlock; it never enters the sandbox", c.Header, c.Host, c.Env)
		}
		if strings.ContainsAny(v, "\r\n\x00") {
			return nil, nil, fmt.Errorf("credentials: the value of %s (%s for %s) holds a line break or NUL, which no header may carry", c.Env, c.Header, c.Host)
		}
		creds = append(creds, egress.Credential{Host: c.Host, Header: c.Header, Value: v})
		hosts = append(hosts, c.Host)
	}
	ca, err := egress.NewCA(hosts)
	if err != nil {
		return nil, nil, fmt.Errorf("credentials: %w", err)
	}
	return creds, ca, nil
}

// trustBundle returns the plan.Target's CABundle for ca: the roots the
// sandbox would have trusted without it (trustBase), then the CA.
func trustBundle(ca *egress.CA) func(env []string) ([]byte, error) {
	return func(env []string) ([]byte, error) {
		base, err := trustBase(env)
		if err != nil {
			return nil, err
		}
		return append(append(base, '\n'), ca.CertPEM()...), nil
	}
}

// trustBase reads the roots the sandbox would have trusted without the
// CA: the file the policy's SSL_CERT_FILE names (grants appear at their
// host paths), else the host's system bundle, else none.
func trustBase(env []string) ([]byte, error) {
	paths := systemBundles
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "SSL_CERT_FILE="); ok && v != "" {
			paths = []string{v}
		}
	}
	for _, p := range paths {
		f, err := os.Open(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("credentials: read the trusted roots %s: %w", p, err)
		}
		defer f.Close()
		b, err := io.ReadAll(io.LimitReader(f, maxBundle+1))
		switch {
		case err != nil:
			return nil, fmt.Errorf("credentials: read the trusted roots %s: %w", p, err)
		case len(b) > maxBundle:
			return nil, fmt.Errorf("credentials: the trusted roots %s are larger than %d MiB", p, maxBundle>>20)
		}
		return b, nil
	}
	return nil, nil
}
