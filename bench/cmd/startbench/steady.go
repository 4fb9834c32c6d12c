package main

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// SteadyRow is the per-operation cost of one loop under one contender,
// measured inside the loop so start-up is excluded.
type SteadyRow struct {
	Workload  string    `json:"workload"`
	Contender string    `json:"contender"`
	NsPerOp   Summary   `json:"ns_per_op"`
	VsBare    float64   `json:"median_vs_bare"`
	MinVsBare float64   `json:"min_vs_bare"`
	Failures  int       `json:"failures"`
	FirstErr  string    `json:"first_error,omitempty"`
	Samples   []float64 `json:"samples_ns"`
}

func (r SteadyRow) String() string {
	return fmt.Sprintf("steady %-13s %-8s median %9.2f ns/op  min %9.2f  ×bare %5.3f (min %5.3f)  fail %d",
		r.Workload, r.Contender, r.NsPerOp.Median, r.NsPerOp.Min, r.VsBare, r.MinVsBare, r.Failures)
}

const pyStat = `import os, time
n = 50000
t = time.perf_counter_ns()
for _ in range(n):
    os.stat("/")
print((time.perf_counter_ns() - t) / n)
`

// withAffinity runs fn on a thread pinned to cpu, so processes that fn
// starts inherit the pin (sched_setaffinity(2) masks are inherited across
// fork and execve). The VM's two vCPUs differ by ~1.5× on syscall loops.
func withAffinity(cpu int, fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var old, set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return err
	}
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return err
	}
	defer unix.SchedSetaffinity(0, &old)
	return fn()
}

// steady runs each loop reps times under each contender, interleaved, with
// every process pinned to one CPU, and reads the ns/op the loop printed.
func steady(ctx context.Context, cs []*Contender, loopBin string, cpu int) []SteadyRow {
	ws := []Workload{
		{"getpid", []string{loopBin, "getpid", "100000"}},
		{"stat", []string{loopBin, "stat", "50000"}},
		{"open+close", []string{loopBin, "open", "20000"}},
		{"cpu", []string{loopBin, "cpu", "50000000"}},
		{"python-stat", []string{"/usr/bin/python3", "-c", pyStat}},
	}
	const reps = 9
	var rows []SteadyRow
	idx := map[[2]string]int{}
	for _, w := range ws {
		for _, c := range cs {
			idx[[2]string{w.Name, c.Name}] = len(rows)
			rows = append(rows, SteadyRow{Workload: w.Name, Contender: c.Name})
		}
	}
	t0 := time.Now()
	for rep := 0; rep < reps; rep++ {
		for _, w := range ws {
			for k := range cs {
				c := cs[(k+rep)%len(cs)]
				r := &rows[idx[[2]string{w.Name, c.Name}]]
				v, err := runLoop(ctx, c, w.Argv, cpu)
				if err != nil {
					r.Failures++
					if r.FirstErr == "" {
						r.FirstErr = err.Error()
					}
					continue
				}
				r.Samples = append(r.Samples, v)
			}
		}
	}
	log.Printf("steady state: %d reps in %s", reps, time.Since(t0).Round(time.Second))
	base := map[string]Summary{}
	for i := range rows {
		rows[i].NsPerOp = summarize(rows[i].Samples)
		if rows[i].Contender == "bare" {
			base[rows[i].Workload] = rows[i].NsPerOp
		}
	}
	for i := range rows {
		b := base[rows[i].Workload]
		rows[i].VsBare = ratio(rows[i].NsPerOp.Median, b.Median)
		rows[i].MinVsBare = ratio(rows[i].NsPerOp.Min, b.Min)
	}
	return rows
}

func runLoop(ctx context.Context, c *Contender, argv []string, cpu int) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd, release, err := c.Command(ctx, argv)
	if err != nil {
		return 0, err
	}
	defer release()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := withAffinity(cpu, cmd.Start); err != nil {
		return 0, err
	}
	if err := cmd.Wait(); err != nil {
		return 0, fmt.Errorf("%v: %s", err, strings.TrimSpace(errb.String()))
	}
	fields := strings.Fields(out.String())
	if len(fields) == 0 {
		return 0, fmt.Errorf("no output (stderr %q)", errb.String())
	}
	return strconv.ParseFloat(fields[len(fields)-1], 64)
}
