package main

import (
	"context"
	"fmt"
	"log"
	"time"
)

// Workload is a command line every contender runs.
type Workload struct {
	Name string   `json:"name"`
	Argv []string `json:"argv"`
}

// ColdRow is the start-up distribution of one workload under one contender.
type ColdRow struct {
	Workload  string    `json:"workload"`
	Contender string    `json:"contender"`
	Summary   Summary   `json:"summary_ms"`
	VsBare    float64   `json:"median_vs_bare"`
	VsBwrap   float64   `json:"median_vs_bwrap"`
	Failures  int       `json:"failures"`
	FirstErr  string    `json:"first_error,omitempty"`
	SamplesMS []float64 `json:"samples_ms"`
}

// runTimeout bounds one run (flag -run-timeout).
var runTimeout = 30 * time.Second

// timeRun runs argv under c once, from fork to reaped exit, with output
// discarded.
func timeRun(ctx context.Context, c *Contender, argv []string) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, runTimeout)
	defer cancel()
	cmd, release, err := c.Command(ctx, argv)
	if err != nil {
		return 0, err
	}
	defer release()
	start := time.Now()
	err = c.Run(cmd)
	return time.Since(start), err
}

// coldStart runs every workload under every contender n times. Each round
// runs all pairs once, in an order rotated by one every round, so slow
// phases of the shared VM hit every contender alike; the first warm rounds
// are thrown away (page cache, first cgroup creation).
// If the rounds take longer than budget, it stops early and says so.
func coldStart(ctx context.Context, cs []*Contender, ws []Workload, n, warm int, budget time.Duration) ([]ColdRow, string) {
	type pair struct {
		w Workload
		c *Contender
	}
	var pairs []pair
	for _, w := range ws {
		for _, c := range cs {
			pairs = append(pairs, pair{w, c})
		}
	}
	rows := make([]ColdRow, len(pairs))
	for i, p := range pairs {
		rows[i] = ColdRow{Workload: p.w.Name, Contender: p.c.Name}
	}
	t0 := time.Now()
	note := ""
	for round := -warm; round < n; round++ {
		if time.Since(t0) > budget {
			note = fmt.Sprintf("cold start stopped after %d of %d rounds: the %s budget ran out", round, n, budget)
			log.Print(note)
			break
		}
		for j := range pairs {
			i := (j + max(round, 0)) % len(pairs)
			if e := pairs[i].c.Every; e > 1 && (round < -1 || (round >= 0 && round%e != 0)) {
				continue // one warm-up round, then one round in e
			}
			d, err := timeRun(ctx, pairs[i].c, pairs[i].w.Argv)
			if round < 0 {
				continue
			}
			if err != nil {
				rows[i].Failures++
				if rows[i].FirstErr == "" {
					rows[i].FirstErr = err.Error()
				}
				continue
			}
			rows[i].SamplesMS = append(rows[i].SamplesMS, ms(d))
		}
		if round >= 0 && (round+1)%50 == 0 {
			log.Printf("cold start: %d/%d rounds (%s)", round+1, n, time.Since(t0).Round(time.Second))
		}
	}
	base := map[string]map[string]float64{}
	for i := range rows {
		rows[i].Summary = summarize(rows[i].SamplesMS)
		if base[rows[i].Workload] == nil {
			base[rows[i].Workload] = map[string]float64{}
		}
		base[rows[i].Workload][rows[i].Contender] = rows[i].Summary.Median
	}
	for i := range rows {
		b := base[rows[i].Workload]
		rows[i].VsBare = ratio(rows[i].Summary.Median, b["bare"])
		rows[i].VsBwrap = ratio(rows[i].Summary.Median, b["bwrap"])
	}
	return rows, note
}

func (r ColdRow) String() string {
	return fmt.Sprintf("%-8s %-9s median %7.2f ms  p99 %7.2f  min %7.2f  ×bare %5.2f  ×bwrap %5.2f  fail %d",
		r.Workload, r.Contender, r.Summary.Median, r.Summary.P99, r.Summary.Min, r.VsBare, r.VsBwrap, r.Failures)
}
