package main

import (
	"bufio"
	"context"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// MemRow is the memory of K idle sandboxes running sleep, per sandbox.
type MemRow struct {
	Contender string `json:"contender"`
	K         int    `json:"k"`
	// PSS and RSS in KiB summed over every process of a sandbox (the
	// launcher or supervisor and all its descendants), averaged over K.
	PSSKiB   float64 `json:"pss_kib_per_sandbox"`
	RSSKiB   float64 `json:"rss_kib_per_sandbox"`
	OuterPSS float64 `json:"outer_pss_kib"` // the process we started (airlock's supervisor, bwrap's parent)
	Procs    float64 `json:"procs_per_sandbox"`
	// MemAvailable before minus after, per sandbox: includes kernel
	// memory (page tables, namespaces, mounts, cgroups), but also noise.
	SystemKiB float64 `json:"memavailable_delta_kib_per_sandbox"`
	Error     string  `json:"error,omitempty"`
}

func (r MemRow) String() string {
	return fmt.Sprintf("memory %-8s K=%d  PSS %7.0f KiB/sandbox  RSS %7.0f  outer PSS %6.0f  procs %.1f  ΔMemAvailable %6.0f KiB %s",
		r.Contender, r.K, r.PSSKiB, r.RSSKiB, r.OuterPSS, r.Procs, r.SystemKiB, r.Error)
}

// memory starts k `sleep 30` under each contender, waits until every
// sleep runs, and reads /proc/PID/smaps_rollup for each process tree.
func memory(ctx context.Context, cs []*Contender, k int) []MemRow {
	var rows []MemRow
	for _, c := range cs {
		if c == nil {
			continue
		}
		r, err := memoryOne(ctx, c, k)
		if err != nil {
			r.Error = err.Error()
		}
		rows = append(rows, r)
	}
	return rows
}

func memoryOne(ctx context.Context, c *Contender, k int) (MemRow, error) {
	row := MemRow{Contender: c.Name, K: k}
	before := memAvailable()
	var cmds []*exec.Cmd
	defer func() {
		for _, cmd := range cmds {
			cmd.Process.Signal(syscall.SIGTERM)
		}
		for _, cmd := range cmds {
			done := make(chan struct{})
			go func() { cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				cmd.Process.Kill()
				<-done
			}
		}
	}()
	for range k {
		cmd, release, err := c.Command(ctx, []string{"/bin/sleep", "30"})
		if err != nil {
			return row, err
		}
		if err := c.Start(cmd); err != nil {
			release()
			return row, err
		}
		release()
		cmds = append(cmds, cmd)
	}
	// Wait until each tree has a process named sleep that is not the
	// tree's root (for bare, the root itself is sleep).
	deadline := time.Now().Add(15 * time.Second)
	var trees [][]int
	for {
		children := childMap()
		trees = trees[:0]
		ready := 0
		for _, cmd := range cmds {
			t := tree(children, cmd.Process.Pid)
			trees = append(trees, t)
			for _, pid := range t {
				if comm(pid) == "sleep" {
					ready++
					break
				}
			}
		}
		if ready == len(cmds) {
			break
		}
		if time.Now().After(deadline) {
			return row, fmt.Errorf("only %d of %d sandboxes reached sleep in 15s", ready, len(cmds))
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // let the supervisors settle after start-up
	after := memAvailable()
	var pss, rss, outer float64
	procs := 0
	for _, t := range trees {
		for i, pid := range t {
			p, r := rollup(pid)
			pss += p
			rss += r
			if i == 0 {
				outer += p
			}
			procs++
		}
	}
	kk := float64(k)
	row.PSSKiB, row.RSSKiB, row.OuterPSS, row.Procs = pss/kk, rss/kk, outer/kk, float64(procs)/kk
	row.SystemKiB = (before - after) / kk
	log.Printf("memory %s: %d processes in %d trees", c.Name, procs, k)
	return row, nil
}

// childMap maps every pid to its children, from /proc/*/stat.
func childMap() map[int][]int {
	m := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// The command name is in parentheses and may hold spaces; ppid is
		// the second field after the closing one.
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		m[ppid] = append(m[ppid], pid)
	}
	return m
}

// tree lists root and all its descendants, root first.
func tree(children map[int][]int, root int) []int {
	out := []int{root}
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i]]...)
	}
	return out
}

func comm(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return strings.TrimSpace(string(b))
}

// rollup returns Pss and Rss in KiB from /proc/PID/smaps_rollup.
func rollup(pid int) (pss, rss float64) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 2 {
			continue
		}
		v, _ := strconv.ParseFloat(fs[1], 64)
		switch fs[0] {
		case "Pss:":
			pss = v
		case "Rss:":
			rss = v
		}
	}
	return pss, rss
}

func memAvailable() float64 {
	b, _ := os.ReadFile("/proc/meminfo")
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			f, _ := strconv.ParseFloat(strings.Fields(v)[0], 64)
			return f
		}
	}
	return 0
}
