// Command startbench measures airlock against a bare fork+exec and other
// sandboxes on this machine: cold start, steady-state overhead, the egress
// proxy, exec into a warm session, memory per idle sandbox and start-up
// under concurrency. bench/run builds it and calls it; it writes
// results.json and results.md to -out, and bench/plot.py draws the charts
// from results.json.
//
// It uses airlock only through its public packages (bench is its own
// module; imports_test.go holds the rule). The peers that rebuild airlock's
// sandbox start from what airlock ships: runc and crun run the bundle
// export/oci writes for the compiled plan, bubblewrap gets the plan's
// mounts and the seccomp filter read from a running airlock sandbox, and
// contenders_test.go checks that each of them answers a probe exactly as
// `airlock run` does.
//
// It calls sandbox.Init first, as every program that links the sandbox
// package must: the session benchmark re-executes this binary as the
// sandbox's init.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/sandbox"
)

// Results is everything one run measured; results.json is this value.
type Results struct {
	Meta        Meta             `json:"meta"`
	Contenders  []ContenderInfo  `json:"contenders"`
	ColdStart   []ColdRow        `json:"cold_start"`
	Floor       *FloorResult     `json:"start_floor,omitempty"`
	Steady      []SteadyRow      `json:"steady_state"`
	Proxy       *ProxyResult     `json:"proxy,omitempty"`
	Egress      *EgressResult    `json:"egress_in_sandbox,omitempty"`
	Clients     *ClientsResult   `json:"egress_clients,omitempty"`
	Session     *SessionResult   `json:"session_exec,omitempty"`
	Serve       *ServeResult     `json:"serve,omitempty"`
	Memory      []MemRow         `json:"memory"`
	Scaling     []ScaleRow       `json:"scaling"`
	Micro       []MicroBenchmark `json:"micro_benchmarks"`
	Notes       []string         `json:"notes"`
	Targets     []Target         `json:"targets"`
	ElapsedSecs float64          `json:"elapsed_s"`
}

// Meta describes the machine and the run.
type Meta struct {
	Date    string `json:"date"`
	Kernel  string `json:"kernel"`
	Go      string `json:"go"`
	CPUs    int    `json:"cpus"`
	CPU     string `json:"cpu_model"`
	N       int    `json:"n"`
	Airlock string `json:"airlock_version"`
	PinCPU  int    `json:"pin_cpu"`
	// Load averages (1 min) when the run started and ended: this VM is
	// shared, and everything else running on it shows up in the numbers.
	LoadStart string `json:"loadavg_start"`
	LoadEnd   string `json:"loadavg_end"`
}

// ContenderInfo is a Contender as reported.
type ContenderInfo struct {
	Name        string `json:"name"`
	Available   bool   `json:"available"`
	Reason      string `json:"reason,omitempty"`
	Equivalence string `json:"equivalence"`
}

func main() {
	sandbox.Init()
	log.SetFlags(log.Ltime)
	out := flag.String("out", "", "directory for results.json and results.md (required)")
	n := flag.Int("n", envInt("BENCH_N", 200), "runs per contender for cold start (env BENCH_N)")
	airlockBin := flag.String("airlock", "", "airlock binary built with CGO_ENABLED=0 (required)")
	loopBin := flag.String("loop", "", "the bench/cmd/loop binary (required)")
	repo := flag.String("repo", ".", "repository root, for go test ./egress/ ./policy/...")
	pin := flag.Int("cpu", runtime.NumCPU()-1, "CPU that the steady-state loops are pinned to")
	coldBudget := flag.Duration("cold-budget", 7*time.Minute, "stop the cold-start rounds early after this long")
	only := flag.String("only", "", "comma-separated sections to run (cold,floor,steady,proxy,egress,clients,session,serve,memory,scaling,micro); empty runs all")
	clientRequests := flag.Int("client-requests", 32, "requests per row and round in the clients section (a multiple of 4: the concurrent rows run 4 at once)")
	clientRounds := flag.Int("client-rounds", 3, "rounds of the clients section")
	levels := flag.String("levels", "1,10,50,200", "comma-separated concurrency levels for the scaling section")
	levelBudget := flag.Duration("level-budget", 60*time.Second, "longest a scaling level may take")
	flag.DurationVar(&runTimeout, "run-timeout", runTimeout, "longest one run may take before it is killed and counted as a failure")
	flag.Parse()
	if *out == "" || *airlockBin == "" || *loopBin == "" {
		flag.Usage()
		os.Exit(2)
	}
	lv, err := parseLevels(*levels)
	if err != nil {
		log.Fatal(err)
	}
	run := func(s string) bool { return *only == "" || strings.Contains(","+*only+",", ","+s+",") }
	start := time.Now()
	ctx := context.Background()
	work, err := os.MkdirTemp("", "airlock-bench-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(work)
	// The OCI runtimes' mapped root (host uid 100000) must reach the bundle.
	if err := os.Chmod(work, 0o755); err != nil {
		log.Fatal(err)
	}

	res := &Results{Meta: meta(*n, *airlockBin, *pin)}
	cs, notes := contenders(ctx, work, *airlockBin, *n)
	res.Notes = append(res.Notes, notes...)
	for _, c := range cs {
		res.Contenders = append(res.Contenders, ContenderInfo{c.Name, c.Available, c.Reason, c.Equivalence})
		if !c.Available {
			log.Printf("contender %s unavailable: %s", c.Name, c.Reason)
		}
	}
	avail := func(names ...string) []*Contender {
		var r []*Contender
		for _, c := range cs {
			if c.Available && (len(names) == 0 || contains(names, c.Name)) {
				r = append(r, c)
			}
		}
		return r
	}
	byName := func(name string) *Contender {
		if r := avail(name); len(r) == 1 {
			return r[0]
		}
		return nil
	}

	if run("cold") {
		ws := []Workload{{"true", []string{"/bin/true"}}, {"python3", []string{"/usr/bin/python3", "-c", "pass"}}}
		log.Printf("cold start: %d rounds × %d contenders × %d workloads", *n, len(avail()), len(ws))
		var note string
		res.ColdStart, note = coldStart(ctx, avail(), ws, *n, 3, *coldBudget)
		if note != "" {
			res.Notes = append(res.Notes, note)
		}
		for _, r := range res.ColdStart {
			log.Print(r)
		}
	}
	if run("floor") {
		rows := startFloor(ctx, floorPrograms(*airlockBin, *loopBin), *n, 3)
		f := floorEstimate(rows, res.ColdStart)
		res.Floor = &f
		for _, r := range rows {
			log.Printf("start floor: %-12s median %6.2f ms (+%.2f over true), failures %d", r.Program, r.Summary.Median, r.OverTrue, r.Failures)
		}
	}
	if run("steady") {
		res.Steady = steady(ctx, avail("bare", "bwrap", "airlock"), *loopBin, *pin)
		for _, r := range res.Steady {
			log.Print(r)
		}
	}
	if run("proxy") {
		p, err := proxyBench(ctx, *repo)
		if err != nil {
			res.Notes = append(res.Notes, "proxy benchmark: "+err.Error())
			log.Print("proxy: ", err)
		}
		res.Proxy = p
	}
	if run("egress") {
		e, err := egressBench(ctx, *airlockBin)
		if err != nil {
			res.Notes = append(res.Notes, "egress benchmark: "+err.Error())
			log.Print("egress: ", err)
		}
		res.Egress = e
	}
	if run("clients") {
		c, err := clientsBench(ctx, *airlockBin, work, *clientRequests, 4, *clientRounds)
		if err != nil {
			res.Notes = append(res.Notes, "clients benchmark: "+err.Error())
			log.Print("clients: ", err)
		}
		res.Clients = c
	}
	if run("session") {
		s := sessionBench(ctx, *n)
		res.Session = &s
		log.Printf("session exec: %+v", s)
	}
	if run("serve") {
		res.Serve = serveBench(ctx, *airlockBin, min(*n, 100), 100)
	}
	if run("memory") {
		res.Memory = memory(ctx, []*Contender{byName("bare"), byName("bwrap"), byName("airlock")}, 10)
		for _, r := range res.Memory {
			log.Print(r)
		}
	}
	if run("scaling") {
		res.Scaling = scaling(ctx, []*Contender{byName("airlock"), byName("bwrap")}, lv, *levelBudget)
		for _, r := range res.Scaling {
			log.Print(r)
		}
	}
	if run("micro") {
		m, err := microBench(ctx, *repo)
		if err != nil {
			res.Notes = append(res.Notes, "micro benchmarks: "+err.Error())
		}
		res.Micro = m
	}
	res.ElapsedSecs = time.Since(start).Seconds()
	res.Targets = targets(res)
	res.Meta.LoadEnd = loadavg()
	if err := write(*out, res); err != nil {
		log.Fatal(err)
	}
	log.Printf("wrote %s and %s in %s", filepath.Join(*out, "results.json"), filepath.Join(*out, "results.md"),
		time.Since(start).Round(time.Second))
}

// contenders builds every contender and probes it once.
func contenders(ctx context.Context, work, airlockBin string, n int) ([]*Contender, []string) {
	var notes []string
	cs := []*Contender{
		{Name: "bare", Equivalence: "plain fork+exec from Go (os/exec), no isolation", command: plain("")},
		{Name: "unshare", Equivalence: "util-linux unshare -U -m -p -n -i -u -C --fork --map-root-user: the 7 namespaces and nothing else " +
			"(same root filesystem, no mounts, no seccomp, no Landlock, no cgroups)",
			command: plain("unshare", "-U", "-m", "-p", "-n", "-i", "-u", "-C", "--fork", "--map-root-user")},
	}
	ps := newPlans()
	if b, err := bwrapContender(ctx, work, airlockBin, ps); err != nil {
		notes = append(notes, "bwrap: "+err.Error())
		cs = append(cs, &Contender{Name: "bwrap", Reason: err.Error()})
	} else {
		cs = append(cs, b)
	}
	cs = append(cs, firejailContender())
	bc := newBundleCache(work, ps)
	for _, name := range []string{"runc", "crun"} {
		cs = append(cs, ociContender(name, work, bc))
	}
	cs = append(cs, &Contender{Name: "airlock",
		Equivalence: "airlock run with the default policy (nothing granted): 7 namespaces, root made of the system base " +
			"and the command, Landlock, seccomp, no capabilities, cgroup limits, rlimits, deadline, output capture; " +
			"filesystem-denial reporting off (the default; --fs-audit turns the host's kernel audit on and waits ~40 ms per run for the kernel to release the Landlock domain)",
		command: plain(airlockBin, "run")})
	cs = append(cs, &Contender{Name: "airlock-landlock",
		Equivalence: "airlock run --isolation landlock with the default policy: the backend without namespaces (for where user namespaces " +
			"cannot be created): Landlock on the host's filesystem, seccomp with connect answered by the supervisor, no capabilities, " +
			"a subreaper init, cgroup limits, rlimits, a scratch folder, deadline, output capture",
		command: plain(airlockBin, "run", "--isolation", "landlock")})
	cs = append(cs, &Contender{Name: "airlock-gvisor",
		Equivalence: "airlock run --isolation gvisor with the default policy: airlock's OCI bundle under gVisor's runsc (platform as doctor says: " +
			"ptrace on this host), with airlock's proxy, deadline, output capture and report around it",
		command: plain(airlockBin, "run", "--isolation", "gvisor")})
	cs = append(cs, &Contender{Name: "airlock-microvm",
		Equivalence: "airlock run --isolation microvm with the default policy: QEMU's microvm machine under " +
			"software emulation (TCG; KVM guests hang on this host) boots the guest kernel with airlock's initramfs, whose init applies " +
			"the same plan in the guest; QEMU in airlock's namespace sandbox on the host; deadline, output capture and report from the host. " +
			"Measured in 1 round of 10 or more (each run boots a VM)",
		Every:   max(1, n/10),
		command: plain(airlockBin, "run", "--isolation", "microvm")})
	for _, c := range cs {
		if c.command == nil || c.Reason != "" {
			continue
		}
		if _, err := exec.LookPath(binaryOf(c)); err != nil && c.Name != "bare" {
			c.Reason = "not installed: " + err.Error()
			continue
		}
		c.probe(ctx)
	}
	return cs, notes
}

// binaryOf returns the program a contender starts, for the install check.
func binaryOf(c *Contender) string {
	cmd, _, err := c.command(context.Background(), []string{"/bin/true"})
	if err != nil {
		return c.Name
	}
	return cmd.Path
}

func meta(n int, airlockBin string, pin int) Meta {
	m := Meta{Date: time.Now().UTC().Format(time.RFC3339), Go: runtime.Version(), CPUs: runtime.NumCPU(), N: n, PinCPU: pin,
		LoadStart: loadavg()}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := exec.Command(airlockBin, "version").Output(); err == nil {
		m.Airlock = strings.TrimSpace(string(b))
	}
	return m
}

func write(dir string, res *Results) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	data, err := json.MarshalIndent(res, "", " ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), data, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "results.md"), []byte(markdown(res)), 0o644)
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
