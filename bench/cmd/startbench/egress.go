package main

import (
	"context"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// EgressPath is one way a program inside reaches a host: direct (python3
// on the host, no sandbox: the baseline), proxy (inside airlock run, by
// HTTP_PROXY) and transparent (inside airlock run, the proxy variables
// removed: airlock's DNS and connect broker).
type EgressPath struct {
	Path string `json:"path"`
	// Microseconds per request, medians over the rounds.
	NewConnUS   Summary `json:"newconn_us"`
	KeepAliveUS Summary `json:"keepalive_us"`
	// Added over direct, from the medians.
	NewConnAddedUS   float64 `json:"newconn_added_us"`
	KeepAliveAddedUS float64 `json:"keepalive_added_us"`
}

// EgressResult is the in-sandbox egress benchmark.
type EgressResult struct {
	Requests int          `json:"requests_per_round"`
	Rounds   int          `json:"rounds"`
	Paths    []EgressPath `json:"paths"`
}

// egressScript makes N requests to the URL in argv[1], each on a new
// connection (urllib), then N on one keep-alive connection (http.client,
// through the proxy when HTTP_PROXY is set), and prints the microseconds
// per request of each.
const egressScript = `
import http.client, os, sys, time, urllib.request
url, n = sys.argv[1], int(sys.argv[2])
host = url.split("/")[2]
t = time.perf_counter()
for _ in range(n):
    urllib.request.urlopen(url, timeout=10).read()
newconn = (time.perf_counter() - t) / n * 1e6
proxy = os.environ.get("HTTP_PROXY", "")
if proxy:
    c = http.client.HTTPConnection(proxy.split("/")[2], timeout=10); path = url
else:
    c = http.client.HTTPConnection(host, timeout=10); path = "/"
t = time.perf_counter()
for _ in range(n):
    c.request("GET", path); c.getresponse().read()
keep = (time.perf_counter() - t) / n * 1e6
print("result", newconn, keep)
`

// egressBench serves a tiny HTTP answer on the host's loopback and times
// python3 reaching it directly, through the proxy from inside airlock, and
// transparently from inside airlock, in the same run.
func egressBench(ctx context.Context, airlock string) (*EgressResult, error) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		return nil, fmt.Errorf("egress benchmark needs /usr/bin/python3: %v", err)
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })}
	go srv.Serve(ln)
	defer srv.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	const n, rounds = 300, 5
	res := &EgressResult{Requests: n, Rounds: rounds}
	paths := []struct {
		name string
		argv []string
	}{
		{"direct", []string{"/usr/bin/python3", "-c", egressScript, "http://127.0.0.1:" + port + "/", strconv.Itoa(n)}},
		{"proxy", []string{airlock, "run", "--net-host", "host.airlock.internal:" + port, "--max-wall", "120s", "--max-ops", "100000", "--",
			"/usr/bin/python3", "-c", egressScript, "http://host.airlock.internal:" + port + "/", strconv.Itoa(n)}},
		{"transparent", []string{airlock, "run", "--net-host", "host.airlock.internal:" + port, "--max-wall", "120s", "--max-ops", "100000", "--",
			"/usr/bin/python3", "-c", "import os\nfor k in list(os.environ):\n    if k.lower().endswith('_proxy'): del os.environ[k]\n" + egressScript,
			"http://host.airlock.internal:" + port + "/", strconv.Itoa(n)}},
	}
	var direct EgressPath
	for _, p := range paths {
		var nc, ka []float64
		for range rounds {
			c, k, err := egressRound(ctx, p.argv)
			if err != nil {
				return res, fmt.Errorf("egress %s: %v", p.name, err)
			}
			nc, ka = append(nc, c), append(ka, k)
		}
		ep := EgressPath{Path: p.name, NewConnUS: summarize(nc), KeepAliveUS: summarize(ka)}
		if p.name == "direct" {
			direct = ep
		}
		ep.NewConnAddedUS = ep.NewConnUS.Median - direct.NewConnUS.Median
		ep.KeepAliveAddedUS = ep.KeepAliveUS.Median - direct.KeepAliveUS.Median
		log.Printf("egress %-11s new connection %.0f µs/request (+%.0f), keep-alive %.0f µs/request (+%.0f)",
			p.name, ep.NewConnUS.Median, ep.NewConnAddedUS, ep.KeepAliveUS.Median, ep.KeepAliveAddedUS)
		res.Paths = append(res.Paths, ep)
	}
	return res, nil
}

// egressRound runs one timed python3 and parses its "result" line.
func egressRound(ctx context.Context, argv []string) (newconn, keepalive float64, err error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return 0, 0, fmt.Errorf("%v: %s", err, lastLines(string(out)))
	}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "result" {
			a, err1 := strconv.ParseFloat(f[1], 64)
			b, err2 := strconv.ParseFloat(f[2], 64)
			if err1 == nil && err2 == nil {
				return a, b, nil
			}
		}
	}
	return 0, 0, fmt.Errorf("no result line in: %s", lastLines(string(out)))
}

func lastLines(s string) string {
	if len(s) > 800 {
		s = s[len(s)-800:]
	}
	return s
}
