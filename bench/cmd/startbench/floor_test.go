package main

import (
	"context"
	"math"
	"strings"
	"testing"
)

func floorRow(program string, median float64) FloorRow {
	return FloorRow{Program: program, Summary: Summary{N: 1, Median: median, Min: median}}
}

func coldRow(workload, contender string, median float64) ColdRow {
	return ColdRow{Workload: workload, Contender: contender, Summary: Summary{N: 1, Median: median}}
}

// TestFloorEstimate: the estimate is airlock's cold `true` less the CLI's
// start beyond bubblewrap's and the init's whole start, against
// bubblewrap's cold `true`; the python3 rows are not mixed in, and any
// missing input gives no estimate rather than a wrong one.
func TestFloorEstimate(t *testing.T) {
	rows := []FloorRow{floorRow("true", 0.7), floorRow("bwrap", 0.9), floorRow("go", 1.3),
		floorRow("airlock-init", 1.5), floorRow("airlock", 2.1)}
	cold := []ColdRow{coldRow("true", "airlock", 10.8), coldRow("true", "bwrap", 6.6),
		coldRow("python3", "airlock", 24.0), coldRow("python3", "bwrap", 18.6)}
	f := floorEstimate(rows, cold)
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	if !near(f.AirlockCold, 10.8) || !near(f.BwrapCold, 6.6) || !near(f.CLIOverC, 1.2) || !near(f.InitStart, 1.5) ||
		!near(f.Estimate, 8.1) || !near(f.EstimateXBwr, 8.1/6.6) {
		t.Errorf("floorEstimate = %+v; want airlock 10.8, bwrap 6.6, CLI over C 1.2, init 1.5, estimate 8.1 (%.3f×)", f, 8.1/6.6)
	}
	md := markdown(&Results{Floor: &f})
	if !strings.Contains(md, "8.10 ms, 1.23 × bubblewrap's cold `true`") {
		t.Errorf("results.md does not state the estimate:\n%s", md)
	}

	for _, missing := range []string{"airlock", "bwrap", "airlock-init"} {
		var rs []FloorRow
		for _, r := range rows {
			if r.Program != missing {
				rs = append(rs, r)
			}
		}
		if f := floorEstimate(rs, cold); f.Estimate != 0 {
			t.Errorf("without %s: estimate %.2f; want none", missing, f.Estimate)
		}
	}
	if f := floorEstimate(rows, cold[2:]); f.Estimate != 0 {
		t.Errorf("without the cold `true` rows: estimate %.2f; want none", f.Estimate)
	}
	if strings.Contains(markdown(&Results{Floor: &FloorResult{Rows: rows}}), "leaves") {
		t.Error("results.md states an estimate the run did not make")
	}
}

// TestTimeProgramChecksExit: a program is timed only when it exits as it
// should; another status, or one that cannot start, is a failure.
func TestTimeProgramChecksExit(t *testing.T) {
	ctx := context.Background()
	if _, err := timeProgram(ctx, floorProgram{argv: []string{"/bin/true"}, ok: 0}); err != nil {
		t.Errorf("/bin/true, want 0: %v", err)
	}
	if _, err := timeProgram(ctx, floorProgram{argv: []string{"/bin/sh", "-c", "exit 2"}, ok: 2}); err != nil {
		t.Errorf("exit 2, want 2: %v", err)
	}
	if _, err := timeProgram(ctx, floorProgram{argv: []string{"/bin/false"}, ok: 0}); err == nil {
		t.Error("/bin/false, want 0: no error")
	}
	if _, err := timeProgram(ctx, floorProgram{argv: []string{"/nonexistent/program"}, ok: 0}); err == nil {
		t.Error("a program that does not exist: no error")
	}
}
