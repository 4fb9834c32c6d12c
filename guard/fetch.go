package guard

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/hostspec"
)

// Fetch sends req through Config.Transport when net_hosts grants its host
// and port by name. Only http and https URLs without userinfo are fetched;
// an IP-literal host must be listed exactly. req.Host must be empty or name
// the URL's host. req itself is never sent or modified: Fetch checks and
// sends a clone whose URL host is the canonical form it checked, so the
// transport dials exactly the admitted host.
//
// Redirects are not followed (the transport's RoundTrip does not follow
// them); a caller that wants the Location fetches it through the guard
// again, which checks it like any other URL. The response body counts
// against max_output_bytes as it is read; when the budget runs out the
// body's Read returns the *budget.ExhaustedError.
func (g *Guard) Fetch(req *http.Request) (*http.Response, error) {
	if req == nil || req.URL == nil {
		return nil, errors.New("guard: fetch: request or its URL is nil: build the request with http.NewRequest")
	}
	if err := g.charge("fetch", req.URL.Host); err != nil {
		return nil, err
	}
	out := req.Clone(req.Context()) // check and send the same copy
	target, err := g.admitFetch(out)
	if err != nil {
		return nil, err
	}
	if g.transport == nil {
		return nil, errors.New("guard: fetch " + target + ": no network is configured: set Config.Transport")
	}
	g.allow(audit.LayerNet, "fetch", target, policy.NetHosts, "")
	resp, err := g.transport.RoundTrip(out)
	if err != nil {
		return nil, fmt.Errorf("guard: fetch %s: %w", target, err)
	}
	if resp == nil {
		return nil, errors.New("guard: fetch " + target + ": transport returned neither a response nor an error: fix Config.Transport")
	}
	if resp.Body == nil {
		resp.Body = http.NoBody
	}
	resp.Body = &meteredBody{body: resp.Body, g: g, target: target}
	return resp, nil
}

// admitFetch canonicalizes out's URL in place and checks it against
// net_hosts. It returns the canonical host:port.
func (g *Guard) admitFetch(out *http.Request) (string, error) {
	u := out.URL
	denyURL := func(reason, hint string) error {
		return g.deny(audit.LayerNet, &policy.DenyError{Cap: policy.NetHosts, Op: "fetch", Subject: u.Redacted(), Reason: reason}, hint)
	}
	u.Scheme = strings.ToLower(u.Scheme)
	var port uint16
	switch u.Scheme {
	case "http":
		port = 80
	case "https":
		port = 443
	default:
		return "", denyURL("only http and https URLs can be fetched", "fetch an http or https URL")
	}
	if u.User != nil {
		return "", denyURL("the URL carries userinfo, which can disguise the real host", "remove the user:password@ part from the URL")
	}
	if u.Opaque != "" {
		return "", denyURL("opaque URLs are not fetched", "give the URL as scheme://host/path")
	}
	if p := u.Port(); p != "" {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return "", denyURL("port "+strconv.Quote(p)+" is not a valid port", "give a port from 1 to 65535")
		}
		port = uint16(n)
	}
	host, err := hostspec.NormalizeHost(u.Hostname())
	if err != nil {
		return "", denyURL("host "+strconv.Quote(u.Hostname())+": "+err.Error(), "give a valid host name or IP address")
	}
	target := joinHostPort(host, strconv.Itoa(int(port)))
	if out.Host != "" {
		h := &url.URL{Host: out.Host}
		hh, herr := hostspec.NormalizeHost(h.Hostname())
		hp := h.Port()
		if hp == "" {
			hp = strconv.Itoa(int(port))
		}
		if herr != nil || hh != host || hp != strconv.Itoa(int(port)) {
			de := &policy.DenyError{Cap: policy.NetHosts, Op: "fetch", Subject: target,
				Reason: "the Host header " + strconv.Quote(out.Host) + " does not name the URL's host"}
			return "", g.deny(audit.LayerNet, de, "leave the Host header empty or set it to the URL's host")
		}
	}
	if err := g.policy.CheckHost(host, port); err != nil {
		var de *policy.DenyError
		if !errors.As(err, &de) {
			return "", err
		}
		de.Op = "fetch"
		return "", g.deny(audit.LayerNet, de, "")
	}
	// Send exactly what was checked: the canonical host, the explicit port
	// if there was one, and a Host header taken from the URL.
	if u.Port() != "" {
		u.Host = target
	} else {
		u.Host = joinHostPort(host, "")
	}
	out.Host = ""
	return target, nil
}

// joinHostPort brackets IPv6 literals; an empty port gives the host alone.
func joinHostPort(host, port string) string {
	if strings.IndexByte(host, ':') >= 0 {
		host = "[" + host + "]"
	}
	if port == "" {
		return host
	}
	return host + ":" + port
}

// meteredBody charges every byte read from a response body to
// max_output_bytes before handing it to the caller.
type meteredBody struct {
	body   io.ReadCloser
	g      *Guard
	target string
}

func (b *meteredBody) Read(p []byte) (int, error) {
	if err := b.g.meter.Check(); err != nil {
		return 0, b.g.exhausted("fetch", b.target, err)
	}
	n, err := b.body.Read(p)
	if n > 0 {
		got, cerr := b.g.meter.ChargeOutput(int64(n))
		if cerr != nil {
			return int(got), b.g.exhausted("fetch", b.target, cerr)
		}
	}
	return n, err
}

func (b *meteredBody) Close() error { return b.body.Close() }
