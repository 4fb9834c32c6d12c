package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// hostName is the name a sandbox reaches the host's loopback by.
const hostName = "host.airlock.internal"

// benchToken is the credential of the credential-terminated path.
const benchToken = "AIRLOCK_BENCH_TOKEN"

// ClientRow is one real client's per-request latency on one egress path
// against one upstream, one request after another or several at once.
type ClientRow struct {
	Client   string  `json:"client"`   // curl, urllib, node
	Upstream string  `json:"upstream"` // HTTP/1.1 (keeps connections alive) or HTTP/1.0
	Mode     string  `json:"mode"`     // sequential or concurrent
	Path     string  `json:"path"`     // see clientPaths
	MS       Summary `json:"ms"`       // milliseconds per request, every request of every round
	Failures int     `json:"failures"`
	Error    string  `json:"first_error,omitempty"`
}

// ClientsResult is the real-clients egress benchmark.
type ClientsResult struct {
	Requests int         `json:"requests"` // per row and round
	Workers  int         `json:"workers"`  // at once, in concurrent rows
	Rounds   int         `json:"rounds"`
	Rows     []ClientRow `json:"rows"`
}

// clientPaths are the ways a client reaches the upstream: on the host
// directly or through a bare relay (the baselines), and inside `airlock
// run` through the proxy (HTTP_PROXY: the pooled path), transparently (the
// proxy variables ignored: airlock's DNS and connect broker), through a
// CONNECT tunnel (HTTPS_PROXY, TLS end to end), and to a host with a
// credential (TLS terminated by the proxy, requests pooled upstream over
// its own TLS). The -tls baselines are for the last two.
var clientPaths = []struct {
	name         string
	tls, sandbox bool
}{
	{"direct", false, false}, {"relay", false, false}, {"proxy", false, true}, {"transparent", false, true},
	{"direct-tls", true, false}, {"relay-tls", true, false}, {"tunnel", true, true}, {"credential", true, true},
}

// clientUpstream is one python http.server and the relays in front of it.
type clientUpstream struct {
	proto       string
	tls         bool
	port        int
	proxyRelay  *relay // a proxy: curl -x, urllib's ProxyHandler
	transparent *relay // the server's stand-in: node's URL
}

// clientsBench measures curl, python3 urllib and node fetch against
// python http.server upstreams speaking HTTP/1.1 and HTTP/1.0, on every
// egress path and its baselines, n requests per row and round, one after
// another and w at once; rows run in an order rotated each round.
func clientsBench(ctx context.Context, airlock, work string, n, w, rounds int) (*ClientsResult, error) {
	for _, bin := range []string{"/usr/bin/python3", "/usr/bin/curl", "/usr/bin/node"} {
		if _, err := os.Stat(bin); err != nil {
			return nil, fmt.Errorf("the clients benchmark needs %s: %v", bin, err)
		}
	}
	dir := filepath.Join(work, "clients")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	certFile, keyFile, err := writeCert(dir)
	if err != nil {
		return nil, err
	}
	var ups []*clientUpstream
	defer func() {
		for _, u := range ups {
			u.proxyRelay.close()
			u.transparent.close()
		}
	}()
	for _, proto := range []string{"HTTP/1.1", "HTTP/1.0"} {
		for _, tls := range []bool{false, true} {
			cf, kf := "", ""
			if tls {
				cf, kf = certFile, keyFile
			}
			port, stop, err := startUpstream(ctx, proto, cf, kf)
			if err != nil {
				return nil, err
			}
			defer stop()
			u := &clientUpstream{proto: proto, tls: tls, port: port}
			addr := "127.0.0.1:" + strconv.Itoa(port)
			if u.proxyRelay, err = startRelay(addr, true); err != nil {
				return nil, err
			}
			if u.transparent, err = startRelay(addr, false); err != nil {
				return nil, err
			}
			ups = append(ups, u)
		}
	}

	type cell struct {
		row  *ClientRow
		argv []string
		env  []string
	}
	res := &ClientsResult{Requests: n, Workers: w, Rounds: rounds}
	var cells []cell
	for _, proto := range []string{"HTTP/1.1", "HTTP/1.0"} {
		for _, mode := range []string{"sequential", "concurrent"} {
			workers := 1
			if mode == "concurrent" {
				workers = w
			}
			for _, client := range []string{"curl", "urllib", "node"} {
				for _, p := range clientPaths {
					var u *clientUpstream
					for _, x := range ups {
						if x.proto == proto && x.tls == p.tls {
							u = x
						}
					}
					argv, env := clientCommand(client, p.name, p.sandbox, u, airlock, certFile, n, workers)
					if argv == nil {
						continue
					}
					res.Rows = append(res.Rows, ClientRow{Client: client, Upstream: proto, Mode: mode, Path: p.name})
					cells = append(cells, cell{argv: argv, env: env})
				}
			}
		}
	}
	for i := range cells {
		cells[i].row = &res.Rows[i]
	}
	ms := make([][]float64, len(cells))
	for r := range rounds {
		log.Printf("clients: round %d of %d, %d rows", r+1, rounds, len(cells))
		for k := range cells {
			i := (k + r*len(cells)/max(rounds, 1)) % len(cells)
			c := cells[i]
			out, stderr, err := runClient(ctx, c.argv, c.env)
			lat, fails, first := parseClientOutput(out)
			if err != nil && first == "" {
				first = err.Error() + ": " + lastLines(stderr)
			}
			if len(lat) < n && fails == 0 {
				fails = n - len(lat)
			}
			ms[i] = append(ms[i], lat...)
			c.row.Failures += fails
			if c.row.Error == "" {
				c.row.Error = first
			}
		}
	}
	for i, c := range cells {
		c.row.MS = summarize(ms[i])
		log.Printf("clients: %-6s %-8s %-10s %-11s median %7.2f ms, mean %7.2f ms, p99 %7.2f ms, failures %d %s",
			c.row.Client, c.row.Upstream, c.row.Mode, c.row.Path, c.row.MS.Median, c.row.MS.Mean, c.row.MS.P99, c.row.Failures, c.row.Error)
	}
	return res, nil
}

// clientCommand returns the command of one row, and the environment of
// what it starts, or nil for a row that cannot be made (node fetch
// ignores HTTP_PROXY, so it has no proxy row).
func clientCommand(client, path string, sandbox bool, u *clientUpstream, airlock, certFile string, n, w int) (argv, env []string) {
	scheme := "http"
	if u.tls {
		scheme = "https"
	}
	port := strconv.Itoa(u.port)
	url := scheme + "://127.0.0.1:" + port + "/"
	if sandbox {
		url = scheme + "://" + hostName + ":" + port + "/"
	}
	relayProxy := "http://" + u.proxyRelay.addr()
	env = []string{"PATH=/usr/bin:/bin", "HOME=/tmp"}
	nw := []string{strconv.Itoa(n), strconv.Itoa(w)}
	var run []string // airlock run's flags, inside the sandbox
	switch client {
	case "curl":
		var opts []string
		switch path {
		case "relay", "relay-tls":
			opts = append(opts, "-x", relayProxy)
		case "transparent":
			opts = append(opts, "--noproxy", "*")
		}
		if u.tls && path != "credential" {
			opts = append(opts, "--cacert", certFile)
		}
		argv = append([]string{"/bin/sh", "-c", curlScript, "sh", url}, nw...)
		argv = append(argv, opts...)
		run = []string{"--tool", "/usr/bin/curl"}
	case "urllib":
		proxy, ca := "none", ""
		switch path {
		case "relay", "relay-tls":
			proxy = relayProxy
		case "proxy", "tunnel", "credential":
			proxy = "env"
		}
		if u.tls && path != "credential" {
			ca = certFile
		}
		argv = append(append([]string{"/usr/bin/python3", "-c", urllibScript, url}, nw...), proxy, ca)
	case "node":
		switch path {
		case "proxy":
			return nil, nil
		case "relay", "relay-tls":
			url = scheme + "://" + u.transparent.addr() + "/"
		}
		if u.tls && path != "credential" {
			if sandbox {
				run = append(run, "--env", "NODE_EXTRA_CA_CERTS="+certFile)
			} else {
				env = append(env, "NODE_EXTRA_CA_CERTS="+certFile)
			}
		}
		argv = append([]string{"/usr/bin/node", "-e", nodeScript, url}, nw...)
	}
	if !sandbox {
		return argv, env
	}
	flags := []string{"run", "--net-host", hostName + ":" + port, "--max-wall", "180s", "--max-ops", "1000000", "--max-pids", "256"}
	if u.tls && path != "credential" {
		flags = append(flags, "--fs-read", certFile)
	}
	// airlock itself verifies the upstream of the credential path (the
	// proxy's TLS) by SSL_CERT_FILE, the Go roots of its own process.
	env = append(os.Environ(), "SSL_CERT_FILE="+certFile, benchToken+"=Bearer bench-token")
	if path == "credential" {
		flags = append(flags, "--credential", hostName+":Authorization="+benchToken)
	}
	return append(append(append([]string{airlock}, append(flags, run...)...), "--"), argv...), env
}

// runClient runs one row's command for one round and returns its stdout
// and stderr.
func runClient(ctx context.Context, argv, env []string) (stdout, stderr string, err error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = env
	var eb strings.Builder
	cmd.Stderr = &eb
	out, err := cmd.Output()
	return string(out), eb.String(), err
}
