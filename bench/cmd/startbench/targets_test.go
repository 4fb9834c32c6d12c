package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// TestTargetsFromCommittedRun: the committed run (bench/results) is
// judged against issue 19's targets with its own baselines: each verdict
// and ratio agrees with the run's own rows (cold start against
// bubblewrap, exec into a session, open+close against bare, the proxy's
// keep-alive throughput, the serve section's new session and idle
// memory), whatever run is committed.
func TestTargetsFromCommittedRun(t *testing.T) {
	b, err := os.ReadFile("../../results/results.json")
	if err != nil {
		t.Fatal(err)
	}
	var r Results
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	ts := targets(&r)
	by := map[string]Target{}
	for _, x := range ts {
		by[x.Name] = x
	}
	pass := func(ok bool) string {
		if ok {
			return "PASS"
		}
		return "FAIL"
	}
	var coldRatio, openClose float64
	for _, row := range r.ColdStart {
		if row.Workload == "true" && row.Contender == "airlock" {
			coldRatio = row.VsBwrap
		}
	}
	for _, row := range r.Steady {
		if row.Workload == "open+close" && row.Contender == "airlock" {
			openClose = row.VsBare
		}
	}
	var keep float64
	for _, m := range r.Proxy.Modes {
		if m.Mode == "keepalive" {
			keep = m.Throughput
		}
	}
	for _, c := range []struct {
		name         string
		ratio        float64
		want         string
		checkedRatio bool
	}{
		{"cold `airlock run -- /bin/true` p50", coldRatio, pass(coldRatio <= 1.0), true},
		{"exec into a warm session p50", r.Session.ExecMS.Median, pass(r.Session.ExecMS.Median <= 1), true},
		{"steady state `open+close`", openClose, pass(openClose <= 1.10), true},
		{"proxy keep-alive throughput", keep, pass(keep >= 0.9), true},
		{"new session from `airlock serve`, warm pool", r.Serve.NewWarmMS.Median / 5, pass(r.Serve.NewWarmMS.Median <= 5), true},
		{"idle PSS per session, 100 sessions in one server", r.Serve.IdlePSSKiB / 2048, pass(r.Serve.IdlePSSKiB <= 2048), true},
	} {
		x, ok := by[c.name]
		if !ok {
			t.Errorf("no target %q", c.name)
			continue
		}
		if x.verdict() != c.want || c.checkedRatio && (x.Ratio < c.ratio-0.01 || x.Ratio > c.ratio+0.01) {
			t.Errorf("%s: %s ratio %.3f (%s), want %s ratio %.3f", c.name, x.verdict(), x.Ratio, x.Measured, c.want, c.ratio)
		}
	}
	r.Targets = ts
	md := markdown(&r)
	if i := strings.Index(md, "## Targets"); i >= 0 {
		t.Log(md[i : i+strings.Index(md[i:], "\n\n## ")])
	}
	if !strings.Contains(md, "## Targets (issue 19)") || strings.Count(md, "| FAIL |")+strings.Count(md, "| PASS |") < 13 {
		t.Errorf("results.md lacks the targets table:\n%s", md[:min(len(md), 3000)])
	}
}

// TestTargetsPass: a target met in the run passes, and an unmeasured one
// never does.
func TestTargetsPass(t *testing.T) {
	r := &Results{ColdStart: []ColdRow{
		{Workload: "true", Contender: "airlock", Summary: Summary{Median: 5}},
		{Workload: "true", Contender: "bwrap", Summary: Summary{Median: 6}},
	}}
	for _, x := range targets(r) {
		switch {
		case strings.HasPrefix(x.Name, "cold `airlock run"):
			if x.verdict() != "PASS" {
				t.Errorf("5 ms vs bubblewrap's 6 ms: %s", x.verdict())
			}
		case x.Pass != nil:
			t.Errorf("%s judged %s with nothing measured", x.Name, x.verdict())
		}
	}
}
