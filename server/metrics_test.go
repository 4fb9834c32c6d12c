package server_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/server"
)

// TestMetrics: /metrics is Prometheus's text format, parsed by
// Prometheus's own parser: live and ended sessions, API requests by route
// pattern (never the client's path), and what the audit stream counted
// (execs, denials by layer, halts by budget, egress decisions); a label
// value the sandbox could choose is counted as "other".
func TestMetrics(t *testing.T) {
	m := server.NewMetrics()
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
	} {
		if got := value(c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if strings.Contains(rec.Body.String(), "etc") || strings.Contains(rec.Body.String(), id) {
		t.Errorf("a client's path or a session id became a label:\n%s", rec.Body.String())
	}
}
