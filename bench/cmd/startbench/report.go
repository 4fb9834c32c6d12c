package main

import (
	"fmt"
	"strings"
)

// markdown renders results.md.
func markdown(r *Results) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	m := r.Meta
	p("# airlock benchmark results\n\n")
	p("%s · kernel %s · %s · %d CPUs (%s) · %s · N=%d · %.0f s · load average %s at the start, %s at the end\n\n",
		m.Date, m.Kernel, m.Go, m.CPUs, m.CPU, m.Airlock, m.N, r.ElapsedSecs, m.LoadStart, m.LoadEnd)

	if len(r.Targets) > 0 {
		p("## Targets (issue 19), from this run\n\nEach ratio is against its baseline in this same run.\n\n| target | goal | measured | ratio | verdict |\n|---|---|---|--:|---|\n")
		for _, t := range r.Targets {
			ratio := "—"
			if t.Pass != nil {
				ratio = fmt.Sprintf("%.2f", t.Ratio)
			}
			p("| %s | %s | %s | %s | %s |\n", t.Name, t.Goal, t.Measured, ratio, t.verdict())
		}
		p("\n")
	}

	if len(r.ColdStart) > 0 {
		p("## Cold start\n\nFrom fork to reaped exit, output discarded; every contender once per round, in an order rotated each round; %d rounds after 3 warm-up rounds. Times in ms.\n\n", m.N)
		for _, w := range workloads(r.ColdStart) {
			p("### `%s`\n\n| contender | median | p99 | min | median × bare | median × bwrap | failures |\n|---|--:|--:|--:|--:|--:|--:|\n", w)
			for _, row := range r.ColdStart {
				if row.Workload != w {
					continue
				}
				p("| %s | %.2f | %.2f | %.2f | %.2f | %s | %d |\n", row.Contender, row.Summary.Median, row.Summary.P99,
					row.Summary.Min, row.VsBare, orDash(row.VsBwrap), row.Failures)
			}
			p("\n")
		}
		for _, row := range r.ColdStart {
			if row.Contender == "airlock" && row.VsBwrap > 0 {
				verdict := "met"
				if row.VsBwrap > 0.8 {
					verdict = "NOT met"
				}
				p("- `%s`: airlock p50 = %.2f × bubblewrap (target ≤ 0.8: %s), %.2f × bare.\n", row.Workload, row.VsBwrap, verdict, row.VsBare)
			}
		}
		p("\n")
	}

	if len(r.Contenders) > 0 {
		p("### What each contender does\n\n| contender | ran | configuration and equivalence to airlock's default sandbox |\n|---|---|---|\n")
		for _, c := range r.Contenders {
			ran := "yes"
			if !c.Available {
				ran = "no: " + escape(c.Reason)
			}
			p("| %s | %s | %s |\n", c.Name, ran, escape(c.Equivalence))
		}
		p("\n")
	}

	if f := r.Floor; f != nil && len(f.Rows) > 0 {
		p("## Start-up floor\n\nEach program started outside any sandbox, from fork to reaped exit, output discarded; once per round in an order rotated each round, %d rounds after 3 warm-up rounds. Times in ms.\n\n", m.N)
		p("| program | what it is | median | min | median over `true` | failures |\n|---|---|--:|--:|--:|--:|\n")
		for _, row := range f.Rows {
			p("| %s | %s | %.2f | %.2f | %+.2f | %d |\n", row.Program, escape(row.What), row.Summary.Median, row.Summary.Min, row.OverTrue, row.Failures)
		}
		p("\n")
		if f.Estimate > 0 {
			p("airlock's cold `true` (%.2f ms, above) less the CLI's start beyond bubblewrap's own (%.2f ms) and the init's whole start "+
				"(%.2f ms: bubblewrap forks its pid 1, airlock executes a second program) leaves **%.2f ms, %.2f × bubblewrap's cold `true`** (%.2f ms): "+
				"an estimate, from medians of this run, of airlock with bubblewrap's process structure (one C program), every layer still on. "+
				"The rest is work bubblewrap does not do: the cgroup (made, limited, read, removed), Landlock, the report.\n\n",
				f.AirlockCold, f.CLIOverC, f.InitStart, f.Estimate, f.EstimateXBwr, f.BwrapCold)
		}
	}

	if len(r.Steady) > 0 {
		p("## Steady-state overhead\n\nTime per operation measured inside the loop (start-up excluded), every process pinned to CPU %d, 9 interleaved repetitions. `getpid` shows the seccomp filter's per-syscall cost, `stat` path walks, `open+close` also Landlock's file hooks, `cpu` no syscalls, `python-stat` is `os.stat(\"/\")` in CPython.\n\n", m.PinCPU)
		p("| workload | contender | median ns/op | min ns/op | median × bare | min × bare | failures |\n|---|---|--:|--:|--:|--:|--:|\n")
		for _, s := range r.Steady {
			p("| %s | %s | %.1f | %.1f | %.3f | %.3f | %d |\n", s.Workload, s.Contender, s.NsPerOp.Median, s.NsPerOp.Min, s.VsBare, s.MinVsBare, s.Failures)
		}
		p("\n")
	}

	if r.Proxy != nil && len(r.Proxy.Modes) > 0 {
		p("## Egress proxy\n\n`%s` (client, proxy and target in one process on loopback; µs per request over the 5 runs). Targets: throughput ≥ 90%% of direct, ≤ 300 µs added.\n\n", r.Proxy.Command)
		p("| connection | direct median µs | via proxy median µs | throughput (median) | added µs (median) | throughput (min) | added µs (min) |\n|---|--:|--:|--:|--:|--:|--:|\n")
		for _, pm := range r.Proxy.Modes {
			p("| %s | %.1f | %.1f | %.0f%% | %.1f | %.0f%% | %.1f |\n", pm.Mode, pm.Direct.Median, pm.Proxy.Median,
				100*pm.Throughput, pm.AddedUS, 100*pm.ThroughputMin, pm.AddedUSMin)
		}
		p("\nThe floor under these, a byte relay that parses and decides nothing (BenchmarkViaRelay):")
		for _, pm := range r.Proxy.Modes {
			p(" %s %.1f µs (%.0f%% of direct);", pm.Mode, pm.Relay.Median, 100*ratio(pm.Direct.Median, pm.Relay.Median))
		}
		p(" any proxy's extra loopback hop costs that much on requests this small.\n")
		if b := r.Proxy.Bulk; b != nil {
			p("\nBytes, not requests: 1 MiB bodies on one keep-alive connection, direct %.0f MB/s, via the proxy %.0f MB/s (%.0f%%; medians of %d runs).\n", b.DirectMBs.Median, b.ProxyMBs.Median, 100*b.Throughput, b.ProxyMBs.N)
		}
		p("\n")
	}

	if r.Egress != nil && len(r.Egress.Paths) > 0 {
		p("## Egress from inside a sandbox: transparent vs proxy vs direct\n\n")
		p("python3 makes %d requests to an HTTP server on the host's loopback, each on a new connection (urllib) and then on one keep-alive connection (http.client): directly on the host (no sandbox), inside `airlock run` through the proxy (HTTP_PROXY), and inside `airlock run` with the proxy variables removed (the transparent path: airlock's DNS and connect broker). µs per request, median of %d rounds; added is over direct.\n\n", r.Egress.Requests, r.Egress.Rounds)
		p("| path | new connection µs | added | keep-alive µs | added |\n|---|--:|--:|--:|--:|\n")
		for _, e := range r.Egress.Paths {
			p("| %s | %.0f | %+.0f | %.0f | %+.0f |\n", e.Path, e.NewConnUS.Median, e.NewConnAddedUS, e.KeepAliveUS.Median, e.KeepAliveAddedUS)
		}
		p("\n")
	}

	if c := r.Clients; c != nil && len(c.Rows) > 0 {
		p("## Real clients through every egress path\n\n")
		p("curl (a new curl per request), python3 urllib (a new connection per request) and node fetch (connections kept alive) against Python's http.server speaking HTTP/1.1 (keep-alive) or HTTP/1.0, which writes a response's head and body in two writes with Nagle's algorithm on. "+
			"Baselines on the host: direct, and through a bare relay that decides nothing (a proxy for curl and urllib, a stand-in for the server for node). Inside `airlock run`: proxy (HTTP_PROXY, upstream connections pooled), transparent (the proxy variables ignored), "+
			"tunnel (HTTPS through CONNECT, or for node transparently: TLS end to end) and credential (HTTPS to a host with a credential: TLS terminated by the proxy, upstream pooled over its own TLS; its baselines are the -tls ones). "+
			"Median ms per request over %d rounds of %d requests, sequential and %d at once; — where the client has no such path (node fetch ignores HTTP_PROXY).\n\n", c.Rounds, c.Requests, c.Workers)
		paths := []string{"direct", "relay", "proxy", "transparent", "direct-tls", "relay-tls", "tunnel", "credential"}
		p("| client | upstream | mode |")
		for _, path := range paths {
			p(" %s |", path)
		}
		p("\n|---|---|---|%s\n", strings.Repeat("--:|", len(paths)))
		type key struct{ client, upstream, mode string }
		var order []key
		cells := map[key]map[string]ClientRow{}
		for _, row := range c.Rows {
			k := key{row.Client, row.Upstream, row.Mode}
			if cells[k] == nil {
				cells[k] = map[string]ClientRow{}
				order = append(order, k)
			}
			cells[k][row.Path] = row
		}
		var failed []string
		for _, k := range order {
			p("| %s | %s | %s |", k.client, k.upstream, k.mode)
			for _, path := range paths {
				row, ok := cells[k][path]
				switch {
				case !ok:
					p(" — |")
				case row.MS.N == 0:
					p(" failed |")
				default:
					p(" %.2f |", row.MS.Median)
				}
				if ok && row.Failures > 0 {
					failed = append(failed, fmt.Sprintf("%s %s %s %s: %d (%s)", k.client, k.upstream, k.mode, path, row.Failures, escape(row.Error)))
				}
			}
			p("\n")
		}
		if len(failed) > 0 {
			p("\nFailed requests: %s.\n", strings.Join(failed, "; "))
		}
		p("\n")
	}

	if v := r.Serve; v != nil {
		p("## `airlock serve`: new sessions and idle sessions\n\n")
		if v.Note != "" {
			p("Note: %s.\n\n", escape(v.Note))
		}
		p("`POST /v1/sessions` of a policy that allows one tool, over loopback with the Go client, the session destroyed after each (not timed): with `--warm-pool %d`, each created once the pool has refilled, median %.2f ms, p99 %.2f ms, min %.2f ms (%d runs); with `--warm-pool 0` (every session cold), median %.2f ms, p99 %.2f ms (%d runs); %d failures.\n\n",
			v.WarmPool, v.NewWarmMS.Median, v.NewWarmMS.P99, v.NewWarmMS.Min, v.NewWarmMS.N, v.NewColdMS.Median, v.NewColdMS.P99, v.NewColdMS.N, v.Failures)
		if v.IdleSessions > 0 {
			p("%d idle sessions in the pooled server: the PSS of its whole process tree (the server, every session's init, the warm inits; %d processes) is %.0f KiB per session; the server itself %.0f KiB, an init (median) %.0f KiB.\n\n",
				v.IdleSessions, v.TreeProcesses, v.IdlePSSKiB, v.ServerPSSKiB, v.InitPSSKiB)
		}
	}
	if r.Session != nil && r.Session.Skipped {
		p("## Exec into a warm session\n\nSkipped: %s.\n\n", escape(r.Session.Note))
	} else if r.Session != nil {
		p("## Exec into a warm session\n\n")
		s := r.Session
		p("`sandbox.NewSession` took %.1f ms. `Session.Exec` of `/usr/bin/true`, %d runs: median %.2f ms, p99 %.2f ms, min %.2f ms, %d failures.\n\n",
			s.CreateMS, s.ExecMS.N, s.ExecMS.Median, s.ExecMS.P99, s.ExecMS.Min, s.Failures)
		p("A cold sandbox per run from a warm Go process (`sandbox.Cmd.Run` of `/usr/bin/true`, what `airlock serve` and library users pay, without the CLI's own start-up), %d runs: median %.2f ms, p99 %.2f ms, min %.2f ms.\n\n",
			s.LibraryMS.N, s.LibraryMS.Median, s.LibraryMS.P99, s.LibraryMS.Min)
		if m := s.MicroVM; m != nil && m.ExecMS.N == 0 {
			p("Under `--isolation microvm`: not measured: %s.\n\n", escape(m.Note))
		} else if m != nil {
			p("Under `--isolation microvm` (QEMU microvm, accelerator TCG): `sandbox.NewSession` took %.0f ms (the boot); `Session.Exec` of `/usr/bin/true`, %d runs: median %.2f ms, p99 %.2f ms, min %.2f ms, %d failures.\n\n",
				m.CreateMS, m.ExecMS.N, m.ExecMS.Median, m.ExecMS.P99, m.ExecMS.Min, m.Failures)
		}
	}

	if len(r.Memory) > 0 {
		p("## Memory per idle sandbox\n\nK sandboxes running `sleep 30`; PSS and RSS summed over each sandbox's process tree (the process started, e.g. airlock's supervisor, and all descendants) from `/proc/PID/smaps_rollup`, divided by K. Kernel memory (page tables, namespaces, mounts, cgroups) is not in PSS (results.json has a MemAvailable delta that includes it, too noisy on this shared VM to tabulate).\n\n")
		p("| contender | K | PSS KiB / sandbox | RSS KiB / sandbox | of which outer process PSS | processes / sandbox |\n|---|--:|--:|--:|--:|--:|\n")
		for _, row := range r.Memory {
			p("| %s | %d | %.0f | %.0f | %.0f | %.1f |\n", row.Contender, row.K, row.PSSKiB, row.RSSKiB, row.OuterPSS, row.Procs)
		}
		p("\n")
	}

	if len(r.Scaling) > 0 {
		p("## Start-up under concurrency\n\nC runs of `/bin/true` released at once; about 20 runs per level (rounds alternate between contenders), at most %.0f s per level and %.0f s per run (a run past that is killed and counted as a failure).\n\n",
			r.Scaling[0].BudgetS, r.Scaling[0].RunTimeoutS)
		p("| contender | concurrent | rounds | runs | per-run median ms | per-run p99 ms | median burst wall ms | runs/s | failures |\n|---|--:|--:|--:|--:|--:|--:|--:|--:|\n")
		for _, s := range r.Scaling {
			p("| %s | %d | %d | %d | %.1f | %.1f | %.1f | %.1f | %d |\n", s.Contender, s.Concurrency, s.Rounds, s.Runs,
				s.PerRun.Median, s.PerRun.P99, s.RoundWallMS, s.Throughput, s.Failures)
		}
		p("\n")
		failed := false
		for _, s := range r.Scaling {
			if s.Failures > 0 {
				failed = true
				p("- %s at %d: %d failures, the first: `%s`%s\n", s.Contender, s.Concurrency, s.Failures, s.FirstErr,
					map[bool]string{true: " (the level ran out of time)", false: ""}[s.TimedOut])
			}
		}
		if failed {
			p("\n")
		}
	}

	if len(r.Micro) > 0 {
		p("## In-process hot paths (Go benchmarks)\n\n| package | benchmark | ns/op | B/op | allocs/op |\n|---|---|--:|--:|--:|\n")
		for _, mb := range r.Micro {
			if mb.HasAlloc {
				p("| %s | %s | %.1f | %.0f | %.0f |\n", mb.Pkg, mb.Name, mb.NsPerOp, mb.BPerOp, mb.Allocs)
			} else {
				p("| %s | %s | %.1f | | |\n", mb.Pkg, mb.Name, mb.NsPerOp)
			}
		}
		p("\n")
	}

	if len(r.Notes) > 0 {
		p("## Notes\n\n")
		for _, n := range r.Notes {
			p("- %s\n", escape(n))
		}
		p("\n")
	}
	p("Charts: `startup.png` (cold-start distributions), `overhead.png` (ratios to bare), `scaling.png` (concurrency).\n")
	return b.String()
}

func workloads(rows []ColdRow) []string {
	var ws []string
	for _, r := range rows {
		if !contains(ws, r.Workload) {
			ws = append(ws, r.Workload)
		}
	}
	return ws
}

func orDash(x float64) string {
	if x == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", x)
}

func escape(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.ReplaceAll(s, "\n", " ")
}
