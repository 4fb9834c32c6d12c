package main

import "fmt"

// Target is one of issue 19's performance targets, judged from this run's
// own numbers: Ratio against its baseline in the same run (bubblewrap,
// bare, direct), Pass nil when this run did not measure it.
type Target struct {
	Name     string  `json:"name"`
	Goal     string  `json:"goal"`
	Measured string  `json:"measured"`
	Ratio    float64 `json:"ratio,omitempty"`
	Pass     *bool   `json:"pass"`
}

// targets judges the run against the performance targets.
func targets(r *Results) []Target {
	var out []Target
	add := func(name, goal string, measured string, ratio float64, ok, have bool) {
		t := Target{Name: name, Goal: goal, Measured: measured, Ratio: ratio}
		if have {
			t.Pass = &ok
		} else if t.Measured == "" {
			t.Measured = "not measured"
		}
		out = append(out, t)
	}
	cold := func(w, c string) (float64, bool) {
		for _, row := range r.ColdStart {
			if row.Workload == w && row.Contender == c && row.Summary.Median > 0 {
				return row.Summary.Median, true
			}
		}
		return 0, false
	}
	a, okA := cold("true", "airlock")
	bw, okB := cold("true", "bwrap")
	if okA && okB {
		add("cold `airlock run -- /bin/true` p50", "≤ 1.0× bubblewrap", fmt.Sprintf("%.2f ms vs %.2f ms", a, bw), a/bw, a/bw <= 1.0, true)
	} else {
		add("cold `airlock run -- /bin/true` p50", "≤ 1.0× bubblewrap", "", 0, false, false)
	}
	pa, ok1 := cold("python3", "airlock")
	pb, ok2 := cold("python3", "bwrap")
	pbare, ok3 := cold("python3", "bare")
	if ok1 && ok2 && ok3 && pb > pbare {
		added, addedB := pa-pbare, pb-pbare
		add("`python3 -c pass` added over bare", "≤ bubblewrap's added", fmt.Sprintf("+%.2f ms vs +%.2f ms", added, addedB), added/addedB, added <= addedB, true)
	} else {
		add("`python3 -c pass` added over bare", "≤ bubblewrap's added", "", 0, false, false)
	}
	s := r.Session
	if s != nil && !s.Skipped && okB && s.LibraryMS.Median > 0 {
		l := s.LibraryMS.Median
		add("cold sandbox from a warm process (library) p50", "≤ 0.8× bubblewrap's CLI", fmt.Sprintf("%.2f ms vs %.2f ms", l, bw), l/bw, l/bw <= 0.8, true)
	} else {
		add("cold sandbox from a warm process (library) p50", "≤ 0.8× bubblewrap's CLI", "", 0, false, false)
	}
	if v := r.Serve; v != nil && v.NewWarmMS.Median > 0 {
		m := v.NewWarmMS.Median
		add("new session from `airlock serve`, warm pool", "≤ 5 ms p50", fmt.Sprintf("%.2f ms (cold: %.2f ms)", m, v.NewColdMS.Median), m/5, m <= 5, true)
	} else {
		add("new session from `airlock serve`, warm pool", "≤ 5 ms p50", "", 0, false, false)
	}
	if s != nil && !s.Skipped && s.ExecMS.Median > 0 {
		add("exec into a warm session p50", "≤ 1 ms", fmt.Sprintf("%.2f ms", s.ExecMS.Median), s.ExecMS.Median, s.ExecMS.Median <= 1, true)
	} else {
		add("exec into a warm session p50", "≤ 1 ms", "", 0, false, false)
	}
	pss := -1.0
	for _, m := range r.Memory {
		if m.Contender == "airlock" && m.Error == "" {
			pss = m.PSSKiB
		}
	}
	if pss >= 0 {
		add("idle PSS per sandbox, separate `airlock run`s", "≤ 2 MiB", fmt.Sprintf("%.1f MiB", pss/1024), pss/2048, pss <= 2048, true)
	} else {
		add("idle PSS per sandbox, separate `airlock run`s", "≤ 2 MiB", "", 0, false, false)
	}
	if v := r.Serve; v != nil && v.IdleSessions > 0 {
		add(fmt.Sprintf("idle PSS per session, %d sessions in one server", v.IdleSessions), "≤ 2 MiB", fmt.Sprintf("%.2f MiB", v.IdlePSSKiB/1024), v.IdlePSSKiB/2048, v.IdlePSSKiB <= 2048, true)
	} else {
		add("idle PSS per session, 100 sessions in one server", "≤ 2 MiB", "", 0, false, false)
	}
	for _, c := range []int{10, 50} {
		var ta, tb float64
		for _, row := range r.Scaling {
			if row.Concurrency == c && row.Contender == "airlock" {
				ta = row.Throughput
			}
			if row.Concurrency == c && row.Contender == "bwrap" {
				tb = row.Throughput
			}
		}
		name := fmt.Sprintf("runs/s at %d concurrent", c)
		if ta > 0 && tb > 0 {
			add(name, "≥ 0.8× bubblewrap", fmt.Sprintf("%.0f vs %.0f", ta, tb), ta/tb, ta/tb >= 0.8, true)
		} else {
			add(name, "≥ 0.8× bubblewrap", "", 0, false, false)
		}
	}
	var keep, fresh *ProxyMode
	if r.Proxy != nil {
		for i := range r.Proxy.Modes {
			switch r.Proxy.Modes[i].Mode {
			case "keepalive":
				keep = &r.Proxy.Modes[i]
			case "newconn":
				fresh = &r.Proxy.Modes[i]
			}
		}
	}
	if keep != nil {
		add("proxy keep-alive throughput", "≥ 0.9× direct", fmt.Sprintf("%.0f%% of direct", keep.Throughput*100), keep.Throughput, keep.Throughput >= 0.9, true)
	} else {
		add("proxy keep-alive throughput", "≥ 0.9× direct", "", 0, false, false)
	}
	if r.Proxy != nil && r.Proxy.Bulk != nil {
		b := r.Proxy.Bulk
		add("proxy keep-alive throughput, 1 MiB bodies", "≥ 0.9× direct", fmt.Sprintf("%.0f vs %.0f MB/s", b.ProxyMBs.Median, b.DirectMBs.Median), b.Throughput, b.Throughput >= 0.9, true)
	} else {
		add("proxy keep-alive throughput, 1 MiB bodies", "≥ 0.9× direct", "", 0, false, false)
	}
	if fresh != nil {
		add("proxy new connection, added", "≤ 100 µs", fmt.Sprintf("+%.0f µs", fresh.AddedUS), fresh.AddedUS/100, fresh.AddedUS <= 100, true)
	} else {
		add("proxy new connection, added", "≤ 100 µs", "", 0, false, false)
	}
	var direct, proxied float64
	if r.Egress != nil {
		for _, p := range r.Egress.Paths {
			switch p.Path {
			case "direct":
				direct = p.NewConnUS.Median
			case "proxy":
				proxied = p.NewConnUS.Median
			}
		}
	}
	if direct > 0 && proxied > 0 {
		add("Python urllib through `airlock run` (a connection per request)", "≥ 0.9× direct", fmt.Sprintf("%.0f µs vs %.0f µs per request", proxied, direct), direct/proxied, direct/proxied >= 0.9, true)
	} else {
		add("Python urllib through `airlock run` (a connection per request)", "≥ 0.9× direct", "", 0, false, false)
	}
	oc := 0.0
	for _, row := range r.Steady {
		if row.Workload == "open+close" && row.Contender == "airlock" {
			oc = row.VsBare
		}
	}
	if oc > 0 {
		add("steady state `open+close`", "≤ 1.10× bare", fmt.Sprintf("%.3f× bare", oc), oc, oc <= 1.10, true)
	} else {
		add("steady state `open+close`", "≤ 1.10× bare", "", 0, false, false)
	}
	return out
}

// verdict is a target's cell: PASS, FAIL, or not measured.
func (t Target) verdict() string {
	switch {
	case t.Pass == nil:
		return "not measured"
	case *t.Pass:
		return "PASS"
	}
	return "FAIL"
}
