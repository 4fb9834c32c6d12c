package fsaudit

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"
)

// event is one record fed to a tracker, or a Track call: exactly one of
// access, domain and track is set.
type event struct {
	access string // AUDIT_LANDLOCK_ACCESS text
	domain string // AUDIT_LANDLOCK_DOMAIN text
	track  int    // pid to track
}

func acc(domain, blockers, path string) event {
	return event{access: fmt.Sprintf("domain=%s blockers=%s path=%q dev=\"vda\" ino=1", domain, blockers, path)}
}
func alloc(domain string, tid int) event {
	return event{domain: fmt.Sprintf("domain=%s status=allocated mode=enforcing pid=%d uid=0 exe=\"/x\" comm=\"x\"", domain, tid)}
}
func free(domain string, n int) event {
	return event{domain: fmt.Sprintf("domain=%s status=deallocated denials=%d", domain, n)}
}
func track(pid int) event { return event{track: pid} }

// feed plays events into a tracker whose threads 101 and 102 belong to
// process 100, and 201 to 200; it returns the runs by pid.
func feed(t *testing.T, events []event) (*tracker, map[int]*Run) {
	t.Helper()
	threads := map[int]int{101: 100, 102: 100, 201: 200}
	tr := newTracker("/", func(tid int) int {
		if pid, ok := threads[tid]; ok {
			return pid
		}
		return tid
	})
	runs := map[int]*Run{}
	for _, e := range events {
		switch {
		case e.track != 0:
			runs[e.track] = tr.track(e.track)
		case e.access != "":
			r, ok := parseAccess([]byte(e.access))
			if !ok {
				t.Fatalf("bad access record %q", e.access)
			}
			tr.access(r)
		default:
			r, ok := parseDomainRecord([]byte(e.domain))
			if !ok {
				t.Fatalf("bad domain record %q", e.domain)
			}
			tr.domainEvent(r)
		}
	}
	return tr, runs
}

// summary lists a run's denials as "op target xcount".
func summary(r *Run) []string {
	var out []string
	for _, d := range r.Denials() {
		out = append(out, fmt.Sprintf("%s %s x%d", d.Op, d.Target, d.Count))
	}
	return out
}

func TestTracker(t *testing.T) {
	tests := []struct {
		name   string
		events []event
		want   map[int][]string // denials by tracked pid
	}{
		{"track-first", []event{
			track(100), acc("a", "fs.read_dir", "/"), alloc("a", 100), acc("a", "fs.read_file", "/secret"),
		}, map[int][]string{100: {"read /secret x1"}}},
		{"thread-created-domain", []event{
			track(100), acc("a", "fs.read_dir", "/"), alloc("a", 101), acc("a", "fs.execute,fs.read_file", "/usr/bin/true"),
		}, map[int][]string{100: {"exec /usr/bin/true x1"}}},
		{"late-track-claims", []event{
			acc("a", "fs.read_dir", "/"), alloc("a", 102), acc("a", "fs.read_file", "/secret"), free("a", 2), track(100),
		}, map[int][]string{100: {"read /secret x1"}}},
		{"runs-not-mixed", []event{
			track(100), track(200),
			acc("a", "fs.read_dir", "/"), alloc("a", 101),
			acc("b", "fs.read_dir", "/"), alloc("b", 201),
			acc("a", "fs.read_file", "/a"), acc("b", "fs.read_file", "/b"), acc("c", "fs.read_file", "/c"), alloc("c", 300),
		}, map[int][]string{100: {"read /a x1"}, 200: {"read /b x1"}}},
		{"self-test-only-first", []event{
			track(100), acc("a", "fs.read_dir", "/"), alloc("a", 100), acc("a", "fs.read_dir", "/"),
		}, map[int][]string{100: {"list / x1"}}},
		{"first-not-self-test-kept", []event{
			track(100), acc("a", "fs.read_file", "/x"), alloc("a", 100),
		}, map[int][]string{100: {"read /x x1"}}},
		{"dedupe-counts", []event{
			track(100), acc("a", "fs.read_dir", "/"), alloc("a", 100),
			acc("a", "fs.read_file", "/x"), acc("a", "fs.read_file", "/x"), acc("a", "fs.write_file", "/x"),
		}, map[int][]string{100: {"read /x x2", "write /x x1"}}},
		{"two-domains-one-run", []event{
			track(100), acc("a", "fs.read_file", "/x"), alloc("a", 101), acc("b", "fs.read_file", "/y"), alloc("b", 102),
		}, map[int][]string{100: {"read /x x1", "read /y x1"}}},
		{"untracked-pid", []event{
			track(100), acc("a", "fs.read_file", "/x"), alloc("a", 999),
		}, map[int][]string{100: nil}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, runs := feed(t, tt.events)
			for pid, want := range tt.want {
				if got := summary(runs[pid]); !slices.Equal(got, want) {
					t.Errorf("run %d denials = %q, want %q", pid, got, want)
				}
			}
		})
	}
}

func TestSettle(t *testing.T) {
	tests := []struct {
		name    string
		events  []event
		settled bool
		stats   Stats
	}{
		{"freed", []event{track(100), acc("a", "fs.read_dir", "/"), alloc("a", 100), acc("a", "fs.read_file", "/x"), free("a", 2)},
			true, Stats{Records: 2, KernelDenials: 2}},
		{"kernel-dropped-some", []event{track(100), acc("a", "fs.read_dir", "/"), alloc("a", 100), free("a", 5)},
			true, Stats{Records: 1, KernelDenials: 5}},
		{"late-track-freed", []event{acc("a", "fs.read_dir", "/"), alloc("a", 100), free("a", 1), track(100)},
			true, Stats{Records: 1, KernelDenials: 1}},
		{"one-domain-live", []event{track(100), acc("a", "fs.read_dir", "/"), alloc("a", 100), acc("b", "fs.read_dir", "/"), alloc("b", 101), free("a", 1)},
			false, Stats{Records: 2, KernelDenials: 1}},
		{"no-domain-yet", []event{track(100)}, false, Stats{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, runs := feed(t, tt.events)
			run := runs[100]
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			if !tt.settled {
				// Only the deadline can end the wait: nothing else happens.
				cancel()
			}
			_, err := run.Settle(ctx)
			if settled := err == nil; settled != tt.settled {
				t.Errorf("Settle() error = %v, want settled %v", err, tt.settled)
			}
			if got := run.Stats(); got != tt.stats {
				t.Errorf("Stats() = %+v, want %+v", got, tt.stats)
			}
			if got, want := run.Stats().Incomplete(), tt.stats.KernelDenials > uint64(tt.stats.Records); got != want {
				t.Errorf("Stats().Incomplete() = %v, want %v", got, want)
			}
		})
	}
}

// TestWaitWakes checks that a record arriving while Wait blocks ends the
// wait, with no deadline involved.
func TestWaitWakes(t *testing.T) {
	tr, runs := feed(t, []event{track(100), acc("a", "fs.read_dir", "/"), alloc("a", 100)})
	go func() {
		r, _ := parseAccess([]byte(`domain=a blockers=fs.read_file path="/late"`))
		tr.access(r)
	}()
	ds, err := runs[100].Wait(context.Background(), func(ds []Denial) bool { return len(ds) == 1 })
	if err != nil || len(ds) != 1 || ds[0].Target != "/late" {
		t.Errorf("Wait() = %+v, %v, want one denial of /late", ds, err)
	}
}

func TestRunClose(t *testing.T) {
	tr, runs := feed(t, []event{track(100), acc("a", "fs.read_dir", "/"), alloc("a", 100), acc("a", "fs.read_file", "/x")})
	runs[100].Close()
	r, _ := parseAccess([]byte(`domain=a blockers=fs.read_file path="/after"`))
	tr.access(r)
	if got, want := summary(runs[100]), []string{"read /x x1"}; !slices.Equal(got, want) {
		t.Errorf("denials after Close = %q, want %q", got, want)
	}
	if len(tr.runs) != 0 {
		t.Errorf("tracker still holds %d runs after Close", len(tr.runs))
	}
}

// TestBounds checks that unclaimed domains and a run's distinct denials
// stay bounded.
func TestBounds(t *testing.T) {
	var events []event
	for i := range maxDomains + 10 {
		events = append(events, acc(fmt.Sprintf("%x", i+1), "fs.read_file", "/x"), alloc(fmt.Sprintf("%x", i+1), 5000+i))
	}
	events = append(events, track(100), acc("fffff", "fs.read_dir", "/"), alloc("fffff", 100))
	for i := range maxDenials + 5 {
		events = append(events, acc("fffff", "fs.read_file", fmt.Sprintf("/f%d", i)))
	}
	tr, runs := feed(t, events)
	if n := len(tr.domains); n > maxDomains+1 {
		t.Errorf("tracker remembers %d domains, want at most %d", n, maxDomains+1)
	}
	if n, st := len(runs[100].Denials()), runs[100].Stats(); n != maxDenials || st.Dropped != 5 || !st.Incomplete() {
		t.Errorf("run keeps %d denials, stats %+v, want %d and 5 dropped", n, st, maxDenials)
	}
}
