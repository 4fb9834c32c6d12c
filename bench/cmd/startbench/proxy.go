package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// GoBench is one result line of `go test -bench`.
type GoBench struct {
	Pkg      string  `json:"pkg"`
	Name     string  `json:"name"` // without the Benchmark prefix and the -GOMAXPROCS suffix
	NsPerOp  float64 `json:"ns_per_op"`
	BPerOp   float64 `json:"bytes_per_op"`
	Allocs   float64 `json:"allocs_per_op"`
	HasAlloc bool    `json:"has_allocs"`
}

var benchLine = regexp.MustCompile(`^Benchmark(\S+?)(?:-\d+)?\s+\d+\s+([\d.]+) ns/op(?:\s+([\d.]+) B/op\s+([\d.]+) allocs/op)?`)

// goBench runs go test -bench in repo and parses every result line.
func goBench(ctx context.Context, repo string, args ...string) ([]GoBench, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", append([]string{"test", "-run", "^$"}, args...)...)
	cmd.Dir = repo
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var res []GoBench
	pkg := ""
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		line := sc.Text()
		if p, ok := strings.CutPrefix(line, "pkg: "); ok {
			pkg = strings.TrimPrefix(p, "github.com/airlock-sandbox/airlock/")
			continue
		}
		m := benchLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		b := GoBench{Pkg: pkg, Name: m[1]}
		b.NsPerOp, _ = strconv.ParseFloat(m[2], 64)
		if m[3] != "" {
			b.HasAlloc = true
			b.BPerOp, _ = strconv.ParseFloat(m[3], 64)
			b.Allocs, _ = strconv.ParseFloat(m[4], 64)
		}
		res = append(res, b)
	}
	if err != nil {
		tail := out.String()
		if len(tail) > 2000 {
			tail = tail[len(tail)-2000:]
		}
		return res, fmt.Errorf("go test %s: %v\n%s", strings.Join(args, " "), err, tail)
	}
	return res, nil
}

// ProxyMode compares direct and proxied requests for one connection mode.
type ProxyMode struct {
	Mode string `json:"mode"` // keepalive or newconn
	// Microseconds per request over the -count runs. Relay is the floor
	// under Proxy: a byte relay that parses and decides nothing
	// (BenchmarkViaRelay), so Proxy minus Relay is what checking costs and
	// Relay minus Direct what any proxy's extra hop costs.
	Direct Summary `json:"direct_us"`
	Proxy  Summary `json:"proxy_us"`
	Relay  Summary `json:"relay_us"`
	// Throughput through the proxy as a fraction of direct, and the
	// latency the proxy adds, from the medians and from the minimums.
	Throughput    float64 `json:"throughput_ratio_median"`
	ThroughputMin float64 `json:"throughput_ratio_min"`
	AddedUS       float64 `json:"added_us_median"`
	AddedUSMin    float64 `json:"added_us_min"`
}

// ProxyResult is the egress benchmark.
type ProxyResult struct {
	Command string      `json:"command"`
	Modes   []ProxyMode `json:"modes"`
	// Bulk is the byte throughput of 1 MiB downloads on one keep-alive
	// connection (BenchmarkBulkDirect, BenchmarkBulkViaProxy), in MB/s
	// over the -count runs; nil when not measured.
	Bulk *ProxyBulk `json:"bulk,omitempty"`
}

// ProxyBulk compares direct and proxied byte throughput.
type ProxyBulk struct {
	DirectMBs  Summary `json:"direct_mb_s"`
	ProxyMBs   Summary `json:"proxy_mb_s"`
	Throughput float64 `json:"throughput_ratio_median"` // proxy ÷ direct, of the medians
}

// bulkBytes is egress's bulkSize: the body BenchmarkBulk* download.
const bulkBytes = 1 << 20

// proxyBench runs egress's BenchmarkDirect, BenchmarkViaProxy and
// BenchmarkViaRelay, whose target, proxy (or relay) and client all live
// in one process on loopback.
func proxyBench(ctx context.Context, repo string) (*ProxyResult, error) {
	args := []string{"-bench", "Direct|ViaProxy|ViaRelay", "-benchtime", "2000x", "-count", "5", "./egress/"}
	bulkArgs := []string{"-bench", "Bulk", "-benchtime", "300x", "-count", "5", "./egress/"}
	log.Printf("proxy: go test -run '^$' %s", strings.Join(args, " "))
	bs, err := goBench(ctx, repo, args...)
	if err != nil {
		return nil, err
	}
	res := &ProxyResult{Command: "go test -run '^$' " + strings.Join(args, " ")}
	for _, mode := range []string{"keepalive", "newconn"} {
		var d, p, r []float64
		for _, b := range bs {
			switch b.Name {
			case "Direct/" + mode:
				d = append(d, b.NsPerOp/1e3)
			case "ViaProxy/" + mode:
				p = append(p, b.NsPerOp/1e3)
			case "ViaRelay/" + mode:
				r = append(r, b.NsPerOp/1e3)
			}
		}
		if len(d) == 0 || len(p) == 0 || len(r) == 0 {
			return res, fmt.Errorf("proxy benchmark: no %s results", mode)
		}
		m := ProxyMode{Mode: mode, Direct: summarize(d), Proxy: summarize(p), Relay: summarize(r)}
		m.Throughput = ratio(m.Direct.Median, m.Proxy.Median)
		m.ThroughputMin = ratio(m.Direct.Min, m.Proxy.Min)
		m.AddedUS = m.Proxy.Median - m.Direct.Median
		m.AddedUSMin = m.Proxy.Min - m.Direct.Min
		log.Printf("proxy %-9s direct %.1f µs, via proxy %.1f µs: throughput %.0f%% (min-based %.0f%%), +%.1f µs (min-based +%.1f); floor, a byte relay: %.1f µs, %.0f%% of direct",
			mode, m.Direct.Median, m.Proxy.Median, 100*m.Throughput, 100*m.ThroughputMin, m.AddedUS, m.AddedUSMin, m.Relay.Median, 100*ratio(m.Direct.Median, m.Relay.Median))
		res.Modes = append(res.Modes, m)
	}
	log.Printf("proxy: go test -run '^$' %s", strings.Join(bulkArgs, " "))
	bulk, err := goBench(ctx, repo, bulkArgs...)
	if err != nil {
		return res, err
	}
	res.Command += "; go test -run '^$' " + strings.Join(bulkArgs, " ")
	var d, p []float64
	for _, b := range bulk {
		mbs := float64(bulkBytes) / b.NsPerOp * 1e3 // bytes per ns × 1e3 = MB/s
		switch b.Name {
		case "BulkDirect":
			d = append(d, mbs)
		case "BulkViaProxy":
			p = append(p, mbs)
		}
	}
	if len(d) == 0 || len(p) == 0 {
		return res, fmt.Errorf("proxy benchmark: no bulk results")
	}
	res.Bulk = &ProxyBulk{DirectMBs: summarize(d), ProxyMBs: summarize(p)}
	res.Bulk.Throughput = ratio(res.Bulk.ProxyMBs.Median, res.Bulk.DirectMBs.Median)
	log.Printf("proxy bulk: direct %.0f MB/s, via proxy %.0f MB/s: %.0f%%", res.Bulk.DirectMBs.Median, res.Bulk.ProxyMBs.Median, 100*res.Bulk.Throughput)
	return res, nil
}

// MicroBenchmark is a Go benchmark of an in-process hot path.
type MicroBenchmark = GoBench

// microBench runs the hot-path benchmarks of the policy checks, the guard
// and the proxy's decision.
func microBench(ctx context.Context, repo string) ([]MicroBenchmark, error) {
	log.Print("micro benchmarks: policy, hostspec, pathspec, guard, egress Decide")
	return goBench(ctx, repo, "-bench", "CheckHost|CheckRead|Match|Within|Decide|CheckDenied|ReadAllowed|ReadBaseline",
		"-benchtime", "20000x", "-benchmem", "./policy/", "./policy/hostspec/", "./policy/pathspec/", "./guard/", "./egress/")
}
