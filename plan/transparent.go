package plan

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Transparent egress: a program that knows nothing of proxies (a Go
// binary with its own transport, Node's fetch, a raw socket) reaches a
// granted name:port by name. The sandbox's resolver asks airlock's DNS on
// its loopback, which answers granted names with synthetic addresses
// (egress.SyntheticPrefix) and every other name with NXDOMAIN; connect(2)
// goes to the supervisor (seccomp user notification), which connects the
// program's own socket, still inside the empty network namespace, to the
// proxy's tunnel listener when net_hosts grants the name (or address) and
// port, and lets the kernel carry out every other connect, which can only
// reach the sandbox's own loopback.
const (
	transparentResolv   = "# airlock: names resolve through airlock's DNS on the sandbox's loopback: names in net_hosts only, to addresses airlock maps back.\nnameserver 127.0.0.1\noptions ndots:1 timeout:2 attempts:2\n"
	transparentNSSwitch = "passwd: files\ngroup: files\nhosts: files dns\n"
	plainResolv         = "# airlock: there is no DNS inside the sandbox; HTTP_PROXY, HTTPS_PROXY and ALL_PROXY resolve names outside.\n"
	plainNSSwitch       = "passwd: files\ngroup: files\nhosts: files\n"
	connectNotifyWhy    = "answered by the supervisor: a granted name or address outside is connected through airlock's proxy; the sandbox's own loopback and unix sockets are the kernel's to connect, in a network namespace that has nothing else"
)

// withTransparentEgress turns transparent egress on for a plan whose
// proxy is on: the DNS files and connect(2) to the supervisor.
func withTransparentEgress(pl *Plan) {
	pl.Transparent = true
	setResolver(pl, transparentResolv, transparentNSSwitch)
	for i := range pl.Seccomp.Syscalls {
		if sc := &pl.Seccomp.Syscalls[i]; sc.Name == "connect" {
			sc.Why, sc.Rules = connectNotifyWhy, []SyscallRule{{Action: ActNotify}}
		}
	}
}

// WithoutTransparentEgress turns transparent egress off, for a backend
// that cannot broker connects in a network namespace of the sandbox's own
// (OCI runtimes, gVisor, no namespaces): connect(2) is as in
// DefaultSeccomp and there is no DNS inside; the proxy variables remain.
func WithoutTransparentEgress(pl *Plan) {
	if !pl.Transparent {
		return
	}
	pl.Transparent = false
	setResolver(pl, plainResolv, plainNSSwitch)
	var def Syscall
	for _, sc := range DefaultSeccomp().Syscalls {
		if sc.Name == "connect" {
			def = sc
		}
	}
	for i := range pl.Seccomp.Syscalls {
		if sc := &pl.Seccomp.Syscalls[i]; sc.Name == "connect" {
			sc.Why, sc.Rules = def.Why, def.Rules
		}
	}
}

// WithoutTransparentEgressCopy returns pl, or when pl has transparent
// egress a deep copy of it without (WithoutTransparentEgress): for code
// that must not change its caller's plan.
func WithoutTransparentEgressCopy(pl *Plan) (*Plan, error) {
	if !pl.Transparent {
		return pl, nil
	}
	raw, err := json.Marshal(pl)
	if err != nil {
		return nil, fmt.Errorf("copy plan: %w", err)
	}
	var cp Plan
	if err := json.Unmarshal(raw, &cp); err != nil {
		return nil, fmt.Errorf("copy plan: %w", err)
	}
	WithoutTransparentEgress(&cp)
	return &cp, nil
}

func setResolver(pl *Plan, resolv, nsswitch string) {
	for i := range pl.Mounts {
		m := &pl.Mounts[i]
		if m.Kind != KindFile {
			continue
		}
		switch m.Target {
		case "/etc/resolv.conf":
			m.Data = resolv
		case "/etc/nsswitch.conf":
			m.Data = nsswitch
		}
	}
}

// CAVars are the variables common TLS clients read their trusted roots
// from; a plan with a trust bundle (withCABundle) points each at
// CABundlePath.
var CAVars = []string{"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "PIP_CERT", "GIT_SSL_CAINFO"}

// withCABundle adds the trust bundle pem at CABundlePath (read-only under
// /etc, which Landlock lets the sandbox read) and points CAVars at it,
// replacing what the policy's env set for them.
func withCABundle(pl *Plan, pem []byte) {
	pl.Mounts = append(pl.Mounts, Mount{Kind: KindFile, Target: CABundlePath, Data: string(pem), Origin: OriginSandbox})
	env := pl.Env[:0]
	for _, e := range pl.Env {
		name, _, _ := strings.Cut(e, "=")
		if !slices.Contains(CAVars, name) {
			env = append(env, e)
		}
	}
	for _, v := range CAVars {
		env = append(env, v+"="+CABundlePath)
	}
	pl.Env = env
}
