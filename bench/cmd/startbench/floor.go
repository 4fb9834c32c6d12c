package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os/exec"
	"path/filepath"
	"time"
)

// FloorRow is one program started outside any sandbox: what a start costs
// before anything is isolated.
type FloorRow struct {
	Program  string    `json:"program"`
	What     string    `json:"what"`
	Summary  Summary   `json:"summary_ms"`
	OverTrue float64   `json:"median_over_true_ms"`
	Failures int       `json:"failures"`
	FirstErr string    `json:"first_error,omitempty"`
	Samples  []float64 `json:"samples_ms"`
}

// FloorResult is the start-up floor section: the programs' starts and, from
// the cold-start table of the same run, what airlock's cold run would take
// with bubblewrap's process structure (one C program that forks its pid 1
// instead of executing a second program).
type FloorResult struct {
	Rows []FloorRow `json:"rows"`
	// The estimate, in ms; zero when a row it needs is missing.
	AirlockCold  float64 `json:"airlock_cold_true_ms"`
	BwrapCold    float64 `json:"bwrap_cold_true_ms"`
	CLIOverC     float64 `json:"cli_start_over_bwrap_start_ms"`
	InitStart    float64 `json:"init_start_ms"`
	Estimate     float64 `json:"airlock_without_go_starts_ms"`
	EstimateXBwr float64 `json:"estimate_vs_bwrap"`
}

// floorProgram is one program the floor section starts; ok is the exit
// status it ends with when it did what it should.
type floorProgram struct {
	name, what string
	argv       []string
	ok         int
}

// floorPrograms lists the starts to time: a C program, bubblewrap's own
// start, a small Go program, airlock's init with nothing to do (it says it
// was started by hand and exits 2) and airlock's CLI printing its version.
func floorPrograms(airlockBin, loopBin string) []floorProgram {
	return []floorProgram{
		{"true", "/bin/true: a small C program (dynamically linked)", []string{"/bin/true"}, 0},
		{"bwrap", "`bwrap --version`: bubblewrap's own start, nothing isolated", []string{"bwrap", "--version"}, 0},
		{"go", "`loop cpu 1`: a small static Go program (bench/cmd/loop) doing nothing to speak of: the Go runtime's start",
			[]string{loopBin, "cpu", "1"}, 0},
		{"airlock-init", "`airlock-init` started by hand: the sandbox init's start (its Go runtime and packages), then exit 2",
			[]string{filepath.Join(filepath.Dir(airlockBin), "airlock-init")}, 2},
		{"airlock", "`airlock version`: the CLI's start (its Go runtime and package initialization), nothing else",
			[]string{airlockBin, "version"}, 0},
	}
}

// startFloor times every program n times, from fork to reaped exit, once
// each per round in an order rotated every round, after warm rounds, like
// coldStart. Programs that are not installed are left out.
func startFloor(ctx context.Context, ps []floorProgram, n, warm int) []FloorRow {
	var run []floorProgram
	for _, p := range ps {
		if _, err := exec.LookPath(p.argv[0]); err != nil {
			log.Printf("start floor: %s left out: %v", p.name, err)
			continue
		}
		run = append(run, p)
	}
	rows := make([]FloorRow, len(run))
	for i, p := range run {
		rows[i] = FloorRow{Program: p.name, What: p.what}
	}
	for round := -warm; round < n; round++ {
		for j := range run {
			i := (j + max(round, 0)) % len(run)
			d, err := timeProgram(ctx, run[i])
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
			rows[i].Samples = append(rows[i].Samples, ms(d))
		}
	}
	var bare float64
	for i := range rows {
		rows[i].Summary = summarize(rows[i].Samples)
		if rows[i].Program == "true" {
			bare = rows[i].Summary.Median
		}
	}
	for i := range rows {
		if bare > 0 && rows[i].Summary.N > 0 {
			rows[i].OverTrue = rows[i].Summary.Median - bare
		}
	}
	return rows
}

// timeProgram runs p once with output discarded and checks its exit status.
func timeProgram(ctx context.Context, p floorProgram) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, runTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, p.argv[0], p.argv[1:]...)
	cmd.Env = cleanEnv
	start := time.Now()
	err := cmd.Run()
	d := time.Since(start)
	code := 0
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		code, err = ee.ExitCode(), nil
	}
	if err != nil {
		return 0, err
	}
	if code != p.ok {
		return 0, fmt.Errorf("%s exited %d, want %d", p.argv[0], code, p.ok)
	}
	return d, nil
}

// floorEstimate takes airlock's and bubblewrap's cold `true` from the
// cold-start rows and removes from airlock's what bubblewrap's process
// structure would not pay: the CLI's start beyond bubblewrap's own, and
// the init's whole start (bubblewrap forks its pid 1; airlock executes a
// second program). What is left is the sandbox's work, every layer on.
// Each input is a median of the same run; the estimate is theirs
// subtracted, not a measurement of such a build.
func floorEstimate(rows []FloorRow, cold []ColdRow) FloorResult {
	res := FloorResult{Rows: rows}
	med := map[string]float64{}
	for _, r := range rows {
		if r.Summary.N > 0 {
			med[r.Program] = r.Summary.Median
		}
	}
	for _, c := range cold {
		if c.Workload != "true" || c.Summary.N == 0 {
			continue
		}
		switch c.Contender {
		case "airlock":
			res.AirlockCold = c.Summary.Median
		case "bwrap":
			res.BwrapCold = c.Summary.Median
		}
	}
	cli, okCLI := med["airlock"]
	bw, okBw := med["bwrap"]
	ini, okInit := med["airlock-init"]
	if !okCLI || !okBw || !okInit || res.AirlockCold == 0 || res.BwrapCold == 0 {
		return res
	}
	res.CLIOverC = cli - bw
	res.InitStart = ini
	res.Estimate = res.AirlockCold - res.CLIOverC - res.InitStart
	res.EstimateXBwr = ratio(res.Estimate, res.BwrapCold)
	return res
}
