package server

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/airlock-sandbox/airlock/audit"
)

// Metrics is what `airlock serve` exposes to Prometheus (the official
// client library, text format). The sandbox counters come from the audit
// stream, the one record of what every layer decided, so the metrics and
// the audit log can never disagree: hand Sink to the sessions' Config.Audit
// next to any audit file. Labels are fixed sets (layers, budgets,
// decisions, routes, status codes): nothing a client or the sandbox
// chooses becomes a label value, so no one can grow the series without
// bound. Create it with NewMetrics; it is safe for concurrent use.
type Metrics struct {
	reg *prometheus.Registry

	sessionsCreated prometheus.Counter
	sessionsEnded   *prometheus.CounterVec // reason
	execs           prometheus.Counter
	denials         *prometheus.CounterVec // layer
	halts           *prometheus.CounterVec // budget
	egress          *prometheus.CounterVec // decision
	dials           prometheus.Histogram
	dialFailures    prometheus.Counter
	requests        *prometheus.CounterVec // route, code
	latency         *prometheus.HistogramVec
}

// Label values the metrics accept; anything else is counted as "other".
var (
	metricLayers  = []string{audit.LayerFS, audit.LayerNet, audit.LayerExec, audit.LayerBudget, audit.LayerKernel, audit.LayerTool}
	metricBudgets = []string{"max_wall", "max_output_bytes", "max_ops", "max_memory", "max_cpu", "max_pids", "max_scratch", "max_write", "interrupted", "session_lifetime", "session_closed"}
	metricEnds    = map[string]string{endDestroyed: "destroyed", endIdle: "idle", endDeadline: "ended", endShutdown: "shutdown"}
)

// NewMetrics registers airlock's metrics, and the Go runtime's and the
// process's, in a registry of its own.
func NewMetrics() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.sessionsCreated = prometheus.NewCounter(prometheus.CounterOpts{Name: "airlock_sessions_created_total", Help: "Sessions started."})
	m.sessionsEnded = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "airlock_sessions_ended_total", Help: "Sessions ended, by reason."}, []string{"reason"})
	m.execs = prometheus.NewCounter(prometheus.CounterOpts{Name: "airlock_execs_total", Help: "Execs that ended (the audit's exit events), in sessions and runs."})
	m.denials = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "airlock_denials_total", Help: "Operations denied, by enforcement layer."}, []string{"layer"})
	m.halts = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "airlock_halts_total", Help: "Execs and sandboxes halted, by the budget that ended them."}, []string{"budget"})
	m.egress = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "airlock_egress_decisions_total", Help: "Egress proxy decisions (requests, tunnels, DNS answers), by decision."}, []string{"decision"})
	m.dials = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "airlock_egress_dial_duration_seconds",
		Help:    "Egress proxy latency before the first byte: from its decision (name resolution included) to an open upstream connection.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10}})
	m.dialFailures = prometheus.NewCounter(prometheus.CounterOpts{Name: "airlock_egress_dial_failures_total", Help: "Allowed egress destinations the proxy could not connect to (refused, unreachable, timed out)."})
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "airlock_http_requests_total", Help: "API requests, by route and status code."}, []string{"route", "code"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "airlock_http_request_duration_seconds", Help: "API request latency, by route (an exec's lasts as long as the command).",
		Buckets: []float64{.001, .005, .01, .05, .1, .5, 1, 5, 30, 120}}, []string{"route"})
	m.reg.MustRegister(m.sessionsCreated, m.sessionsEnded, m.execs, m.denials, m.halts, m.egress, m.dials, m.dialFailures, m.requests, m.latency,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, l := range metricLayers {
		m.denials.WithLabelValues(l)
	}
	for _, b := range metricBudgets {
		m.halts.WithLabelValues(b)
	}
	for _, r := range metricEnds {
		m.sessionsEnded.WithLabelValues(r)
	}
	return m
}

// PoolStats is what a warm pool of sandbox inits reports (sandbox.Pool's
// counters, passed in by the program that owns the pool).
type PoolStats struct {
	Ready, Starting                int // now
	Taken, Misses, Failed, Expired int // since the pool started
	// MountedAhead counts the sessions whose plan began with the steps
	// their warm init had mounted while it waited (since the pool started).
	MountedAhead int
}

// WatchPool exports a warm pool's counters, read from stats at each
// scrape: airlock_pool_ready and airlock_pool_starting (gauges), and
// airlock_pool_taken_total, _misses_total, _failed_total,
// _expired_total and _mounted_ahead_total. Call it once.
func (m *Metrics) WatchPool(stats func() PoolStats) {
	gauge := func(name, help string, f func(PoolStats) int) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return float64(f(stats())) })
	}
	counter := func(name, help string, f func(PoolStats) int) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(f(stats())) })
	}
	m.reg.MustRegister(
		gauge("airlock_pool_ready", "Warm sandbox inits waiting for a session now.", func(s PoolStats) int { return s.Ready }),
		gauge("airlock_pool_starting", "Warm sandbox inits being started now.", func(s PoolStats) int { return s.Starting }),
		counter("airlock_pool_taken_total", "Sessions started on a warm init.", func(s PoolStats) int { return s.Taken }),
		counter("airlock_pool_misses_total", "Sessions that found no warm init ready and started cold.", func(s PoolStats) int { return s.Misses }),
		counter("airlock_pool_failed_total", "Warm inits that failed to start.", func(s PoolStats) int { return s.Failed }),
		counter("airlock_pool_expired_total", "Warm inits replaced after waiting their maximum age unused.", func(s PoolStats) int { return s.Expired }),
		counter("airlock_pool_mounted_ahead_total", "Sessions whose plan began with the steps their warm init had mounted while it waited.", func(s PoolStats) int { return s.MountedAhead }),
	)
}

// Handler serves the metrics in Prometheus's text format, uncompressed:
// they are a few kilobytes, and gzip cost every scrape 0.62 ms of CPU
// instead of 0.39 (BenchmarkScrape), mostly clearing a compressor's
// tables of about 600 KiB, beside the sessions being created.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError, DisableCompression: true})
}

// Sink returns the audit sink that counts execs, denials, halts and
// egress decisions.
func (m *Metrics) Sink() audit.Sink { return metricsSink{m} }

type metricsSink struct{ m *Metrics }

func (s metricsSink) Emit(e audit.Event) {
	switch e.Kind {
	case audit.Exit:
		s.m.execs.Inc()
	case audit.Deny:
		s.m.denials.WithLabelValues(oneOf(e.Layer, metricLayers)).Inc()
	case audit.Halt:
		s.m.halts.WithLabelValues(oneOf(e.Rule, metricBudgets)).Inc()
	}
	if e.Layer != audit.LayerNet {
		return
	}
	switch {
	case e.Kind == audit.Allow || e.Kind == audit.Deny:
		s.m.egress.WithLabelValues(string(e.Kind)).Inc()
	case e.Kind == audit.Info && e.Op == audit.OpDial:
		s.m.dials.Observe(e.DurationMS / 1000)
	case e.Kind == audit.Info && e.Op == audit.OpDialFailed:
		s.m.dialFailures.Inc()
	}
}

// oneOf returns v when it is in set, else "other".
func oneOf(v string, set []string) string {
	for _, s := range set {
		if s == v {
			return v
		}
	}
	return "other"
}

// sessionStarted and sessionEnded count the table's changes.
func (m *Metrics) sessionStarted() {
	if m != nil {
		m.sessionsCreated.Inc()
	}
}

func (m *Metrics) sessionEnded(reason string) {
	if m == nil {
		return
	}
	l, ok := metricEnds[reason]
	if !ok {
		l = "other"
	}
	m.sessionsEnded.WithLabelValues(l).Inc()
}

// registerSessions exposes the live sessions as a gauge read from the
// server's table when scraped.
func (m *Metrics) registerSessions(live func() float64) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "airlock_sessions", Help: "Sessions alive now."}, live))
}

// instrument counts and times the requests of route (the route's pattern,
// never the client's path).
func (m *Metrics) instrument(route string, h http.HandlerFunc) http.HandlerFunc {
	if m == nil {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		h(sw, r)
		m.requests.WithLabelValues(route, strconv.Itoa(sw.code)).Inc()
		m.latency.WithLabelValues(route).Observe(time.Since(start).Seconds())
	}
}

// statusWriter remembers the status code written.
type statusWriter struct {
	http.ResponseWriter
	code  int
	wrote bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.code, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection (deadlines,
// flushes) through the wrapper.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush passes flushes on, for streamed execs.
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
