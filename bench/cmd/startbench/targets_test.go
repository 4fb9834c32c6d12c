package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// TestTargetsFromCommittedRun: the committed run (bench/results) is
// judged against issue 19's targets with its own baselines: the cold
// start is 3.09× bubblewrap (FAIL), exec into a session is 1.3 ms (FAIL),
// the open+close steady state 1.16× bare (FAIL), and what the run did not
// measure (100 sessions in one server) says so instead of passing.
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
	want := map[string]string{
		"cold `airlock run -- /bin/true` p50":              "FAIL",
		"exec into a warm session p50":                     "FAIL",
		"steady state `open+close`":                        "FAIL",
		"proxy keep-alive throughput":                      "FAIL",
		"idle PSS per session, 100 sessions in one server": "not measured",
	}
	for name, v := range want {
		x, ok := by[name]
		if !ok {
			t.Errorf("no target %q", name)
			continue
		}
		if x.verdict() != v {
			t.Errorf("%s: %s (%s, ratio %.2f), want %s", name, x.verdict(), x.Measured, x.Ratio, v)
		}
	}
	if x := by["cold `airlock run -- /bin/true` p50"]; x.Ratio < 3.0 || x.Ratio > 3.2 {
		t.Errorf("cold start ratio %.2f, want the run's 3.09", x.Ratio)
	}
	r.Targets = ts
	md := markdown(&r)
	if i := strings.Index(md, "## Targets"); i >= 0 {
		t.Log(md[i : i+strings.Index(md[i:], "\n\n## ")])
	}
	if !strings.Contains(md, "## Targets (issue 19)") || !strings.Contains(md, "| not measured |") || strings.Count(md, "| FAIL |")+strings.Count(md, "| PASS |") < 8 {
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
