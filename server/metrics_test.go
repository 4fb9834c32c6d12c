package server_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
	"github.com/airlock-sandbox/airlock/server"
)

// TestMetrics: /metrics is Prometheus's text format, parsed by
// Prometheus's own parser: live and ended sessions, API requests by route
// pattern (never the client's path), and what the audit stream counted
// (execs, denials by layer, halts by budget, egress decisions); a label
// value the sandbox could choose is counted as "other".
func TestMetrics(t *testing.T) {
	m := server.NewMetrics()
	m.WatchPool(func() server.PoolStats {
		return server.PoolStats{Ready: 2, Starting: 1, Taken: 7, Misses: 3, Failed: 1, Expired: 4, MountedAhead: 5}
	})
	e := newEnv(t, server.Config{Metrics: m})
	id := e.create(tokA, wsPolicy(t.TempDir()))
	e.do("GET", "/v1/sessions/"+id, tokA, nil)
	e.do("GET", "/v1/sessions/"+id+"/../../etc", tokA, nil)
	e.create(tokA, wsPolicy(t.TempDir()))
	e.do("DELETE", "/v1/sessions/"+id, tokA, nil)
	sink := m.Sink()
	for _, ev := range []audit.Event{
		{Kind: audit.Exit, Layer: audit.LayerExec}, {Kind: audit.Exit, Layer: audit.LayerExec},
		{Kind: audit.Deny, Layer: audit.LayerNet}, {Kind: audit.Deny, Layer: audit.LayerFS}, {Kind: audit.Deny, Layer: "sandbox-chosen\nlayer"},
		{Kind: audit.Halt, Layer: audit.LayerBudget, Rule: "max_wall"}, {Kind: audit.Allow, Layer: audit.LayerNet},
	} {
		sink.Emit(ev)
	}

	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics = %d", rec.Code)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(rec.Body.String()))
	if err != nil {
		t.Fatalf("not Prometheus text format: %v\n%s", err, rec.Body.String())
	}
	value := func(name string, labels map[string]string) float64 {
		t.Helper()
		f, ok := families[name]
		if !ok {
			t.Fatalf("no metric %s", name)
		}
	next:
		for _, mt := range f.GetMetric() {
			for _, lp := range mt.GetLabel() {
				if want, ok := labels[lp.GetName()]; ok && want != lp.GetValue() {
					continue next
				}
			}
			switch {
			case mt.Counter != nil:
				return mt.Counter.GetValue()
			case mt.Gauge != nil:
				return mt.Gauge.GetValue()
			case mt.Histogram != nil:
				return float64(mt.Histogram.GetSampleCount())
			}
		}
		t.Fatalf("no %s with %v", name, labels)
		return 0
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"airlock_sessions", nil, 1},
		{"airlock_sessions_created_total", nil, 2},
		{"airlock_sessions_ended_total", map[string]string{"reason": "destroyed"}, 1},
		{"airlock_execs_total", nil, 2},
		{"airlock_denials_total", map[string]string{"layer": "net"}, 1},
		{"airlock_denials_total", map[string]string{"layer": "fs"}, 1},
		{"airlock_denials_total", map[string]string{"layer": "other"}, 1},
		{"airlock_halts_total", map[string]string{"budget": "max_wall"}, 1},
		{"airlock_egress_decisions_total", map[string]string{"decision": "allow"}, 1},
		{"airlock_egress_decisions_total", map[string]string{"decision": "deny"}, 1},
		{"airlock_http_requests_total", map[string]string{"route": "POST /v1/sessions", "code": "201"}, 2},
		{"airlock_http_request_duration_seconds", map[string]string{"route": "GET /v1/sessions/{id}"}, 1},
		{"airlock_pool_ready", nil, 2},
		{"airlock_pool_starting", nil, 1},
		{"airlock_pool_taken_total", nil, 7},
		{"airlock_pool_misses_total", nil, 3},
		{"airlock_pool_failed_total", nil, 1},
		{"airlock_pool_expired_total", nil, 4},
		{"airlock_pool_mounted_ahead_total", nil, 5},
	} {
		if got := value(c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if strings.Contains(rec.Body.String(), "etc") || strings.Contains(rec.Body.String(), id) {
		t.Errorf("a client's path or a session id became a label:\n%s", rec.Body.String())
	}
}

// TestMetricsProxyLatency: the egress proxy's dial latency reaches
// /metrics from the audit stream, through a real proxy on loopback: one
// CONNECT to a granted listener is one observation, one to a granted port
// where nothing listens is one failure.
func TestMetricsProxyLatency(t *testing.T) {
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	go func() {
		for {
			c, err := up.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	closed, _ := net.Listen("tcp", "127.0.0.1:0")
	closedAddr := closed.Addr().String()
	closed.Close()

	pol, err := policy.New(policy.Spec{NetHosts: []string{up.Addr().String(), closedAddr}})
	if err != nil {
		t.Fatal(err)
	}
	m := server.NewMetrics()
	p, err := egress.New(egress.Config{Policy: pol, Meter: budget.NewMeter(pol.Budget(), nil), Audit: m.Sink()})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go p.ServeHTTPProxy(l)
	for _, target := range []string{up.Addr().String(), closedAddr} {
		c, err := net.DialTimeout("tcp", l.Addr().String(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		// The tunnel dials once the first bytes show the protocol (plain
		// HTTP here); the answer, or EOF, comes after the dial.
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\nGET / HTTP/1.1\r\nHost: %s\r\n\r\n", target, target, target)
		rest, _ := io.ReadAll(bufio.NewReader(c))
		c.Close()
		t.Logf("CONNECT %s: %q", target, rest)
	}

	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(rec.Body.String()))
	if err != nil {
		t.Fatalf("not Prometheus text format: %v", err)
	}
	h := families["airlock_egress_dial_duration_seconds"].GetMetric()[0].GetHistogram()
	if h.GetSampleCount() != 1 || h.GetSampleSum() <= 0 || h.GetSampleSum() > 5 {
		t.Errorf("dial latency: %d samples, sum %vs; want 1 sample of a positive latency", h.GetSampleCount(), h.GetSampleSum())
	}
	if f := families["airlock_egress_dial_failures_total"].GetMetric()[0].GetCounter().GetValue(); f != 1 {
		t.Errorf("dial failures = %v, want 1", f)
	}
}
