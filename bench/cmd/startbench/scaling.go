package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ScaleRow is start-up of /bin/true with C runs started at once.
type ScaleRow struct {
	Contender   string  `json:"contender"`
	Concurrency int     `json:"concurrency"`
	Rounds      int     `json:"rounds"`
	Runs        int     `json:"runs"`
	Failures    int     `json:"failures"`
	FirstErr    string  `json:"first_error,omitempty"`
	PerRun      Summary `json:"per_run_ms"`
	WallMS      float64 `json:"wall_ms"`         // summed over rounds
	Throughput  float64 `json:"runs_per_second"` // completed runs / wall
	TimedOut    bool    `json:"timed_out"`
	RoundWallMS float64 `json:"median_round_wall_ms"`
	BudgetS     float64 `json:"level_budget_s"` // the most the level may take (-level-budget)
	RunTimeoutS float64 `json:"run_timeout_s"`  // the most one run may take (-run-timeout)
}

func (r ScaleRow) String() string {
	s := fmt.Sprintf("scaling %-8s C=%3d rounds %2d  per-run median %8.1f ms p99 %8.1f  burst wall %8.1f ms  %6.1f runs/s  fail %d%s",
		r.Contender, r.Concurrency, r.Rounds, r.PerRun.Median, r.PerRun.P99, r.RoundWallMS, r.Throughput, r.Failures,
		map[bool]string{true: " (timed out)", false: ""}[r.TimedOut])
	if r.FirstErr != "" {
		s += " (first error: " + r.FirstErr + ")"
	}
	return s
}

// scaling starts c copies of /bin/true at once (released together), for
// each c in levels, alternating rounds between contenders. A level gets
// about 20 runs per contender, and at most budget (bench/run: 60 s).
func scaling(ctx context.Context, cs []*Contender, levels []int, budget time.Duration) []ScaleRow {
	var live []*Contender
	for _, c := range cs {
		if c != nil {
			live = append(live, c)
		}
	}
	var rows []ScaleRow
	for _, level := range levels {
		rounds := max(1, 20/level)
		lrows := make([]ScaleRow, len(live))
		samples := make([][]float64, len(live))
		walls := make([][]float64, len(live))
		lctx, cancel := context.WithTimeout(ctx, budget)
		for round := 0; round < rounds && lctx.Err() == nil; round++ {
			for i, c := range live {
				r := &lrows[i]
				r.Contender, r.Concurrency = c.Name, level
				r.BudgetS, r.RunTimeoutS = budget.Seconds(), runTimeout.Seconds()
				ds, errs, wall := burst(lctx, c, level)
				r.Rounds++
				walls[i] = append(walls[i], ms(wall))
				r.WallMS += ms(wall)
				for j, d := range ds {
					if errs[j] != nil {
						r.Failures++
						if r.FirstErr == "" {
							r.FirstErr = errs[j].Error()
						}
						continue
					}
					samples[i] = append(samples[i], ms(d))
				}
			}
		}
		timedOut := lctx.Err() != nil
		cancel()
		for i := range lrows {
			r := &lrows[i]
			r.PerRun = summarize(samples[i])
			r.Runs = len(samples[i])
			r.Throughput = ratio(float64(r.Runs), r.WallMS/1e3)
			r.RoundWallMS = summarize(walls[i]).Median
			r.TimedOut = timedOut
			rows = append(rows, *r)
		}
	}
	return rows
}

// burst starts n runs of /bin/true under c at the same instant and
// returns each one's duration and error, and the wall time of the burst.
func burst(ctx context.Context, c *Contender, n int) ([]time.Duration, []error, time.Duration) {
	ds := make([]time.Duration, n)
	errs := make([]error, n)
	var ready, done sync.WaitGroup
	gate := make(chan struct{})
	for i := range n {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			ready.Done()
			<-gate
			ds[i], errs[i] = timeRun(ctx, c, []string{"/bin/true"})
		}()
	}
	ready.Wait()
	start := time.Now()
	close(gate)
	done.Wait()
	return ds, errs, time.Since(start)
}

// parseLevels reads the -levels flag: positive integers separated by commas.
func parseLevels(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 1000 {
			return nil, fmt.Errorf("-levels %q: %q is not a concurrency level: give integers from 1 to 1000 separated by commas", s, f)
		}
		out = append(out, n)
	}
	return out, nil
}
